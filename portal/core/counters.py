"""Fixed-window counters in the shared cache: the API's rate limit and the login throttle.

DRF's SimpleRateThrottle keeps a list of timestamps per client, which costs
O(rate) per request at CI rates; a fixed-window counter costs one cache
round trip (one Redis script: INCR, and EXPIRE on the window's first hit).
Both helpers fail open: a cache outage must not turn into 500s.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import NoScriptError

from portal.env import parse_rate

__all__ = ["count_hit", "hit", "parse_rate", "read_count", "uncount"]

log = logging.getLogger(__name__)

# Count a hit and start the window's expiry on its first one, atomically: one round
# trip, where Django's incr() asks EXISTS first and add() + incr() is two.
COUNT_SCRIPT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""
COUNT_SHA = hashlib.sha1(COUNT_SCRIPT.encode()).hexdigest()

# Without Redis (`make run`), counts are made atomic within the process by this lock;
# across processes the file cache can still lose a count (docs/security.md).
_LOCAL = threading.Lock()


def hit(key: str, period: int) -> int:
    """Count one hit in the window's counter and return the count (raises if the cache is down)."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        redis_key = backend.make_and_validate_key(key)
        client = backend._cache.get_client(redis_key, write=True)
        try:
            return client.evalsha(COUNT_SHA, 1, redis_key, period + 1)
        except NoScriptError:  # first use on this Redis, or after SCRIPT FLUSH / restart
            return client.eval(COUNT_SCRIPT, 1, redis_key, period + 1)
    with _LOCAL:  # the file and memory caches' incr is a read then a write
        try:
            return cache.incr(key)
        except ValueError:
            if cache.add(key, 1, timeout=period + 1):
                return 1
        return cache.incr(key)


def count_hit(key: str, period: int) -> int:
    """`hit`, or 0 with a warning when the cache is away."""
    try:
        return hit(key, period)
    except Exception:  # noqa: BLE001 — a cache outage must not fail the request
        log.warning("counter cache unavailable; not counting", exc_info=True)
        return 0


def read_count(key: str) -> int:
    """The counter's value, or 0 with a warning when the cache is away."""
    try:
        return int(cache.get(key) or 0)
    except Exception:  # noqa: BLE001
        log.warning("counter cache unavailable; not counting", exc_info=True)
        return 0


def uncount(key: str) -> None:
    """Take one hit back (never below zero, never past the window's end), or nothing when
    the cache is away."""
    try:
        with _LOCAL:
            if cache.decr(key) < 0:
                cache.incr(key)
    except ValueError:  # the window ended and its counter with it
        pass
    except Exception:  # noqa: BLE001
        log.warning("counter cache unavailable; not counting", exc_info=True)

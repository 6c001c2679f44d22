"""Fixed-window counters in the shared cache: the API's rate limit and the login throttle.

DRF's SimpleRateThrottle keeps a list of timestamps per client, which costs
O(rate) per request at CI rates; a fixed-window counter costs one cache
round trip (one Redis script: INCR, and EXPIRE on the window's first hit).
Both helpers fail open: a cache outage must not turn into 500s.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading

from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

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
        # make_key, not make_and_validate_key: validation only warns about keys that
        # memcached would refuse, and this module's keys are short ASCII.
        return _redis_count(backend, backend.make_key(key), period + 1)
    with _LOCAL:  # the file and memory caches' incr is a read then a write
        try:
            return cache.incr(key)
        except ValueError:
            if cache.add(key, 1, timeout=period + 1):
                return 1
        return cache.incr(key)


class _Link(threading.local):
    """This thread's own connection to the cache's Redis (from its pool, never given
    back), for the counters' one command a request."""

    connection = None
    pool = None
    pid = None


_LINK = _Link()


def _redis_count(backend: RedisCache, redis_key: str, expire_s: int) -> int:
    """Run COUNT_SCRIPT on the thread's own connection: one request's counting through
    redis-py's client (taking a connection from the pool and checking it, the retry
    policy, the observability hooks, giving it back) cost twice the command itself on
    every API request (docs/benchmarks.md, issue 19). A connection that fails is
    dropped and the command sent once more on a new one; a second failure raises, as
    the client would after its retries."""
    pool = backend._cache._get_connection_pool(write=True)
    link = _LINK
    if link.connection is None or link.pool is not pool or link.pid != os.getpid():
        link.connection, link.pool, link.pid = pool.get_connection(), pool, os.getpid()
    try:
        return _evalsha(link.connection, redis_key, expire_s)
    except (RedisConnectionError, RedisTimeoutError, OSError):
        link.connection.disconnect()  # the next command connects again
        return _evalsha(link.connection, redis_key, expire_s)


# The command as Redis's protocol writes it, but for its last two arguments (redis-py's
# packer, a Python loop over the arguments, was a third of the counting).
_EVALSHA_HEAD = b"*5\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % COUNT_SHA.encode()


def _evalsha(connection, redis_key: str, expire_s: int) -> int:
    key, expire = redis_key.encode(), b"%d" % expire_s
    packed = _EVALSHA_HEAD + b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(expire), expire)
    connection.send_packed_command([packed])  # a list of chunks, as the packer returns
    try:
        return connection.read_response()
    except NoScriptError:  # first use on this Redis, or after SCRIPT FLUSH / restart
        connection.send_command("EVAL", COUNT_SCRIPT, 1, redis_key, expire_s)
        return connection.read_response()


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

"""Per-token request throttling and login-failure counting, in the shared cache.

DRF's SimpleRateThrottle keeps a list of timestamps per client, which costs
O(rate) per request at CI rates; a fixed-window counter costs one cache
round trip (one Redis script: INCR, and EXPIRE on the window's first hit) and
is what the rate limit needs.
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import NoScriptError
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

log = logging.getLogger(__name__)

# Count a hit and start the window's expiry on its first one, atomically: one round
# trip, where Django's incr() asks EXISTS first and add() + incr() is two.
COUNT_SCRIPT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""
COUNT_SHA = hashlib.sha1(COUNT_SCRIPT.encode()).hexdigest()

PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """`"3000/min"` → (3000, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period.strip().lower()]


def _hit(key: str, period: int) -> int:
    """Count one hit in the window's counter and return the count."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        redis_key = backend.make_and_validate_key(key)
        client = backend._cache.get_client(redis_key, write=True)
        try:
            return client.evalsha(COUNT_SHA, 1, redis_key, period + 1)
        except NoScriptError:  # first use on this Redis, or after SCRIPT FLUSH / restart
            return client.eval(COUNT_SCRIPT, 1, redis_key, period + 1)
    try:
        return cache.incr(key)
    except ValueError:
        if cache.add(key, 1, timeout=period + 1):
            return 1
        return cache.incr(key)


class TokenRateThrottle(BaseThrottle):
    """At most DEFAULT_THROTTLE_RATES["token"] requests per API token (or session user)
    per window. Fails open: if the cache is down the request goes through."""

    scope = "token"

    def allow_request(self, request, view) -> bool:
        counted = getattr(request, "berth_throttle", None)
        if counted is not None:  # the fast submit path counted this request already
            allowed, self._wait = counted
            return allowed
        allowed, self._wait = self._count(self._ident(request))
        return allowed

    @classmethod
    def count_for(cls, request, token) -> bool:
        """Count a request that api/views/fastsubmit.py answers, as allow_request would,
        and leave the outcome on it: if the full view takes the request over, it does
        not count it again."""
        request.berth_throttle = cls()._count(f"token-{token.prefix}")
        return request.berth_throttle[0]

    def _count(self, ident: str) -> tuple[bool, float]:
        """Count one request of `ident`: (allowed, seconds until the window ends)."""
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        if not rate or rate.strip() in ("0", "off"):
            return True, 0.0
        limit, period = parse_rate(rate)
        now = time.time()
        key = f"berth:throttle:{self.scope}:{ident}:{int(now // period)}"
        try:
            count = _hit(key, period)
        except Exception:  # noqa: BLE001 — throttling must not turn a cache outage into 500s
            log.warning("throttle cache unavailable; not throttling", exc_info=True)
            return True, 0.0
        return count <= limit, period - (now % period)

    def wait(self) -> float:
        return self._wait

    def _ident(self, request) -> str:
        auth = request.auth
        if getattr(auth, "prefix", None):
            return f"token-{auth.prefix}"
        if request.user and request.user.is_authenticated:
            return f"user-{request.user.pk}"
        return f"addr-{self.get_ident(request)}"


class LoginFailures:
    """Failed password logins per client address, limited by DEFAULT_THROTTLE_RATES["login"]."""

    def __init__(self, request):
        rate = api_settings.DEFAULT_THROTTLE_RATES.get("login") or "10/min"
        self.limit, self.period = parse_rate(rate)
        address = BaseThrottle().get_ident(request)
        self.key = f"berth:login-failures:{address}:{int(time.time() // self.period)}"

    def check(self) -> None:
        if (cache.get(self.key) or 0) >= self.limit:
            raise exceptions.Throttled(
                wait=self.period - (time.time() % self.period),
                detail="Too many failed logins from this address; try again later.",
            )

    def record(self) -> None:
        try:
            _hit(self.key, self.period)
        except Exception:  # noqa: BLE001
            log.warning("login failure counter unavailable", exc_info=True)

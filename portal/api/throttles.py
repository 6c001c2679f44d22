"""Per-token request throttling, counted in the shared cache (portal/core/counters.py).

Failed password logins are limited by the login throttle in portal/core/logins.py,
the one rule for the API, the dashboard and the admin.
"""

from __future__ import annotations

import functools
import logging
import time

from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from portal.core.counters import hit, parse_rate
from portal.core.logins import client_address

log = logging.getLogger(__name__)
_parse_rate = functools.lru_cache(maxsize=32)(parse_rate)  # read on every API request


class TokenRateThrottle(BaseThrottle):
    """At most DEFAULT_THROTTLE_RATES["token"] requests per API token (or session user)
    per window. Fails open: if the cache is down the request goes through."""

    scope = "token"

    def allow_request(self, request, view) -> bool:
        allowed, self._wait = self._count(self._ident(request))
        return allowed

    def _count(self, ident: str) -> tuple[bool, float]:
        """Count one request of `ident`: (allowed, seconds until the window ends)."""
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        if not rate or rate.strip() in ("0", "off"):
            return True, 0.0
        limit, period = _parse_rate(rate)
        now = time.time()
        key = f"berth:throttle:{self.scope}:{ident}:{int(now // period)}"
        try:
            count = hit(key, period)
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
        return f"addr-{client_address(request)}"

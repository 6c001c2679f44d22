"""Password logins: who the client is, and how many wrong passwords it may try.

One rule for every place a password is checked (`berth login`'s Basic auth on
POST /api/v1/tokens/, the dashboard's /login/, the admin's /admin/login/): the
authentication backend below refuses a login, even with the right password,
while the client address or the account has had BERTH_LOGIN_FAILURES failed
logins in the current window, and counts each failure against both. The
lockout ends by itself when the window ends.

The client address is the one the trusted reverse proxy saw (`client_address`):
with BERTH_TRUSTED_PROXIES = N, the N-th address from the right of
X-Forwarded-For, which that proxy appended; with 0, the peer address. Anything
left of it was written by the client and counts for nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied

from portal.core.counters import count_hit, parse_rate, read_count, uncount

DEFAULT_RATE = "10/15min"


def client_address(request) -> str:
    """The client's address as the outermost trusted proxy saw it (see the module doc)."""
    meta = request.META
    peer = meta.get("REMOTE_ADDR", "") or "unknown"
    proxies = settings.BERTH.get("TRUSTED_PROXIES", 0)
    if not proxies:
        return peer
    chain = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
    if len(chain) < proxies:  # not through the whole proxy chain: the peer is the client
        return peer
    candidate = chain[-proxies]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return peer


@dataclass(frozen=True)
class Lockout:
    """A refused login: why, and how many seconds until the window ends."""

    wait: float

    @property
    def message(self) -> str:
        minutes = math.ceil(self.wait / 60)
        when = f"{minutes} minute{'s' if minutes != 1 else ''}" if self.wait > 60 else "a minute"
        return f"Too many failed logins for this account or from this address. Try again in {when}."


class LoginGuard:
    """The failure counters of one login attempt: per client address and per account."""

    def __init__(self, request, username: str | None):
        rate = settings.BERTH.get("LOGIN_FAILURES") or DEFAULT_RATE
        self.limit, self.period = parse_rate(rate)
        window = int(time.time() // self.period)
        account = hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]
        self.keys = (
            f"berth:login-failures:addr:{client_address(request)}:{window}",
            f"berth:login-failures:user:{account}:{window}",
        )

    def lockout(self) -> Lockout | None:
        """A Lockout while either counter has reached the limit, else None."""
        if max(read_count(key) for key in self.keys) >= self.limit:
            return self._lockout()
        return None

    def take_turn(self) -> Lockout | None:
        """Count this attempt as a failure before its password is checked, atomically (one
        INCR per counter), and refuse it if that passes the limit. Reading first and counting
        after a wrong password would let a burst of parallel requests all read a count under
        the limit: one guess per request. `succeeded` takes the count back."""
        if max(count_hit(key, self.period) for key in self.keys) > self.limit:
            return self._lockout()
        return None

    def succeeded(self) -> None:
        """The password was right: it was not a failure."""
        for key in self.keys:
            uncount(key)

    def _lockout(self) -> Lockout:
        return Lockout(self.period - (time.time() % self.period))


def lockout_for(request, username: str | None) -> Lockout | None:
    """Whether a login by `username` from this request's client is refused now."""
    if request is None:
        return None
    return LoginGuard(request, username).lockout()


class ThrottledModelBackend(ModelBackend):
    """Django's password check behind the login throttle (AUTHENTICATION_BACKENDS).

    Each attempt is counted before the password is looked at, and a success takes it
    back (LoginGuard.take_turn); one past the limit is refused unchecked (PermissionDenied
    stops `authenticate()` trying other backends). Callers
    that want to say why ask `lockout_for` after a refusal.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:  # management commands and tests that pass no request
            return super().authenticate(request, username, password, **kwargs)
        guard = LoginGuard(request, username or kwargs.get("username"))
        if guard.take_turn() is not None:
            raise PermissionDenied("login throttled")
        user = super().authenticate(request, username, password, **kwargs)
        if user is not None:
            guard.succeeded()
        return user


class _ThrottleMessage:
    """Say "too many failed logins" instead of "wrong password" while locked out."""

    def clean(self):
        try:
            return super().clean()
        except forms.ValidationError:
            lockout = lockout_for(self.request, self.cleaned_data.get("username"))
            if lockout is not None:
                raise forms.ValidationError(lockout.message, code="throttled") from None
            raise


class LoginForm(_ThrottleMessage, AuthenticationForm):
    """The dashboard's /login/ form."""


class AdminLoginForm(_ThrottleMessage, AdminAuthenticationForm):
    """The admin's /admin/login/ form."""

"""OpenID Connect through mozilla-django-oidc (docs/adr/0001-oidc-library.md).

What this adds to the library, each in one place:
- endpoints from the issuer's /.well-known/openid-configuration (`discovery`),
  fetched on the first OIDC sign-in, never at start-up or on a password login;
- the ID token's issuer and audience checked, and exp/iat/iss/aud/sub required
  (`OidcBackend._verify_jws`; the library checks signature, expiry and nonce);
- the user found by (issuer, sub), groups synced (`portal.sso.actions`);
- logout that ends the provider's session where it offers end-session (`SsoLogoutView`).
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.sso.actions import Assertion, SsoRefused, sign_in_sso_user
from portal.sso.backends import ActiveUsersOnly

log = logging.getLogger(__name__)

DISCOVERY_TTL_S = 3600.0
# mozilla-django-oidc's endpoint settings → the discovery document's keys.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud", "sub"]
REFUSED_KEY = "sso_refused"


class ProviderUnavailable(Exception):
    """The issuer's discovery document could not be fetched or is not the issuer's."""


def oidc_config() -> dict:
    """Berth's OIDC settings (issuer, names of claims, display name); Http404 when off."""
    config = settings.BERTH_SSO.get("OIDC")
    if not config:
        raise Http404("OpenID Connect sign-in is not configured.")
    return config


_cache: dict[str, tuple[float, dict]] = {}
_cache_lock = threading.Lock()


def discovery(issuer: str | None = None) -> dict:
    """The issuer's OpenID Provider metadata, cached for an hour per process.

    Its `issuer` must equal the configured one (OpenID Connect Discovery 1.0, §4.3).
    """
    issuer = issuer or oidc_config()["ISSUER"]
    with _cache_lock:
        cached = _cache.get(issuer)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=import_from_settings("OIDC_TIMEOUT", 10))
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from None
    if document.get("issuer", "").rstrip("/") != issuer:
        raise ProviderUnavailable(f"{url} names issuer {document.get('issuer')!r}, not {issuer!r}")
    with _cache_lock:
        _cache[issuer] = (time.monotonic(), document)
    return document


def forget_discovery() -> None:
    with _cache_lock:
        _cache.clear()


def oidc_setting(attr: str, *default):
    """mozilla-django-oidc's get_settings, with endpoints from discovery."""
    if attr in DISCOVERED:
        return discovery()[DISCOVERED[attr]]
    return import_from_settings(attr, *default)


def asserted_groups(value) -> tuple[str, ...]:
    """The groups claim as names: a list, or one string (some providers send one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return ()
    return tuple(str(group) for group in value if isinstance(group, str | int))


class OidcBackend(ActiveUsersOnly, OIDCAuthenticationBackend):
    """The library's backend, with endpoints read when used, not when constructed:
    Django builds every backend on every authenticate(), password logins included."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_JWKS_ENDPOINT"))
    OIDC_RP_CLIENT_ID = property(lambda self: settings.OIDC_RP_CLIENT_ID)
    OIDC_RP_CLIENT_SECRET = property(lambda self: settings.OIDC_RP_CLIENT_SECRET)
    OIDC_RP_SIGN_ALGO = property(lambda self: settings.OIDC_RP_SIGN_ALGO)
    OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, username=None, password=None, **kwargs):
        """Only the callback's code exchange (it passes the nonce), never a password login.

        Listed before the password backends (portal/sso/conf.py), and a sign-in it refuses
        ends authenticate() here (PermissionDenied): an SSO sign-in is no password attempt,
        so neither its success nor its refusal may reach ThrottledModelBackend, which counts
        every attempt it sees as a failed login until a password succeeds
        (portal/core/logins.py) and would lock the address out after a few sign-ins."""
        if username is not None or password is not None or "nonce" not in kwargs:
            return None
        user = super().authenticate(request, **kwargs)
        if user is None:
            raise PermissionDenied("OIDC sign-in refused")
        return user

    def _verify_jws(self, payload, key):
        """Signature, expiry, issuer and audience (the library skips the last two)."""
        alg = jwt.get_unverified_header(payload).get("alg")
        if alg != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"ID token signed with {alg!r}, not {self.OIDC_RP_SIGN_ALGO}")
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[alg],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=discovery()["issuer"],
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from None

    def get_payload_data(self, token, key):
        return self._verify_jws(token, key)  # never the library's unsecured-JWT escape hatch

    def get_or_create_user(self, access_token, id_token, payload):
        """Find or create the user by (issuer, sub); sync their groups."""
        try:
            return sign_in_sso_user(self.assertion(access_token, id_token, payload))
        except SsoRefused as exc:
            self.request.session[REFUSED_KEY] = str(exc)
            return None

    def assertion(self, access_token, id_token, payload) -> Assertion:
        """Who the provider says signed in: the verified ID token's claims and UserInfo's."""
        config = oidc_config()
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload["sub"]:
            # OpenID Connect Core §5.3.2: the UserInfo `sub` must match the ID token's.
            raise SuspiciousOperation("UserInfo names a different subject than the ID token")
        claims = {**payload, **userinfo}
        return Assertion(
            provider="oidc",
            issuer=payload["iss"],
            subject=str(payload["sub"]),
            username=str(claims.get(config["USERNAME_CLAIM"]) or "")[:150],
            email=str(claims.get("email") or ""),
            groups=asserted_groups(claims.get(config["GROUPS_CLAIM"])),
        )


class SignInView(OIDCAuthenticationRequestView):
    """GET /oidc/authenticate/: to the provider's authorization endpoint (with PKCE)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        oidc_config()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable as exc:
            log.warning("OIDC provider unavailable: %s", exc)
            return failed(request, "The sign-in provider cannot be reached; try again shortly.")
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """GET /oidc/callback/: the provider sends the browser back with a code."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        oidc_config()
        try:
            return super().get(request)
        except (SuspiciousOperation, jwt.InvalidTokenError, requests.HTTPError) as exc:
            # An unknown or reused state, a code the provider refuses, a token that fails a
            # check: refused, said plainly.
            log.warning("OIDC sign-in refused: %s", exc)
            return failed(request, "The sign-in was refused: it was not valid or was used twice.")
        except (ProviderUnavailable, requests.RequestException) as exc:
            log.warning("OIDC provider unavailable: %s", exc)
            return failed(request, "The sign-in provider cannot be reached; try again shortly.")

    def login_failure(self):
        message = self.request.session.pop(REFUSED_KEY, None)
        return failed(self.request, message or "The sign-in provider did not sign you in.")


def failed(request, message: str):
    """The page a refused or failed single sign-on lands on (HTTP 403)."""
    context = {"message": message, "provider": settings.BERTH_SSO["OIDC"]}
    return render(request, "sso/failed.html", context, status=403)


class SsoLogoutView(auth_views.LogoutView):
    """POST /logout/: ends the portal session, then the provider's where it offers
    end-session (OpenID Connect RP-Initiated Logout 1.0), else back to the login page."""

    def post(self, request, *args, **kwargs):
        id_token = request.session.get("oidc_id_token")
        response = super().post(request, *args, **kwargs)
        end_session = _end_session_url(request, id_token) if id_token else None
        return HttpResponseRedirect(end_session) if end_session else response


def _end_session_url(request, id_token: str) -> str | None:
    if not settings.BERTH_SSO.get("OIDC"):
        return None
    try:
        endpoint = discovery().get("end_session_endpoint")
    except ProviderUnavailable:
        return None
    if not endpoint:
        return None
    query = {
        "id_token_hint": id_token,
        "client_id": settings.OIDC_RP_CLIENT_ID,
        "post_logout_redirect_uri": request.build_absolute_uri(reverse("login")),
    }
    return f"{endpoint}?{urlencode(query)}"

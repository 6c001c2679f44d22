"""Who is calling: a Bearer API token (scripts), a session (browser, with CSRF),
or, only to create a token, a username and password (`berth login`)."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import (
    BaseAuthentication,
    BasicAuthentication,
    get_authorization_header,
)

from portal.core.actions.tokens import authenticate_token, token_scope
from portal.core.logins import lockout_for
from portal.core.models import ApiToken


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer bat_…`; `request.auth` is the ApiToken.

    Listed first in the settings so that an anonymous request gets 401 with
    `WWW-Authenticate: Bearer`, not 403.
    """

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header; use 'Authorization: Bearer <token>'."
            )
        try:
            plaintext = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid API token.") from None
        token = authenticate_token(plaintext)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="berth"'


class PasswordAuthentication(BasicAuthentication):
    """HTTP Basic, accepted only where a token is created, behind the login throttle
    (portal/core/logins.py): a locked-out client or account gets 429, even with the
    right password."""

    www_authenticate_realm = "berth"

    def authenticate(self, request):
        """Only for creating a token (POST): a password that listed the account's tokens
        with GET was a second way in (a security review's case, test_tokens.py)."""
        if request.method != "POST":
            return None
        return super().authenticate(request)

    def authenticate_credentials(self, userid, password, request=None):
        try:
            return super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            lockout = lockout_for(request, userid)
            if lockout is not None:
                raise exceptions.Throttled(wait=lockout.wait, detail=lockout.message) from None
            raise


def api_token(request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None


def scope_of(request) -> set[int] | None:
    """Team ids the request may reach (a scoped token), or None for all of the user's teams."""
    if not hasattr(request, "_berth_scope"):
        token = api_token(request)
        request._berth_scope = token_scope(token) if token else None
    return request._berth_scope

"""`berth login --sso`: the OAuth 2.0 device authorization grant (RFC 8628), run by the
portal with its own client credentials on the CLI's behalf.

The CLI asks the portal to start (POST /api/v1/sso/device/), shows the person the
provider's page and code, and polls (POST /api/v1/sso/device/token/). Once the person
has confirmed at the provider, the portal gets the tokens, checks the ID token as a
browser sign-in does, syncs the person's groups and returns a normal API token. The
client secret never leaves the portal; the device code is useless without it.
"""

from __future__ import annotations

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation

from portal.sso.actions import SsoRefused, sign_in_sso_user
from portal.sso.oidc import OidcBackend, ProviderUnavailable, discovery, oidc_setting

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# RFC 8628 §3.5: keep polling on these; every other error ends the attempt.
PENDING = {"authorization_pending", "slow_down"}
START_FIELDS = (
    "device_code",
    "user_code",
    "verification_uri",
    "verification_uri_complete",
    "expires_in",
    "interval",
)


class DeviceError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _post(url: str, data: dict) -> requests.Response:
    body = {"client_id": settings.OIDC_RP_CLIENT_ID, **data}
    if settings.OIDC_RP_CLIENT_SECRET:
        body["client_secret"] = settings.OIDC_RP_CLIENT_SECRET
    try:
        return requests.post(url, data=body, timeout=oidc_setting("OIDC_TIMEOUT", 10))
    except requests.RequestException as exc:
        raise DeviceError("provider_unavailable", f"The sign-in provider: {exc}", 503) from None


def start() -> dict:
    """Ask the provider for a device code and a user code."""
    try:
        endpoint = discovery().get("device_authorization_endpoint")
    except ProviderUnavailable as exc:
        raise DeviceError("provider_unavailable", str(exc), 503) from None
    if not endpoint or not settings.BERTH_SSO["OIDC"]["DEVICE_GRANT"]:
        raise DeviceError(
            "not_supported", "The sign-in provider offers no device authorization.", 404
        )
    response = _post(endpoint, {"scope": settings.OIDC_RP_SCOPES})
    if response.status_code != 200:
        raise DeviceError("provider_refused", f"The sign-in provider said: {response.text[:200]}")
    document = response.json()
    document.setdefault("interval", 5)
    return {key: document[key] for key in START_FIELDS if key in document}


def finish(device_code: str):
    """The signed-in user once the person confirmed; DeviceError while pending or refused."""
    response = _post(
        oidc_setting("OIDC_OP_TOKEN_ENDPOINT"),
        {"grant_type": DEVICE_GRANT, "device_code": device_code},
    )
    if response.status_code != 200:
        error = _error(response)
        raise DeviceError(error, f"The sign-in provider answered {error}.")
    tokens = response.json()
    backend = OidcBackend()
    try:
        payload = backend.verify_token(tokens.get("id_token") or "", nonce=None)
        return sign_in_sso_user(
            backend.assertion(tokens["access_token"], tokens["id_token"], payload)
        )
    except (SuspiciousOperation, jwt.InvalidTokenError, KeyError) as exc:
        raise DeviceError("refused", f"The sign-in was refused: {exc}", 403) from None
    except SsoRefused as exc:
        raise DeviceError("refused", str(exc), 403) from None


def _error(response: requests.Response) -> str:
    try:
        return str(response.json().get("error") or "invalid_grant")
    except ValueError:
        return "invalid_grant"

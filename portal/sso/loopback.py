"""`berth login --sso` where the device grant is not available: a loopback redirect
(RFC 8252 §7.3).

The CLI listens on 127.0.0.1:PORT and opens PORTAL/sso/cli/?port=PORT&state=S. The
person signs in there as in any browser visit (single sign-on or a password) and
confirms; the portal sends the browser to http://127.0.0.1:PORT/?code=C&state=S with a
one-time code, good for two minutes, which the CLI trades for an API token
(POST /api/v1/sso/cli/token/). The token itself never passes through the browser.
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpResponseRedirect
from django.shortcuts import render

from portal.core.secrets import digest
from portal.csp import POLICY

CODE_TTL_S = 120
# The confirm form posts to this page, which redirects to the CLI's loopback address;
# browsers hold a form's redirects to form-action too (portal/csp.py: 'self' only).
CONFIRM_POLICY = POLICY.replace("form-action 'self'", "form-action 'self' http://127.0.0.1:*")
_STATE = re.compile(r"^[A-Za-z0-9_-]{8,128}$")


def _key(code: str) -> str:
    return f"berth:sso-cli:{digest(code)}"


def _target(data) -> tuple[int, str] | None:
    """The CLI's port and state from the query or form, or None when malformed."""
    port, state = data.get("port", ""), data.get("state", "")
    if not port.isdigit() or not 1024 <= int(port) <= 65535 or not _STATE.match(state):
        return None
    return int(port), state


@login_required
def cli_sign_in(request):
    """GET: ask the signed-in person to confirm; POST: redirect to the CLI with a code."""
    target = _target(request.POST if request.method == "POST" else request.GET)
    if target is None:
        context = {"message": "This link does not come from `berth login --sso`."}
        return render(request, "sso/failed.html", context, status=400)
    port, state = target
    if request.method != "POST":
        page = render(request, "sso/cli_confirm.html", {"port": port, "state": state})
        page["Content-Security-Policy"] = CONFIRM_POLICY
        return page
    code = secrets.token_urlsafe(32)
    cache.set(_key(code), request.user.pk, CODE_TTL_S)
    return HttpResponseRedirect(
        f"http://127.0.0.1:{port}/?{urlencode({'code': code, 'state': state})}"
    )


def redeem(code: str):
    """The active user a one-time code was made for, once; None after that or when unknown."""
    key = _key(code)
    user_id = cache.get(key)
    if user_id is None or not cache.delete(key):  # delete: only one caller wins
        return None
    return get_user_model().objects.filter(pk=user_id, is_active=True).first()

"""HTTP endpoints for node agents (docs/protocol.md).

Plain Django views rather than DRF: 2,000 agents heartbeat every few seconds, and
these views do one thing each: read the body, check it against the protocol's one
schema (schema.py), call one action, answer the reply. Errors use the API's one
error format (errors.py).
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.agentapi.auth import authenticated_node, bearer
from portal.agentapi.desired import desired_state
from portal.agentapi.errors import error
from portal.agentapi.schema import Invalid, parse_heartbeat, parse_registration
from portal.core import wake
from portal.core.actions.heartbeat import ProtocolError, record_heartbeat
from portal.core.actions.nodes import NodeIdentityTaken, register_node, rotate_node_token
from portal.core.secrets import digest

MAX_BODY = 1024 * 1024


class BadBody(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


def _body(request) -> object:
    """The parsed JSON body; too large is 413 `too_large`, not JSON 400 `parse_error`."""
    too_large = BadBody(413, "too_large", f"The request body is larger than {MAX_BODY >> 20} MiB.")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY:
        raise too_large
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_large from None
    if len(raw) > MAX_BODY:
        raise too_large
    try:
        return json.loads(raw or b"null")
    except RecursionError:
        raise BadBody(400, "parse_error", "The request body is nested too deeply.") from None
    except ValueError:  # UnicodeDecodeError is a ValueError too
        raise BadBody(400, "parse_error", "The request body is not valid JSON.") from None


def _handle(func):
    """Turn the protocol's exceptions into the one error format."""

    def wrapper(request, *args, **kwargs):
        try:
            return func(request, *args, **kwargs)
        except BadBody as exc:
            return error(exc.status, exc.code, str(exc))
        except Invalid as exc:
            return error(400, "invalid", str(exc), exc.fields)
        except ProtocolError as exc:
            return error(400, "protocol", str(exc), exc.fields)
        except NodeIdentityTaken as exc:
            return error(409, "node_identity", str(exc))
        except PermissionError as exc:
            return error(401, "unauthenticated", str(exc))

    wrapper.__name__ = func.__name__
    return wrapper


@csrf_exempt
@require_POST
@_handle
def register(request):
    """A bootstrap token registers a node; the node's current token (Bearer) rotates it."""
    presented = bearer(request)
    node = authenticated_node(presented) if presented else None
    if presented and node is None:
        return error(401, "unauthenticated", "Unknown node token.")
    registration, bootstrap_token = parse_registration(_body(request))
    source = request.META.get("REMOTE_ADDR", "")
    if node is not None:
        node, token = rotate_node_token(
            node, registration, token_digest=digest(presented), source=source
        )
    else:
        node, token = register_node(registration, bootstrap_token=bootstrap_token, source=source)
    return JsonResponse(
        {
            "node_id": node.pk,
            "node_token": token,
            "heartbeat_interval_s": settings.BERTH["HEARTBEAT_INTERVAL_S"],
            "disconnect_limit_s": settings.BERTH["AGENT_DISCONNECT_LIMIT_S"],
        },
        status=201,
    )


@csrf_exempt
@require_POST
@_handle
def heartbeat_view(request):
    node = authenticated_node(bearer(request))
    if node is None:
        return error(401, "unauthenticated", "Missing or unknown node token.")
    beat = parse_heartbeat(_body(request))
    # Read before the workers are: a change committed after this bumps the version after
    # its commit, so the watch sees it even if this reply does not (portal.core.wake).
    seen = wake.version(node.pk) if wake.enabled() else None
    recorded = record_heartbeat(
        node, agent_version=beat.agent_version, gpus=beat.gpus, workers=beat.workers
    )
    reply = desired_state(node, live=recorded.live)
    reply["ack"] = recorded.ack
    if watch := wake.watch_reply(node.pk, seen):
        reply["watch"] = watch
    return JsonResponse(reply)

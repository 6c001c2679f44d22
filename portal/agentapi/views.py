"""HTTP endpoints for node agents (docs/protocol.md).

Plain Django views rather than DRF: 2,000 agents heartbeat every few seconds,
and these views do one thing each. Errors use the API's one error format.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.http import JsonResponse
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.core.actions.workers import WorkerReport
from portal.core.agents import GpuReport, ProtocolError, heartbeat, node_for_token, register_node
from portal.core.models import Gpu

MAX_BODY = 1024 * 1024
WORKER_STATES = {"starting", "running", "stopping", "exited", "failed_to_start"}
GPU_HEALTH = frozenset(Gpu.Health.values)  # TextChoices.values builds a new list each time


def error(status: int, code: str, message: str, fields: dict | None = None) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "fields": fields or {}}}, status=status
    )


class BadRequest(Exception):
    def __init__(self, message: str, fields: dict | None = None):
        super().__init__(message)
        self.fields = fields or {}


def _body(request) -> dict:
    if len(request.body) > MAX_BODY:
        raise BadRequest("The request body is larger than 1 MiB.")
    try:
        data = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    return data


def _field(data: dict, name: str, kind, *, required=True, default=None, where=""):
    value = data.get(name, default)
    if value is None and not required:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRequest("Malformed field.", {f"{where}{name}": [f"Expected {kind.__name__}."]})
    return value


def _time(data: dict, name: str, where: str) -> datetime | None:
    raw = data.get(name)
    if raw is None:
        return None
    parsed = parse_datetime(raw) if isinstance(raw, str) else None
    if parsed is None:
        raise BadRequest("Malformed field.", {f"{where}{name}": ["Expected an ISO 8601 time."]})
    return parsed


def _gpus(data: dict) -> list[GpuReport]:
    items = data.get("gpus")
    if not isinstance(items, list):
        raise BadRequest("Malformed field.", {"gpus": ["Expected a list."]})
    reports = []
    for i, g in enumerate(items):
        where = f"gpus[{i}]."
        if not isinstance(g, dict):
            raise BadRequest("Malformed field.", {f"gpus[{i}]": ["Expected an object."]})
        health = _field(g, "health", str, required=False, default="healthy", where=where)
        if health not in GPU_HEALTH:
            raise BadRequest(
                "Malformed field.", {f"{where}health": [f"One of {', '.join(Gpu.Health.values)}."]}
            )
        reports.append(
            GpuReport(
                index=_field(g, "index", int, where=where),
                uuid=_field(g, "uuid", str, where=where)[:96],
                name=_field(g, "name", str, where=where)[:120],
                memory_total_mib=_field(
                    g, "memory_total_mib", int, required=False, default=0, where=where
                ),
                memory_used_mib=_field(g, "memory_used_mib", int, required=False, where=where),
                utilization_pct=_field(g, "utilization_pct", float, required=False, where=where),
                temperature_c=_field(g, "temperature_c", float, required=False, where=where),
                power_w=_field(g, "power_w", float, required=False, where=where),
                health=health,
                health_reason=_field(
                    g, "health_reason", str, required=False, default="", where=where
                ),
            )
        )
    if len({r.uuid for r in reports}) != len(reports) or len({r.index for r in reports}) != len(
        reports
    ):
        raise BadRequest("Malformed field.", {"gpus": ["GPU UUIDs and indexes must be unique."]})
    return reports


def _workers(data: dict) -> list[WorkerReport]:
    items = data.get("workers", [])
    if not isinstance(items, list):
        raise BadRequest("Malformed field.", {"workers": ["Expected a list."]})
    reports = []
    for i, w in enumerate(items):
        where = f"workers[{i}]."
        if not isinstance(w, dict):
            raise BadRequest("Malformed field.", {f"workers[{i}]": ["Expected an object."]})
        state = _field(w, "state", str, where=where)
        if state not in WORKER_STATES:
            raise BadRequest(
                "Malformed field.",
                {f"{where}state": [f"One of {', '.join(sorted(WORKER_STATES))}."]},
            )
        reports.append(
            WorkerReport(
                key=_field(w, "key", str, where=where),
                state=state,
                exit_code=_field(w, "exit_code", int, required=False, where=where),
                started_at=_time(w, "started_at", where),
                finished_at=_time(w, "finished_at", where),
                log_tail=_field(w, "log_tail", str, required=False, where=where),
            )
        )
    if len({r.key for r in reports}) != len(reports):
        raise BadRequest("Malformed field.", {"workers": ["Worker keys must be unique."]})
    return reports


def _handle(func):
    """Turn the protocol's exceptions into the one error format."""

    def wrapper(request, *args, **kwargs):
        try:
            return func(request, *args, **kwargs)
        except BadRequest as exc:
            return error(400, "invalid", str(exc), exc.fields)
        except ProtocolError as exc:
            return error(400, "protocol", str(exc), exc.fields)
        except PermissionError as exc:
            return error(401, "unauthenticated", str(exc))

    wrapper.__name__ = func.__name__
    return wrapper


@csrf_exempt
@require_POST
@_handle
def register(request):
    data = _body(request)
    hostname = _field(data, "hostname", str).strip()
    if not hostname or len(hostname) > 253:
        raise BadRequest("Malformed field.", {"hostname": ["1 to 253 characters."]})
    node, token = register_node(
        bootstrap_token=_field(data, "bootstrap_token", str, required=False, default=""),
        hostname=hostname,
        rack=_field(data, "rack", str, required=False, default="")[:64],
        block=_field(data, "block", str, required=False, default="")[:64],
        agent_version=_field(data, "agent_version", str, required=False, default="")[:40],
        gpus=_gpus(data),
    )
    from django.conf import settings

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
    auth = request.headers.get("Authorization", "")
    token = auth[7:].strip() if auth.startswith("Bearer ") else ""
    node = node_for_token(token)
    if node is None:
        return error(401, "unauthenticated", "Missing or unknown node token.")
    data = _body(request)
    reply = heartbeat(
        node,
        agent_version=_field(data, "agent_version", str, required=False, default="")[:40],
        gpus=_gpus(data),
        workers=_workers(data),
    )
    return JsonResponse(reply)

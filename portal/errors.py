"""Site-wide error pages: the API's one error format, and 503 while the database is away."""

from __future__ import annotations

import sys

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import JsonResponse
from django.template import loader
from django.views.decorators.csrf import requires_csrf_token

RETRY_AFTER_S = 5


def _database_down(exc: BaseException | None) -> bool:
    """Connection-level failures (server restarting, unreachable), not bad queries."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DatabaseError) and "connection" in str(exc).lower()


def _wants_json(request) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get(
        "Accept", ""
    )


@requires_csrf_token
def server_error(request, template_name: str = "500.html"):
    """500, or 503 with Retry-After when the database is unreachable, so clients
    (the CLI, agents, load balancers) retry instead of giving up."""
    exc = sys.exc_info()[1]
    down = _database_down(exc)
    status = 503 if down else 500
    code, message = (
        ("unavailable", "The database is unreachable; retry shortly.")
        if down
        else ("server_error", "An internal error occurred; it has been logged.")
    )
    if _wants_json(request):
        response = JsonResponse(
            {"error": {"code": code, "message": message, "fields": {}}}, status=status
        )
    else:
        try:
            body = loader.get_template(template_name).render({"message": message, "status": status})
        except Exception:  # noqa: BLE001 — the template itself may need the database
            body = f"<h1>{status}</h1><p>{message}</p>"
        from django.http import HttpResponse

        response = HttpResponse(body, status=status)
    if down:
        response["Retry-After"] = str(RETRY_AFTER_S)
    return response

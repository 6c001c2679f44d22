"""Every error answer of the site, built here: the one JSON error body, and the pages.

- `error_body` / `error_response` build `{"error": {"code", "message", "fields"}}`,
  the one error format of the REST API (portal/api/errors.py) and the agent API.
- `bad_request`, `permission_denied`, `page_not_found`, `server_error` are the
  project's handler400/403/404/500: JSON under /api/ (and for clients that ask
  for JSON), the product's own pages elsewhere. A body too large is 413, a
  database that is away 503 with Retry-After.
- `ErrorPagesMiddleware` serves the same pages in DEBUG too (the `make run`
  demo), where Django would show its technical pages listing URL patterns and
  settings, and answers a PermissionDenied as a plain 403 (one log line, no
  traceback: a refused action is not a server error).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.template import loader
from django.views.decorators.csrf import requires_csrf_token

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5


def error_body(code: str, message: str, fields: dict | None = None) -> dict[str, Any]:
    """The one error format: `{"error": {"code", "message", "fields"}}`."""
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def error_response(
    status: int,
    code: str,
    message: str,
    fields: dict | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    """A JsonResponse with the one error format (for views outside DRF, e.g. the agent API)."""
    response = JsonResponse(error_body(code, message, fields), status=status, headers=headers)
    response.berth_error_page = True
    return response


def wants_json(request) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get(
        "Accept", ""
    )


# What each page says: status → (code, title, message).
PAGES = {
    400: ("bad_request", "Bad request", "The request could not be understood."),
    403: ("permission_denied", "Not allowed", "Your role in this team does not allow this."),
    404: (
        "not_found",
        "Not found",
        "There is nothing here, or it belongs to a team you are not in.",
    ),
    413: ("too_large", "Too large", "The request body is too large."),
    500: (
        "server_error",
        "Something went wrong",
        "An internal error occurred; it has been logged.",
    ),
    503: ("unavailable", "Unavailable", "The database is unreachable; retry shortly."),
}


def error_page(request, status: int, message: str | None = None, headers=None) -> HttpResponse:
    """The answer for `status`: JSON for API clients, the product's page for browsers."""
    code, title, default = PAGES[status]
    message = message or default
    if wants_json(request):
        return error_response(status, code, message, headers=headers)
    template = {403: "403.html", 404: "404.html"}.get(status, "error.html")
    context = {"status": status, "title": title, "message": message}
    try:
        body = loader.render_to_string(template, context, request=request)
    except Exception:  # noqa: BLE001 — the page itself may need the database that failed
        body = loader.render_to_string("500.html", context)
    response = HttpResponse(body, status=status, headers=headers)
    response.berth_error_page = True
    return response


@requires_csrf_token
def bad_request(request, exception=None, template_name=None):
    """handler400: a malformed request, a bad Host header, a body over the size limit (413)."""
    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // (1024 * 1024)
        return error_page(request, 413, f"The request body is larger than {limit} MiB.")
    if isinstance(exception, DisallowedHost):
        return error_page(request, 400, "The Host header is not one this portal serves.")
    return error_page(request, 400)


@requires_csrf_token
def permission_denied(request, exception=None, template_name=None):
    """handler403, and the answer to a refused CSRF check (CSRF_FAILURE_VIEW)."""
    message = str(exception) if exception is not None and str(exception) else None
    return error_page(request, 403, message)


def csrf_failure(request, reason: str = "", template_name=None):
    return error_page(
        request, 403, "The form was out of date or sent from elsewhere; reload the page and retry."
    )


@requires_csrf_token
def page_not_found(request, exception=None, template_name=None):
    """handler404: under /api/ the message names the path, as the API's catch-all does."""
    if request.path.startswith("/api/"):
        return error_response(404, "not_found", f"No API endpoint at {request.path}.")
    return error_page(request, 404)


def _database_down(exc: BaseException | None) -> bool:
    """Connection-level failures (server restarting, unreachable), not bad queries."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DatabaseError) and "connection" in str(exc).lower()


@requires_csrf_token
def server_error(request, template_name=None):
    """handler500: 500, or 503 with Retry-After when the database is unreachable, so
    clients (the CLI, agents, load balancers) retry instead of giving up."""
    if _database_down(sys.exc_info()[1]):
        return error_page(request, 503, headers={"Retry-After": str(RETRY_AFTER_S)})
    return error_page(request, 500)


class ErrorPagesMiddleware:
    """The product's error pages in every mode (see the module doc). First in MIDDLEWARE,
    so it also sees what the other middlewares answered (a bad Host header)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.DEBUG and _debug_page(response):
            return error_page(request, response.status_code)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        if isinstance(exception, PermissionDenied):
            return permission_denied(request, exception)
        if isinstance(exception, SuspiciousOperation):  # as Django does, minus the traceback
            logging.getLogger(f"django.security.{type(exception).__name__}").warning(
                "%s: %s", request.path, exception
            )
            return bad_request(request, exception)
        return None  # Django logs it and calls handler500 (or shows its page in DEBUG)


def _debug_page(response) -> bool:
    """Whether this is one of Django's DEBUG pages, which list URL patterns, settings
    and tracebacks: a technical 404 or a 400 from a bad Host header (HTML), or any 500
    not built here (HTML, or plain text for a client that does not accept HTML)."""
    if getattr(response, "berth_error_page", False):
        return False
    if response.status_code == 500:
        return True
    return response.status_code in (400, 404) and response.get("Content-Type", "").startswith(
        "text/html"
    )

"""The API's one error format: `{"error": {"code", "message", "fields"}}` for every 4xx.

`exception_handler` is DRF's EXCEPTION_HANDLER; it also turns the domain
exceptions of portal.core (SpecError, QueueFull, …) into their HTTP answers so
views can let them propagate. `not_found` answers unknown paths under the API
with the same shape instead of Django's HTML page.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

from portal.core import access
from portal.core.actions.jobs import IdempotencyConflict, InvalidTransition, QueueFull
from portal.core.batcher import Busy
from portal.core.jobspec import SpecError
from portal.errors import error_body, page_not_found


class ApiError(exceptions.APIException):
    """An error with our own code, message, field messages and headers."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        fields: dict[str, list[str]] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.headers = headers or {}


def invalid(fields: dict[str, list[str]], message: str = "") -> ApiError:
    """A 400 with field messages; the message names the fields so a log line says it all."""
    summary = message or "Invalid request: " + "; ".join(
        f"{name}: {' '.join(msgs)}" for name, msgs in fields.items()
    )
    return ApiError(status.HTTP_400_BAD_REQUEST, "invalid", summary, fields)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Return the error response for `exc`, or None to let Django answer 500."""
    error = _as_api_error(exc)
    if error is None:
        return None
    return Response(
        error_body(error.code, error.message, error.fields),
        status=error.status_code,
        headers=error.headers,
    )


def _as_api_error(exc: Exception) -> ApiError | None:
    if isinstance(exc, ApiError):
        return exc
    domain = _domain_error(exc)
    if domain is not None:
        return domain
    if isinstance(exc, Http404):
        return ApiError(404, "not_found", "Not found.")
    if isinstance(exc, DjangoPermissionDenied):
        return ApiError(403, "permission_denied", str(exc) or "You may not do this.")
    if isinstance(exc, exceptions.ValidationError):
        return invalid(flatten(exc.detail))
    if isinstance(exc, exceptions.APIException):
        return _from_drf(exc)
    return None


def _domain_error(exc: Exception) -> ApiError | None:
    if isinstance(exc, access.NotFound):
        return ApiError(404, "not_found", f"No such {exc.what}, or you may not see it.")
    if isinstance(exc, SpecError):
        return invalid(exc.fields)
    if isinstance(exc, QueueFull):
        return ApiError(
            429, "queue_full", str(exc), headers={"Retry-After": str(int(exc.retry_after))}
        )
    if isinstance(exc, Busy):
        return ApiError(429, "busy", str(exc), headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, IdempotencyConflict):
        return ApiError(409, "idempotency_conflict", str(exc), {"Idempotency-Key": [str(exc)]})
    if isinstance(exc, InvalidTransition):
        return ApiError(409, "invalid_state", str(exc))
    if isinstance(exc, RequestDataTooBig):
        return ApiError(413, "too_large", "The request body is too large.")
    return None


def _from_drf(exc: exceptions.APIException) -> ApiError:
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None) is not None:
        headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))
    detail = exc.detail
    if isinstance(detail, (list, dict)):
        fields = flatten(detail)
        message = "; ".join(m for msgs in fields.values() for m in msgs)
    else:
        fields, message = {}, str(detail)
    code = exc.default_code if not isinstance(exc.get_codes(), str) else exc.get_codes()
    return ApiError(exc.status_code, code, message, fields, headers)


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as flat keys: `jobs[2].workers`, `env.FOO`, `non_field_errors`."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            if isinstance(key, int):
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten(value, name))
        return out
    if isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        out = {}
        for i, item in enumerate(detail):
            if item:
                out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(m) for m in messages]}


@csrf_exempt
def not_found(request, *args, **kwargs) -> JsonResponse:
    """Unknown paths under the API answer 404 in the API's format, whatever the method."""
    return page_not_found(request)


def exception_response(exc: Exception):
    """The error response for `exc` outside DRF's dispatch (the plain submit handler,
    portal/api/views/submit.py), rendered as DRF renders; None for a bug (500)."""
    from django.http import HttpResponse
    from rest_framework.renderers import JSONRenderer

    error = _as_api_error(exc)
    if error is None:
        return None
    body = JSONRenderer().render(error_body(error.code, error.message, error.fields))
    response = HttpResponse(body, content_type="application/json", status=error.status_code)
    for name, value in error.headers.items():
        response[name] = value
    return response

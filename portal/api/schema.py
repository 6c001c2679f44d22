"""OpenAPI details drf-spectacular cannot infer: our auth schemes and the error
responses every operation can give, all in the one error format."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from rest_framework import serializers

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "fields"],
            "properties": {
                "code": {
                    "type": "string",
                    "description": "Stable machine-readable code, e.g. `invalid`, `not_found`, "
                    "`queue_full`, `throttled`, `idempotency_conflict`.",
                },
                "message": {"type": "string", "description": "For people."},
                "fields": {
                    "type": "object",
                    "description": "Field (or `jobs[3].workers`) → messages.",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}

DESCRIPTIONS = {
    "400": "Invalid request; `fields` says what to fix.",
    "401": "Not authenticated: no, an invalid, an expired or a revoked token.",
    "403": "Authenticated but not allowed (a viewer submitting, a member cancelling "
    "another's job, a session request without CSRF token).",
    "404": "No such object, or it belongs to another team.",
    "409": "Conflict: the Idempotency-Key was used with another body, or the job already ended.",
    "413": "The request body is too large.",
    "414": "The request line (the URL with its query) is longer than the server reads "
    "(gunicorn: 4094 bytes).",
    "415": "Send `Content-Type: application/json`.",
    "503": "The sign-in provider cannot be reached; retry later.",
    "429": "Too many requests for this token, or the queue is full; retry after `Retry-After` seconds.",
}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer"},
        "description": "Seconds to wait before retrying.",
    }
}


class StrictSerializerSchema(OpenApiSerializerExtension):
    """What serializers.StrictSerializer enforces, said in the schema: no unknown
    fields in a request (additionalProperties: false) and no empty list where the
    field refuses one (minItems: 1)."""

    target_class = "portal.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction != "request":
            return schema
        schema["additionalProperties"] = False
        for name, field in self.target.fields.items():
            if isinstance(field, serializers.ListField) and not field.allow_empty:
                schema["properties"][name]["minItems"] = max(1, field.min_length or 1)
        return schema


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (`bat_…`), created at POST /api/v1/tokens/.",
        }


class PasswordScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.auth.PasswordAuthentication"
    name = "basicAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic", "description": "Only to create a token."}


def add_error_responses(result, generator, request, public):
    """Postprocessing hook: document the error answers of every operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            for code in _error_codes(path, method, operation):
                operation["responses"].setdefault(code, _response(code))
    return result


# Errors particular to some operations: a team named in the body may be unknown
# (404); an idempotency key or a finished job may conflict (409).
EXTRA_ERRORS = {
    "jobs_submit": ["404", "409"],
    "jobs_bulk_submit": ["404"],
    "jobs_cancel": ["409"],
    "arrays_submit": ["404", "409"],
    "arrays_cancel": ["409"],
    "tokens_create": ["404"],
    # `berth login --sso` (portal/sso/api.py): no provider configured (404), provider down (503).
    "sso_device_start": ["404", "503"],
    "sso_device_token": ["404", "503"],
}


def _error_codes(path: str, method: str, operation: dict) -> list[str]:
    codes = ["401", "403", "414", "429"]
    if "{" in path:
        codes.append("404")
    if operation.get("parameters") or "requestBody" in operation or method in ("post", "delete"):
        codes.append("400")
    if method == "post":
        codes += ["413", "415"]
    return codes + EXTRA_ERRORS.get(operation.get("operationId"), [])


def _response(code: str) -> dict:
    if code == "414":  # gunicorn (or nginx) answers before Berth runs: no JSON body
        return {"description": DESCRIPTIONS[code]}
    response = {
        "description": DESCRIPTIONS[code],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if code == "429":
        response["headers"] = RETRY_AFTER
    return response

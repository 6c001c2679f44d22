"""The agent API's error body: the API's one format, `{"error": {"code", "message",
"fields"}}` (docs/protocol.md). Kept here, not in portal.errors, so the agent API's
hot path imports nothing of the REST API or the HTML pages."""

from __future__ import annotations

from django.http import JsonResponse


def error(status: int, code: str, message: str, fields: dict | None = None) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "fields": fields or {}}}, status=status
    )

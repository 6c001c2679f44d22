"""Interactive API docs served by the app itself (no CDN): a small page that reads
the OpenAPI schema and lets a signed-in user or a token holder try each call."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from django.http import HttpResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET

PAGE = Path(__file__).resolve().parent.parent / "docs.html"


@cache
def _page() -> bytes:
    return PAGE.read_bytes()


@require_GET
@ensure_csrf_cookie
def api_docs(request) -> HttpResponse:
    response = HttpResponse(_page(), content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'"
    )
    return response

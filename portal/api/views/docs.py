"""Interactive API docs served by the app itself (no CDN): a small page that reads
the OpenAPI schema and lets a signed-in user or a token holder try each call."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from django.http import HttpResponse
from django.template import engines
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET

PAGE = Path(__file__).resolve().parent.parent / "docs.html"


@cache
def _page() -> str:
    """The page with its static files' URLs (hashed in production) filled in."""
    return engines["django"].from_string(PAGE.read_text()).render()


@require_GET
@ensure_csrf_cookie
def api_docs(request) -> HttpResponse:
    # Its script and styles are static files: the site's Content-Security-Policy holds.
    return HttpResponse(_page(), content_type="text/html; charset=utf-8")

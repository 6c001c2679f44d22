"""Every 4xx, wherever it comes from (our views, DRF, Django's router), has one shape."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.test import Client

from tests.api.conftest import error_of


def test_unknown_paths_under_the_api(as_lead_a):
    for path in ("/api/v1/nope/", "/api/v1/jobs/abc/", "/api/v1/jobs/99999999999999999999/"):
        error_of(as_lead_a.get(path), 404, "not_found")
    error_of(Client().get("/api/v1/nope/"), 404, "not_found")


def test_method_not_allowed(as_lead_a):
    error_of(as_lead_a.delete("/api/v1/jobs/"), 405, "method_not_allowed")
    error_of(as_lead_a.client.put("/api/v1/me/", headers=as_lead_a.headers), 405)


def test_not_acceptable(as_lead_a):
    response = as_lead_a.get("/api/v1/me/", Accept="application/xml")
    error_of(response, 406, "not_acceptable")


def test_an_oversized_body_answers_413(as_lead_a, monkeypatch):
    from portal.api import parsers

    monkeypatch.setattr(parsers, "MAX_BODY_BYTES", 1000)
    response = as_lead_a.post("/api/v1/jobs/", {"name": "x" * 2000})
    error_of(response, 413, "too_large")


@pytest.mark.skipif(
    not getattr(import_module("portal.urls"), "handler404", None),
    reason="portal/urls.py sets no handler404 (portal.api.errors.page_not_found) yet",
)
def test_any_unknown_path_under_api_answers_in_the_error_format(client, settings):
    settings.DEBUG = False
    for path in ("/api/nope", "/api/v2/jobs/"):
        error_of(client.get(path), 404, "not_found")
    assert not client.get("/no-such-page/")["Content-Type"].startswith("application/json")

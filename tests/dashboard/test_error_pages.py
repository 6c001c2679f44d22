"""The product's own error pages in every mode, the demo's DEBUG included (issue 16 item 11)."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

MODES = [False, True]  # DEBUG off (production) and on (make run)


def _is_product_page(response, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "Berth" in html and "urlpatterns" not in html.lower() and "Traceback" not in html
    assert "DEBUG = True" not in html and "Django tried" not in html
    return html


@pytest.mark.parametrize("debug", MODES)
def test_an_outsiders_404_is_the_product_page(debug, settings, story, login):
    settings.DEBUG = debug
    client = login(story.cluster.personas.lead_b)
    html = _is_product_page(client.get("/teams/alpha/"), 404)
    assert "Not found" in html
    _is_product_page(client.get("/no/such/page/"), 404)


@pytest.mark.parametrize("debug", MODES)
def test_a_forced_post_by_a_viewer_is_a_plain_403_without_a_traceback(
    debug, settings, story, login, caplog
):
    settings.DEBUG = debug
    client = login(story.cluster.personas.viewer_a)
    with caplog.at_level(logging.WARNING):
        response = client.post("/teams/alpha/submit/", {"name": "x"})
    assert "Not allowed" in _is_product_page(response, 403)
    assert not [r for r in caplog.records if r.exc_info], "a 403 logged a traceback"


@pytest.mark.parametrize("debug", MODES)
def test_a_crash_is_the_product_500_page(debug, settings, story, login, monkeypatch):
    settings.DEBUG = debug
    monkeypatch.setattr("portal.dashboard.views.tokens.render", lambda *a, **k: 1 / 0)
    client = login(story.cluster.personas.lead_a)
    client.raise_request_exception = False
    assert "Something went wrong" in _is_product_page(client.get("/tokens/"), 500)


def test_the_favicon_is_served(db):
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")


@pytest.mark.parametrize("debug", MODES)
def test_a_post_without_its_csrf_token_is_the_product_403(debug, settings, story, caplog):
    settings.DEBUG = debug
    client = Client(enforce_csrf_checks=True)
    client.force_login(story.cluster.personas.member_a)
    with caplog.at_level(logging.WARNING):
        response = client.post("/teams/alpha/submit/", {"name": "x"})
    assert "reload the page" in _is_product_page(response, 403)
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("debug", MODES)
def test_an_api_crash_is_a_json_500_without_a_traceback(debug, settings, personas, monkeypatch):
    from tests.api.conftest import bearer, error_of

    settings.DEBUG = debug
    monkeypatch.setattr("portal.api.views.tokens.token_data", lambda *a, **k: 1 / 0)
    api = bearer(personas.member_a)
    api.client.raise_request_exception = False
    response = api.get("/api/v1/tokens/", Accept="application/json")
    assert "Traceback" not in error_of(response, 500, "server_error")["message"]

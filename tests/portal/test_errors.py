"""While the database is unreachable the site answers 503 with Retry-After, not a bare 500."""

import pytest
from django.db import OperationalError
from django.test import Client


@pytest.fixture
def unreachable_database(monkeypatch):
    def fail(*args, **kwargs):
        raise OperationalError(
            'connection to server at "127.0.0.1", port 5432 failed: Connection refused'
        )

    monkeypatch.setattr("portal.agentapi.views.authenticated_node", fail)


def test_database_down_is_a_503_with_retry_after_in_the_one_error_format(
    db, unreachable_database, settings
):
    settings.DEBUG = False
    client = Client(raise_request_exception=False)
    response = client.post(
        "/api/agent/v1/heartbeat",
        "{}",
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer bnt_x",
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable"


def test_other_crashes_stay_500_without_retry_after(db, monkeypatch, settings):
    settings.DEBUG = False
    monkeypatch.setattr("portal.agentapi.views.authenticated_node", lambda token: 1 / 0)
    response = Client(raise_request_exception=False).post(
        "/api/agent/v1/heartbeat",
        "{}",
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer x",
    )
    assert response.status_code == 500 and "Retry-After" not in response
    assert response.json()["error"]["code"] == "server_error"

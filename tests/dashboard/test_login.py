"""The dashboard's and the admin's password logins share the API's login throttle."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from portal.core import logins
from tests.api.test_auth import _basic
from tests.factories import PASSWORD

PAGES = {"dashboard": "/login/", "admin": "/admin/login/"}


def _post(page: str, username: str, password: str, address: str = "10.3.0.1"):
    client = Client(REMOTE_ADDR=address)
    return client.post(PAGES[page], {"username": username, "password": password})


def _logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


@pytest.mark.parametrize("page", PAGES)
def test_wrong_passwords_lock_the_login_with_a_clear_message(page, personas, login_throttle):
    personas.lead_a.is_staff = True  # the admin's form also wants staff
    personas.lead_a.save()
    for _ in range(login_throttle):
        assert not _logged_in(_post(page, "lead_a", "wrong"))
    refused = _post(page, "lead_a", PASSWORD)  # the right password, while locked out
    assert not _logged_in(refused)
    assert "Too many failed logins" in refused.content.decode()
    # Per account: another address gets no fresh guesses for this account ...
    assert "Too many failed logins" in _post(page, "lead_a", PASSWORD, "10.3.9.9").content.decode()
    # ... and per address: this address gets none for another account.
    assert "Too many failed logins" in _post(page, "nobody", "x").content.decode()


def test_the_lockout_ends_by_itself(personas, login_throttle, monkeypatch):
    for _ in range(login_throttle):
        _post("dashboard", "member_a", "wrong")
    assert not _logged_in(_post("dashboard", "member_a", PASSWORD))
    later = time.time() + 15 * 60
    monkeypatch.setattr(logins.time, "time", lambda: later)
    assert _logged_in(_post("dashboard", "member_a", PASSWORD))


def test_dashboard_failures_count_for_the_api_too(personas, login_throttle):
    for _ in range(login_throttle):
        _post("dashboard", "member_a", "wrong", address="10.3.1.1")
    response = Client(REMOTE_ADDR="10.3.2.2").post(
        "/api/v1/tokens/",
        {"name": "x"},
        content_type="application/json",
        headers={"Authorization": _basic("member_a")},
    )
    assert response.status_code == 429


def test_the_throttle_counts_in_make_runs_file_cache_too(personas, settings, tmp_path):
    """`make run` has no Redis: the counters live in Django's file-based cache."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(tmp_path / "cache"),
        }
    }
    settings.BERTH = settings.BERTH | {"LOGIN_FAILURES": "2/15min"}
    for _ in range(2):
        _post("dashboard", "member_a", "wrong", address="10.4.0.1")
    refused = _post("dashboard", "member_a", PASSWORD, address="10.4.0.2")
    assert "Too many failed logins" in refused.content.decode()

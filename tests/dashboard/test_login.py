"""The dashboard's and the admin's password logins share the API's login throttle."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connection
from django.test import Client, RequestFactory

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


def test_right_passwords_do_not_count_towards_the_lockout(personas, login_throttle):
    for _ in range(login_throttle - 1):
        _post("dashboard", "member_a", "wrong")
    for _ in range(login_throttle):
        assert _logged_in(_post("dashboard", "member_a", PASSWORD))
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


class SlowMD5Hasher(MD5PasswordHasher):
    """The tests' MD5 hashes, checked as slowly as PBKDF2 checks them in production, and
    counted: how many passwords were actually tried."""

    tried = 0
    _lock = threading.Lock()

    def verify(self, password, encoded):
        with self._lock:
            type(self).tried += 1
        time.sleep(0.3)
        return super().verify(password, encoded)


@pytest.mark.django_db(transaction=True)
def test_concurrent_guesses_try_no_more_passwords_than_the_limit(login_throttle, settings):
    """A burst of parallel wrong passwords: each takes its place in the count before its
    password is checked, so the burst gets the limit's guesses, not one per request."""
    get_user_model().objects.create_user("racer", password=PASSWORD)
    settings.PASSWORD_HASHERS = [f"{__name__}.SlowMD5Hasher"]
    SlowMD5Hasher.tried = 0

    def guess(i: int) -> None:
        try:
            request = RequestFactory().post("/login/", REMOTE_ADDR=f"10.5.0.{i}")
            assert authenticate(request, username="racer", password=f"guess-{i}") is None
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(guess, range(12)))
    assert SlowMD5Hasher.tried <= login_throttle

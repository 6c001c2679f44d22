"""How the portal client sorts failures: transient (retry), rejected (log, carry on), auth (exit)."""

from __future__ import annotations

import email.utils
import time

import pytest

from agents.backoff import Backoff
from agents.portal import AuthError, PortalClient, RejectedError, TransientError, parse_retry_after


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, TransientError),
        (502, TransientError),
        (429, TransientError),
        (400, RejectedError),
        (404, RejectedError),
        (401, AuthError),
        (403, AuthError),
    ],
)
def test_statuses_map_to_what_to_do(portal, status, kind):
    portal.script(status, {"error": {"code": "c", "message": "scripted failure"}})
    with pytest.raises(kind, match="scripted failure") as caught:
        PortalClient(portal.url).heartbeat("bnt_good", {"workers": []})
    assert caught.value.status == status


def test_retry_after_is_read_from_429(portal):
    portal.script(429, Retry_After="7")
    with pytest.raises(TransientError) as caught:
        PortalClient(portal.url).heartbeat("bnt_good", {"workers": []})
    assert caught.value.retry_after == 7


def test_rejection_carries_the_portal_error(portal):
    portal.script(
        400, {"error": {"code": "invalid", "message": "bad", "fields": {"gpus": ["required"]}}}
    )
    with pytest.raises(RejectedError) as caught:
        PortalClient(portal.url).heartbeat("bnt_good", {"workers": []})
    assert caught.value.error == {
        "code": "invalid",
        "message": "bad",
        "fields": {"gpus": ["required"]},
    }


def test_unreachable_portal_is_transient(portal):
    url = portal.url
    portal.close()
    with pytest.raises(TransientError, match="cannot reach the portal"):
        PortalClient(url, timeout_s=1).heartbeat("t", {})


def test_retry_after_accepts_seconds_and_http_dates():
    now = time.time()
    assert parse_retry_after("120") == 120
    assert parse_retry_after(
        email.utils.formatdate(now + 30, usegmt=True), now=now
    ) == pytest.approx(30, abs=1)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_backoff_grows_to_a_cap_with_jitter_and_honours_retry_after():
    low, high = Backoff(1, 8, rng=lambda: 0.0), Backoff(1, 8, rng=lambda: 0.999)
    assert [low.next_delay() for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert [round(high.next_delay(), 2) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert Backoff(1, 8, rng=lambda: 0.0).next_delay(retry_after=20) == 20
    assert Backoff(1, 8, rng=lambda: 0.0).next_delay(retry_after=10_000) == 300
    low.reset()
    assert low.next_delay() == 0.5


def test_proxy_settings_are_read_once_and_no_proxy_still_applies(portal, monkeypatch):
    # requests would scan the environment on every request; the client reads it once.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    client = PortalClient(portal.url)
    monkeypatch.setenv("NO_PROXY", "")  # a later change is not seen: the beat still goes direct
    portal.script(200, {"run": []})
    assert client.heartbeat("bnt_good", {"workers": []}) == {"run": []}

    monkeypatch.setenv("NO_PROXY", "")
    proxied = PortalClient(portal.url)
    with pytest.raises(TransientError, match="cannot reach"):  # through the dead proxy
        proxied.heartbeat("bnt_good", {"workers": []})

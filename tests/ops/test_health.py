"""/healthz says the process is up; /readyz checks the database, the broker and the pass."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from portal.core.models import SchedulingPass
from portal.ops import readiness

CLOSED_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def recent_pass(db):
    return SchedulingPass.objects.create(
        started_at=timezone.now(), duration_ms=12.0, policy="fairshare"
    )


def test_healthz_checks_nothing(client, settings):
    settings.CELERY_BROKER_URL = CLOSED_BROKER
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_ready_when_database_broker_and_pass_are_fine(client, recent_pass):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok" and body["failing"] == []
    assert set(body["checks"]) == {"database", "broker", "scheduling_pass"}
    assert body["checks"]["scheduling_pass"]["age_s"] < 60
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_a_stale_pass_is_503_naming_the_check(client, settings, db):
    settings.BERTH = {**settings.BERTH, "READY_PASS_MAX_AGE_S": 60.0}
    SchedulingPass.objects.create(
        started_at=timezone.now() - timedelta(seconds=300), duration_ms=10.0, policy="fairshare"
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail" and body["failing"] == ["scheduling_pass"]
    check = body["checks"]["scheduling_pass"]
    assert check["ok"] is False and 290 < check["age_s"] < 320 and check["max_age_s"] == 60
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]


def test_no_pass_yet_is_not_ready(client, db):
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["scheduling_pass"]


def test_dry_runs_do_not_count_as_passes(client, db):
    SchedulingPass.objects.create(
        started_at=timezone.now(), duration_ms=1.0, policy="fairshare", dry_run=True
    )
    assert client.get("/readyz").json()["failing"] == ["scheduling_pass"]


def test_an_unreachable_broker_is_503_quickly(client, settings, recent_pass):
    settings.CELERY_BROKER_URL = CLOSED_BROKER
    started = time.monotonic()
    response = client.get("/readyz")
    assert time.monotonic() - started < 5
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["broker"]
    assert "unreachable" in body["checks"]["broker"]["detail"]


def test_an_unreachable_database_is_503(client, monkeypatch, recent_pass):
    class Down:
        def cursor(self):
            raise OperationalError("connection refused")

    monkeypatch.setattr(readiness, "connection", Down())
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "database" in response.json()["failing"]


def test_the_filesystem_broker_is_ready_when_its_folder_exists(settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    assert readiness.check_broker().ok
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "gone")}
    assert not readiness.check_broker().ok


def test_checks_can_be_excluded_for_load_balancers(client, settings, db):
    settings.CELERY_BROKER_URL = CLOSED_BROKER
    response = client.get("/readyz?exclude=scheduling_pass&exclude=broker")
    assert response.status_code == 200
    assert set(response.json()["checks"]) == {"database"}
    response = client.get("/readyz?exclude=scheduling_pass,broker")
    assert response.status_code == 200
    assert client.get("/readyz?exclude=scheduling_pass").status_code == 503


def test_excluding_an_unknown_check_is_a_client_error(client, db):
    response = client.get("/readyz?exclude=etcd")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_check"

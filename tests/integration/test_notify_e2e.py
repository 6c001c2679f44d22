"""A real Celery worker on the `notifications` queue, on Redis, sends what job state
changes wrote to the outbox: queued by name after commit, retried through Celery after
a failure, and swept up by beat when the broker was unreachable at commit time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection, transaction

from portal.celery import app as celery_app
from portal.core.actions.jobs import cancel_job
from portal.core.actions.notifications import team_secret
from portal.core.models import Delivery
from tests.api.conftest import submit
from tests.portal.test_notifications import verify
from tests.receiver import start_receiver

ROOT = Path(__file__).resolve().parents[2]
REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def receiver():
    receiver, stop = start_receiver()
    yield receiver
    stop()


@pytest.fixture
def notify_worker(tmp_path, settings):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    settings.BERTH = settings.BERTH | {"NOTIFY_ALLOW_PRIVATE": True}
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": REDIS,
        "BERTH_VAR_DIR": str(tmp_path),
        "BERTH_NOTIFY_ALLOW_PRIVATE": "1",
        "BERTH_NOTIFY_BACKOFF_BASE_S": "1",
        "BERTH_NOTIFY_SWEEP_INTERVAL_S": "1",
        "BERTH_SCHEDULE_INTERVAL_S": "30",
    }
    log = open(tmp_path / "celery.log", "wb")  # noqa: SIM115 — closed below
    argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-B", "-Q"]
    argv += ["notifications", "-c", "1", "--loglevel", "INFO", "-s", str(tmp_path / "beat")]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
    print((tmp_path / "celery.log").read_text()[-3000:])


def wait_until(predicate, worker, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        assert worker.poll() is None, "the Celery worker died"
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_a_failed_attempt_is_retried_by_the_worker(cluster, personas, receiver, notify_worker):
    receiver.answer(503)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    with transaction.atomic():
        cancel_job(job, actor=personas.member_a)
    wait_until(lambda: Delivery.objects.filter(state="delivered").exists(), notify_worker)
    delivery = Delivery.objects.get()
    assert (delivery.attempts, delivery.last_status_code) == (2, 200)
    first, second = receiver.received
    assert first.headers["Berth-Delivery"] == second.headers["Berth-Delivery"]
    assert verify(team_secret(cluster.team_a), second.headers, second.body)
    assert json.loads(second.body)["job"]["state"] == "cancelled"


def test_the_sweep_sends_what_the_broker_missed(
    cluster, personas, receiver, notify_worker, monkeypatch
):
    def broker_down(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    with monkeypatch.context() as patch:
        patch.setattr(celery_app, "send_task", broker_down)
        with transaction.atomic():
            cancel_job(job, actor=personas.member_a)  # committed; the task was not queued
    assert Delivery.objects.get().state == "pending"
    wait_until(lambda: Delivery.objects.filter(state="delivered").exists(), notify_worker)
    assert len(receiver.received) == 1

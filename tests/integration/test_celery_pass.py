"""A real Celery worker with an embedded beat, on Redis, runs the scheduling pass
and admits a job submitted through the actions, as in production."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from portal.core.models import Job, SchedulingPass
from tests.portal.test_scheduling_pass import submit

ROOT = Path(__file__).resolve().parents[2]
REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def celery_worker(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": REDIS,
        "BERTH_SCHEDULE_INTERVAL_S": "1",
        "BERTH_VAR_DIR": str(tmp_path),
    }
    log = open(tmp_path / "celery.log", "wb")  # noqa: SIM115 — closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-B",
            "-c",
            "1",
            "--loglevel",
            "INFO",
            "-s",
            str(tmp_path / "beat-schedule"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
    print((tmp_path / "celery.log").read_text()[-3000:])


def test_beat_and_worker_admit_a_submitted_job(cluster, personas, celery_worker):
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=4)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state == Job.State.ADMITTED:
            break
        assert celery_worker.poll() is None, "the Celery worker died"
        time.sleep(0.5)
    assert job.state == Job.State.ADMITTED
    assert job.allocations.filter(active=True).count() == 4
    # Beat keeps running passes (the submit's debounced trigger accounts for one at most).
    while time.monotonic() < deadline and SchedulingPass.objects.count() < 3:
        time.sleep(0.5)
    assert SchedulingPass.objects.count() >= 3

"""Scenario 3: Redis (broker and shared cache) stops and comes back. Jobs live in
PostgreSQL, so the API must keep accepting them while Redis is away: the
debounced pass trigger and the throttle cannot reach Redis, and neither may fail
a submit or make it hang. When Redis is back, beat and the worker reconnect by
themselves and passes admit what was submitted meanwhile.

The worker and beat run supervised as their systemd units run them (restart on
failure after 5 s): Celery 5.7's worker can die on a lost broker connection while
it holds unacknowledged messages (docs/reliability.md, "Findings"), and a
supervisor is then what brings it back. The scenario records each such exit and
requires it to be a failure exit, which is what makes Restart=on-failure act.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import UTC, datetime

import pytest

from tests.faults.clients import Outcome, job_body, submit_many
from tests.faults.harness import query, wait_for
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=300)

NODES, OUTAGE_S = 50, 20.0


def submitted_between(outcome: Outcome, start: float, end: float) -> list[tuple[float, int]]:
    return [(t, status) for t, status in outcome.timeline if start <= t <= end]


def test_api_accepts_jobs_while_redis_is_down_and_passes_resume(
    make_stack, shared_db_url, redis_server, figures
):
    stack = make_stack(
        shared_db_url,
        redis_server.url(0),
        BERTH_SCHEDULE_INTERVAL_S=1,
        BERTH_NODE_NOT_READY_AFTER_S=86400,
        BERTH_NODE_EVICT_AFTER_S=86400,
    )
    seeded = stack.seed(
        {"teams": [{"slug": "t0", "nominal": NODES * 8}], "nodes": {"count": NODES, "gpus": 8}}
    )
    stack.gunicorn(workers=2, threads=4).start()
    stack.wait_web()
    worker = stack.celery_worker("worker", concurrency=1).start().supervise(restart_s=5)
    beat = stack.beat().start().supervise(restart_s=5)
    wait_for(lambda: stack.pass_count() > 0, 60, "the first scheduling pass")

    outcome, stop = Outcome(), threading.Event()
    deadline = time.monotonic() + 200
    clients = threading.Thread(
        target=submit_many,
        args=(stack.url, seeded["tokens"], 10_000),
        kwargs=dict(
            threads=3, deadline=deadline, outcome=outcome, pause=0.3, stop=stop,
            body=lambda i: job_body(f"r-{i}", gpus=1),
        ),
        daemon=True,
    )  # fmt: skip
    clients.start()
    time.sleep(8)

    down_at = time.monotonic()
    redis_server.stop()
    time.sleep(OUTAGE_S)
    redis_server.start()
    up_at, up_wall = time.monotonic(), datetime.now(UTC)
    during = submitted_between(outcome, down_at, up_at)
    passes_before = stack.pass_count()

    wait_for(lambda: stack.pass_count(since=up_wall), 90, "a scheduling pass after Redis came back")
    recovery = time.monotonic() - up_at
    time.sleep(5)
    stop.set()
    clients.join(60)
    # Everything submitted (during the outage too) is admitted once passes resume.
    wait_for(
        lambda: (
            query(stack.db_url, "SELECT count(*) FROM core_job WHERE state = 'pending'")[0][0] == 0
        ),
        60,
        "the jobs submitted during the outage to be admitted",
    )
    report = assert_consistent(stack.db_url, outcome.accepted, when="after the Redis outage")
    outage_latencies = [
        lat
        for (t, _), lat in zip(outcome.timeline, outcome.latencies, strict=True)
        if down_at <= t <= up_at
    ]
    figures.update(
        outage_s=OUTAGE_S,
        submits_during_outage=len(during),
        statuses_during_outage=dict(
            sorted({s: sum(1 for _, x in during if x == s) for _, s in during}.items())
        ),
        submit_latency_during_outage_s_max=round(max(outage_latencies, default=0), 3),
        submit_latency_during_outage_s_median=round(statistics.median(outage_latencies or [0]), 3),
        statuses=dict(outcome.statuses),
        client_errors=dict(outcome.errors),
        accepted=len(outcome.accepted.ids),
        unresolved=len(outcome.unresolved),
        passes_before_restart=passes_before,
        redis_up_to_completed_pass_s=round(recovery, 1),
        worker_exits=[code for _, code in worker.exits],
        beat_exits=[code for _, code in beat.exits],
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
        lost=0,
    )
    assert len(during) >= 20, "too few submissions during the outage to tell"
    assert all(status == 201 for _, status in during), f"submits failed: {figures}"
    assert max(outage_latencies) < 5, "a submit hung while Redis was down"
    assert not outcome.errors and not outcome.unresolved
    assert report.jobs == len(set(outcome.accepted.ids)), "jobs no client was told about"
    assert worker.alive and beat.alive
    assert all(code != 0 for _, code in worker.exits + beat.exits), "a crash exited 0"

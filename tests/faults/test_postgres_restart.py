"""Scenario 4: PostgreSQL restarts under load, once cleanly (`pg_ctl stop -m fast`)
and once as a crash (`-m immediate`, so the restart replays its WAL). The portal
runs as in production (gunicorn, DJANGO_DEBUG=0) against a cluster of our own.

While the database is away the API must answer 503 with Retry-After at once (not
hang, not 500); afterwards it must serve again with no manual step (persistent
connections are health-checked), the Celery worker and beat must run passes
again, and every job a client was told was accepted must exist exactly once.
Clients retry with the same Idempotency-Key, so a submit whose answer was lost
in the outage resolves to its one job instead of a second one.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import UTC, datetime

import pytest

from tests.faults.clients import Outcome, job_body, submit_many
from tests.faults.harness import wait_for
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=360)

NODES, DOWN_S = 50, 10.0


def test_api_answers_503_while_postgres_restarts_and_recovers(
    make_stack, pg_cluster, shared_redis_url, figures
):
    stack = make_stack(
        pg_cluster.url("berth_faults"),
        shared_redis_url,
        BERTH_SCHEDULE_INTERVAL_S=1,
        BERTH_NODE_NOT_READY_AFTER_S=86400,
        BERTH_NODE_EVICT_AFTER_S=86400,
    )
    seeded = stack.seed(
        {
            "teams": [{"slug": "t0", "nominal": NODES * 4}, {"slug": "t1", "nominal": NODES * 4}],
            "nodes": {"count": NODES, "gpus": 8},
        }
    )
    stack.gunicorn(workers=2, threads=4).start()
    stack.wait_web()
    worker = stack.celery_worker("worker", concurrency=1).start().supervise(restart_s=5)
    beat = stack.beat().start().supervise(restart_s=5)
    wait_for(lambda: stack.pass_count() > 0, 60, "the first scheduling pass")

    outcome, stop = Outcome(), threading.Event()
    clients = threading.Thread(
        target=submit_many,
        args=(stack.url, seeded["tokens"], 100_000),
        kwargs=dict(
            threads=4, deadline=time.monotonic() + 240, outcome=outcome, pause=0.1, stop=stop,
            body=lambda i: job_body(f"p-{i}", gpus=1),
        ),
        daemon=True,
    )  # fmt: skip
    clients.start()
    outages = []
    for mode in ("fast", "immediate"):
        time.sleep(6)
        outages.append(restart_postgres(stack, pg_cluster, outcome, mode))
    time.sleep(5)
    stop.set()
    clients.join(60)
    assert not clients.is_alive()
    report = assert_consistent(stack.db_url, outcome.accepted, when="after the restarts")

    figures.update(
        restarts=[o["mode"] for o in outages],
        outages=outages,
        statuses=dict(outcome.statuses),
        client_errors=dict(outcome.errors),
        responses_5xx_other_than_503=len(outcome.bad_bodies),
        missing_retry_after=outcome.missing_retry_after,
        submit_latency_s_max=round(max(outcome.latencies), 3),
        submit_latency_s_median=round(statistics.median(outcome.latencies), 3),
        accepted=len(set(outcome.accepted.ids)),
        keys_resolved=len(outcome.accepted.keys),
        unresolved=len(outcome.unresolved),
        worker_exits=[code for _, code in worker.exits],
        beat_exits=[code for _, code in beat.exits],
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
        lost=0,
    )
    assert not outcome.bad_bodies, f"500s while the database was away: {outcome.bad_bodies[:3]}"
    assert set(outcome.statuses) <= {200, 201, 503}, outcome.statuses
    assert outcome.missing_retry_after == 0, "a 503 without Retry-After"
    assert not outcome.errors, f"requests hung or were refused: {outcome.errors}"
    assert not outcome.unresolved, f"submissions never accepted: {outcome.unresolved[:5]}"
    assert report.jobs == len(set(outcome.accepted.ids)), "jobs no client was told about"
    for o in outages:
        assert o["answers_503"] > 0, f"no 503 seen while the database was down ({o['mode']})"
        assert o["latency_while_down_s_max"] < 5, f"a request hung during the {o['mode']} outage"
    assert all(code != 0 for _, code in worker.exits + beat.exits)


def restart_postgres(stack, cluster, outcome: Outcome, mode: str) -> dict:
    """Stop the cluster (fast or immediate), keep it down DOWN_S, start it; measure."""
    down_at = time.monotonic()
    cluster.stop(mode)
    time.sleep(DOWN_S)
    cluster.start()  # returns once it accepts connections (crash recovery included)
    up_at, up_wall = time.monotonic(), datetime.now(UTC)

    def first_201():
        with outcome.lock:
            return next((t for t, s in outcome.timeline if t > up_at and s in (200, 201)), None)

    served = wait_for(first_201, 60, "the API to accept a job again")

    wait_for(lambda: stack.pass_count(since=up_wall), 90, "a scheduling pass after the restart")
    passed = time.monotonic()
    with outcome.lock:
        window = [
            (s, lat)
            for (t, s), lat in zip(outcome.timeline, outcome.latencies, strict=True)
            if down_at < t < up_at
        ]
    return {
        "mode": mode,
        "down_s": round(up_at - down_at, 1),
        "requests_while_down": len(window),
        "answers_503": sum(1 for s, _ in window if s == 503),
        "statuses_while_down": sorted({s for s, _ in window}),
        "latency_while_down_s_max": round(max((lat for _, lat in window), default=0), 3),
        "up_to_first_accepted_s": round(served - up_at, 2),
        "up_to_completed_pass_s": round(passed - up_at, 1),
    }

"""Scenario 6: a burst of 10,000 submissions over the API (bulk requests and
concurrent single submits with Idempotency-Keys) while passes run and 200
simulated agents heartbeat, run the admitted workers for a few seconds and
report their exits, so jobs flow through admitted → running → succeeded.

Every accepted job must exist exactly once, nothing must be created that no
client was told about, and the database must stay consistent while it all runs
(checked on live snapshots) and afterwards.
"""

from __future__ import annotations

import random
import statistics
import threading
import time

import pytest

from tests.faults.clients import Outcome, SimCluster, Submitter, job_body, submit_many
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=420)

AGENTS, TEAMS = 200, 4
BULK_REQUESTS, BULK_SIZE = 14, 500  # 7,000 jobs in bulk
SINGLE = 3_000  # and 3,000 one by one, 8 clients at once
FLOW_S = 45  # the cluster keeps working this long after the burst
SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 4)]


def body(i: int) -> dict:
    rng = random.Random(i)
    workers, gpus = rng.choice(SHAPES)
    return job_body(f"load-{i}", workers=workers, gpus=gpus, run_s=rng.uniform(1, 4))


def test_ten_thousand_submissions_with_200_agents_lose_nothing(
    make_stack, shared_db_url, shared_redis_url, figures
):
    stack = make_stack(
        shared_db_url,
        shared_redis_url,
        BERTH_SCHEDULE_INTERVAL_S=2,
        BERTH_API_RATE="1000000/min",  # this measures the system, not the throttle
    )
    teams = [{"slug": f"t{i}", "nominal": AGENTS * 8 // TEAMS} for i in range(TEAMS)]
    seeded = stack.seed({"teams": teams, "bootstrap": True})
    tokens = seeded["tokens"]
    stack.gunicorn(workers=3, threads=4).start()
    stack.wait_web()
    sims = SimCluster(stack.url, seeded["bootstrap"], AGENTS, interval=3.0, threads=16)
    sims.register()
    sims.start()
    stack.celery_worker("worker", concurrency=2).start()
    stack.beat().start()

    outcome = Outcome()
    deadline = time.monotonic() + 240
    started = time.monotonic()

    def bulk() -> None:
        for n in range(BULK_REQUESTS):
            team = sorted(tokens)[n % TEAMS]
            submitter = Submitter(stack.url, tokens[team], team, outcome)
            start = SINGLE + n * BULK_SIZE
            submitter.submit_bulk([body(start + k) for k in range(BULK_SIZE)], deadline)

    bulk_thread = threading.Thread(target=bulk, daemon=True)
    bulk_thread.start()
    singles = threading.Thread(
        target=submit_many,
        args=(stack.url, tokens, SINGLE),
        kwargs=dict(threads=8, deadline=deadline, outcome=outcome, body=body),
        daemon=True,
    )
    singles.start()
    time.sleep(10)
    during = assert_consistent(stack.db_url, when="during the burst")
    bulk_thread.join(300)
    singles.join(300)
    burst_s = time.monotonic() - started
    accepted = len(set(outcome.accepted.ids))
    time.sleep(FLOW_S)
    after = assert_consistent(stack.db_url, outcome.accepted, when="while jobs flow")
    sims.stop()
    report = assert_consistent(stack.db_url, outcome.accepted, when="at the end")
    hb = sorted(sims.stats.latencies)
    figures.update(
        agents=AGENTS,
        gpus=AGENTS * 8,
        submissions=SINGLE + BULK_REQUESTS * BULK_SIZE,
        accepted=accepted,
        unresolved=len(outcome.unresolved),
        burst_s=round(burst_s, 1),
        accepted_per_s=round(accepted / burst_s),
        api_statuses=dict(outcome.statuses),
        api_errors=dict(outcome.errors),
        single_submit_latency_s_median=round(statistics.median(outcome.latencies), 3),
        heartbeats=sims.stats.heartbeats,
        heartbeat_statuses=dict(sims.stats.statuses),
        heartbeat_latency_s_p50=round(hb[len(hb) // 2], 3) if hb else None,
        heartbeat_latency_s_p99=round(hb[int(len(hb) * 0.99)], 3) if hb else None,
        workers_started=sims.stats.started,
        workers_exited=sims.stats.exited,
        workers_stopped=sims.stats.stopped,
        passes=stack.pass_count(),
        pass_ms_max=round(max(p[2] for p in stack.scheduling_passes())),
        jobs_checked_during_burst=during.jobs,
        jobs_by_state_after_flow=after.jobs_by_state,
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
        lost=0,
    )
    assert accepted == SINGLE + BULK_REQUESTS * BULK_SIZE, "not every submission was accepted"
    assert not outcome.unresolved and not outcome.errors
    assert report.jobs == accepted, "jobs exist that no client was told about"
    assert report.jobs_by_state.get("succeeded", 0) > 500, "jobs did not flow"
    assert set(sims.stats.statuses) == {200}, sims.stats.statuses

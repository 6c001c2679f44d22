"""Scenario 2: two `celery beat` processes and two workers at once (a deployment
mistake docs/deploy.md calls harmless). Passes are queued twice as often and run
concurrently on four pool slots; the advisory lock must still keep them one at a
time (recorded pass intervals never overlap; the losers log that they skip), and
no GPU may be booked twice while simulated agents run the admitted jobs.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.clients import SimCluster
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=300)

AGENTS, PENDING, RUN_S = 20, 3000, 45
SKIP_LINE = "another scheduling pass is running; skipping"
PRELOCK_SLACK_S = 0.05  # see overlaps()


def overlaps(passes: list[tuple]) -> list[float]:
    """Seconds by which each pass's recorded interval runs into the next one's.

    `started_at` is taken once the pass holds the lock, but `duration_ms` also
    counts what came before it (the connection check, BEGIN, the lock query), so
    a recorded interval ends up to that much later than the pass really did.
    """
    spans = sorted((p[1].timestamp(), p[1].timestamp() + p[2] / 1000) for p in passes)
    return [end - nxt for (_, end), (nxt, _) in zip(spans, spans[1:], strict=False) if end > nxt]


def out_of_order(passes: list[tuple]) -> list[int]:
    """Passes whose row (inserted as the pass ends, inside the lock) got a lower id than
    that of a pass that started before them: one pass ran inside another."""
    by_id = sorted(passes)
    return [b[0] for a, b in zip(by_id, by_id[1:], strict=False) if b[1] < a[1]]


def completed_passes(log: str) -> int:
    """Celery's log format drops the pass's fields; the message alone marks a completed pass."""
    return sum(1 for line in log.splitlines() if line.rstrip().endswith("] scheduling pass"))


def test_two_beats_two_workers_still_one_pass_at_a_time(
    make_stack, shared_db_url, shared_redis_url, figures
):
    stack = make_stack(shared_db_url, shared_redis_url, BERTH_SCHEDULE_INTERVAL_S=1)
    seeded = stack.seed(
        {
            "teams": [{"slug": "t0", "nominal": 80}, {"slug": "t1", "nominal": 80}],
            "bootstrap": True,
            "pending": {"count": PENDING, "shapes": [[1, 1], [1, 2], [1, 4], [1, 8], [2, 8]]},
        }
    )
    stack.gunicorn(workers=2, threads=4).start()
    stack.wait_web()
    sims = SimCluster(stack.url, seeded["bootstrap"], AGENTS, interval=1.0, threads=4)
    sims.register()
    sims.start()
    beats = [stack.beat("beat-a").start(), stack.beat("beat-b").start()]
    workers = [
        stack.celery_worker("worker-a", concurrency=2).start(),
        stack.celery_worker("worker-b", concurrency=2).start(),
    ]
    time.sleep(RUN_S)
    for proc in beats + workers:
        assert proc.alive, f"{proc.name} died:\n{proc.text()[-2000:]}"
    mid = assert_consistent(stack.db_url, when="while both beats run")
    for proc in beats + workers:
        proc.stop()
    sims.stop()

    passes = stack.scheduling_passes()
    late = overlaps(passes)
    nested = out_of_order(passes)
    sent = [b.text().count("Sending due task scheduling-pass") for b in beats]
    skipped = [w.text().count(SKIP_LINE) for w in workers]
    ran = [completed_passes(w.text()) for w in workers]
    report = assert_consistent(stack.db_url, when="at the end")
    figures.update(
        agents=AGENTS,
        gpus=AGENTS * 8,
        run_s=RUN_S,
        passes_queued_per_beat=sent,
        passes_completed=len(passes),
        passes_completed_per_worker=ran,
        passes_skipped_per_worker=skipped,
        pass_ms_max=round(max(p[2] for p in passes)),
        intervals_touching_within_prelock_slack=len(late),
        max_overlap_ms=round(max(late, default=0) * 1000, 1),
        passes_out_of_order=len(nested),
        heartbeats=sims.stats.heartbeats,
        heartbeat_statuses=dict(sims.stats.statuses),
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
        jobs_consistent_mid_run=mid.jobs,
    )
    assert all(n > 10 for n in sent), f"both beats should queue passes: {sent}"
    assert all(n > 0 for n in ran), f"both workers should run passes: {ran}"
    assert sum(skipped) > 0, "no pass ever found the lock taken: the scenario made no contention"
    assert not nested, f"passes {nested} ran inside other passes"
    assert max(late, default=0) < PRELOCK_SLACK_S, f"passes overlapped by {max(late):.3f} s"
    assert report.jobs_by_state.get("succeeded", 0) > 100, "jobs did not flow"

"""Scenario 1: the Celery worker is SIGKILLed in the middle of a scheduling pass,
again and again. The pass is one transaction, so a kill must leave no trace of it
(no admission, no worker, no allocation, no pass record), the advisory lock must
come free with the dead connection, and the next pass after a restart completes.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter

import pytest

from tests.faults.harness import query, wait_for
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=420)

# portal.core.scheduling.PASS_LOCK_KEY (0x6265727468); pg_locks shows a bigint
# advisory key as classid (high 32 bits) and objid (low 32 bits).
LOCK_KEY = 0x6265727468
LOCK_HELD = (
    "SELECT l.pid, a.xact_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
    "AND l.objsubid = 1 AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)
LOCK_ARGS = [LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF]
KILLS = 10
NODES, PENDING, TEAMS = 500, 10_000, 10


def lock_holder(url: str) -> tuple | None:
    """(backend pid, transaction start) of the pass holding the lock: the pool process
    keeps its connection, so only the transaction start tells two passes apart."""
    rows = query(url, LOCK_HELD, LOCK_ARGS)
    return rows[0] if rows else None


def activity(url: str, pid: int) -> str:
    """What the pass's backend is doing: running a statement, or idle in the
    transaction after one (Python works between statements), and which."""
    rows = query(url, "SELECT state, query FROM pg_stat_activity WHERE pid = %s", [pid])
    if not rows:
        return "gone"
    state, sql = rows[0]
    words = " ".join(sql.replace('"', "").split()[:4])[:48]
    return f"{'in' if state == 'active' else 'after'} {words}"


def job_states(url: str) -> dict[str, int]:
    return dict(query(url, "SELECT state, count(*) FROM core_job GROUP BY state"))


def counts(url: str) -> tuple[int, int, int]:
    return query(
        url,
        "SELECT (SELECT count(*) FROM core_worker), (SELECT count(*) FROM core_allocation), "
        "(SELECT count(*) FROM core_jobevent)",
    )[0]


def test_worker_killed_mid_pass_leaves_no_partial_admission(
    make_stack, shared_db_url, shared_redis_url, figures
):
    stack = make_stack(
        shared_db_url,
        shared_redis_url,
        BERTH_SCHEDULE_INTERVAL_S=1,
        # The seeded nodes have no agents: keep them ready for the whole scenario.
        BERTH_NODE_NOT_READY_AFTER_S=86400,
        BERTH_NODE_EVICT_AFTER_S=86400,
    )
    seeded = stack.seed(
        {
            "teams": [{"slug": f"t{i}", "nominal": NODES * 8 // TEAMS} for i in range(TEAMS)],
            "nodes": {"count": NODES, "gpus": 8},
            "pending": {
                "count": PENDING,
                "shapes": [[1, 1], [1, 2], [1, 4], [1, 8], [2, 8], [4, 8]],
            },
            "measure_pass": True,
        }
    )
    db = stack.db_url
    pass_ms = seeded["pass_ms"]
    figures.update(nodes=NODES, gpus=NODES * 8, pending_jobs=PENDING, first_pass_ms=round(pass_ms))
    stack.beat().start()
    worker = stack.celery_worker("worker", concurrency=1)
    rng = random.Random(20261130)
    hits, misses, release_s, offsets, phases = 0, 0, [], [], Counter()
    tries = 0
    while hits < KILLS and tries < KILLS * 3:
        tries += 1
        worker.start()
        # Wait for a pass to take the lock, note what was committed before it, and kill
        # the worker at a random point of the pass.
        holder = wait_for(lambda: lock_holder(db), 90, "a scheduling pass to start", every=0.01)
        passes, states, rows = stack.pass_count(), job_states(db), counts(db)
        if lock_holder(db) != holder:
            # That pass ended while the baseline was read; kill the worker and retry.
            worker.kill_group(signal.SIGKILL)
            wait_for(lambda: lock_holder(db) is None, 30, "the lock to be released", 0.01)
            misses += 1
            continue
        # Aim anywhere in the pass: its length is that of the last pass that completed.
        done = stack.scheduling_passes()
        expected_ms = done[-1][2] if done else pass_ms
        offset = rng.uniform(0.0, 1.1) * expected_ms / 1000
        time.sleep(offset)
        doing = activity(db, holder[0])
        worker.kill_group(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: lock_holder(db) is None, 30, "the dead pass's lock to be released", 0.01)
        release_s.append(time.monotonic() - killed_at)
        if stack.pass_count() == passes:
            hits += 1
            offsets.append(round(offset, 3))
            phases[doing] += 1
            # Nothing of the killed pass is visible: same job states, rows and passes.
            assert job_states(db) == states, "a killed pass changed job states"
            assert counts(db) == rows, "a killed pass left workers, allocations or events"
        else:
            misses += 1  # the pass committed before the kill landed
        assert_consistent(db, when=f"after kill {tries}")
    assert hits == KILLS, f"only {hits} of {tries} kills landed inside a pass"

    restarted = time.monotonic()
    passes = stack.pass_count()
    worker.start()
    wait_for(lambda: stack.pass_count() > passes, 120, "a pass after the last restart")
    recovery = time.monotonic() - restarted
    admitted = query(db, "SELECT count(*) FROM core_job WHERE state = 'admitted'")[0][0]
    assert admitted > 0
    report = assert_consistent(db, when="after recovery")
    log = worker.text()
    assert "Traceback" not in log.split("=== start")[-1], "the restarted worker logged an error"
    last = stack.scheduling_passes()[-1]
    figures.update(
        kills=tries,
        kills_inside_a_pass=hits,
        kills_after_commit=misses,
        kill_offsets_s=offsets,
        pass_backend_at_kill=dict(phases),
        lock_released_after_kill_s_max=round(max(release_s), 3),
        restart_to_completed_pass_s=round(recovery, 1),
        last_pass_ms=round(last[2]),
        admitted_after_recovery=admitted,
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
        lost=0,
    )

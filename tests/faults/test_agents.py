"""Scenario 5: real node agents (fake NVML, process runtime running real commands)
against a production-mode portal, with beat and a worker running passes and the
node monitor as in production, on short timeouts:

- an agent SIGKILLed mid-job and restarted re-adopts its running worker: the
  gang completes once, with one worker row per rank and one start per worker;
- an agent that disappears for good: its orphaned worker fences itself when its
  lease runs out, the node goes not ready, and only after the eviction timeout,
  later than the fence, is the gang requeued; it then completes elsewhere.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime

import pytest

from tests.faults.harness import query, wait_for
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=300)

# disconnect (10) < not ready (8) + evict (6), as the settings require.
TIMEOUTS = dict(
    BERTH_HEARTBEAT_INTERVAL_S=0.5,
    BERTH_NODE_NOT_READY_AFTER_S=8,
    BERTH_NODE_EVICT_AFTER_S=6,
    BERTH_AGENT_DISCONNECT_LIMIT_S=10,
    BERTH_SCHEDULE_INTERVAL_S=1,
    # A requeued gang waits out a backoff (60 s by default) before it is admitted again.
    BERTH_REQUEUE_BACKOFF_BASE_S=2,
)
HOSTS = ("node-a", "node-b", "node-c")


def submit(stack, token: str, command: list[str], workers: int, name: str) -> int:
    import requests

    r = requests.post(
        stack.url + "/api/v1/jobs/",
        json={
            "name": name,
            "image": "none",
            "command": command,
            "flavor": "h100-80gb",
            "workers": workers,
            "gpus_per_worker": 4,
            "max_runtime_seconds": 600,
            "grace_period_seconds": 2,
        },
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def job_state(db: str, job_id: int) -> str:
    return query(db, "SELECT state FROM core_job WHERE id = %s", [job_id])[0][0]


def workers_of(db: str, job_id: int) -> list[tuple]:
    """(attempt, rank, hostname, state, exit_code, log_tail) of every worker row."""
    return query(
        db,
        "SELECT w.attempt, w.rank, n.hostname, w.state, w.exit_code, w.log_tail "
        "FROM core_worker w JOIN core_node n ON n.id = w.node_id WHERE w.job_id = %s "
        "ORDER BY w.attempt, w.rank",
        [job_id],
    )


def test_agent_killed_and_restarted_readopts_and_a_lost_agent_is_fenced_then_evicted(
    make_stack, shared_db_url, shared_redis_url, figures
):
    stack = make_stack(shared_db_url, shared_redis_url, **TIMEOUTS)
    seeded = stack.seed({"teams": [{"slug": "t0", "nominal": 12}], "bootstrap": True})
    token, db = seeded["tokens"]["t0"], stack.db_url
    stack.gunicorn(workers=2, threads=4).start()
    stack.wait_web()
    stack.celery_worker("worker", concurrency=2).start()
    stack.beat().start()
    agents = {host: stack.agent(host, seeded["bootstrap"]).start() for host in HOSTS}
    wait_for(
        lambda: query(db, "SELECT count(*) FROM core_node WHERE condition = 'ready'")[0][0] == 3,
        60,
        "three agents to register",
    )

    # --- A: SIGKILL an agent while its worker runs, restart it at once ---------------------
    gang = submit(
        stack, token, ["sh", "-c", "echo start $RANK; sleep 10; echo done $RANK"], 2, "readopt"
    )
    wait_for(lambda: job_state(db, gang) == "running", 60, "the gang to run")
    host = workers_of(db, gang)[0][2]
    agents[host].kill_leader(signal.SIGKILL)
    killed = time.monotonic()
    time.sleep(2)
    agents[host].start()
    wait_for(
        lambda: "agent running on" in agents[host].text().split("=== start")[-1],
        30,
        "the restarted agent to run",
    )
    readopted = time.monotonic() - killed
    wait_for(lambda: job_state(db, gang) in ("succeeded", "failed"), 60, "the gang to end")
    rows = workers_of(db, gang)
    key = f"{gang}.0.0"
    starts = agents[host].text().count(f"starting worker {key} ")
    figures.update(
        readopt_job=gang,
        readopt_agent_down_to_running_s=round(readopted, 1),
        readopt_job_state=job_state(db, gang),
        readopt_worker_rows=len(rows),
        readopt_starts_of_the_readopted_worker=starts,
    )
    assert job_state(db, gang) == "succeeded", rows
    assert [(a, r) for a, r, *_ in rows] == [(0, 0), (0, 1)], "one worker row per rank"
    assert all(state == "exited" and code == 0 for *_, state, code, _ in rows), rows
    assert all(log.count("start") == 1 and "done" in log for *_, log in rows), "ran twice"
    assert starts == 1, f"worker {key} was started {starts} times"
    kinds = [
        k
        for (k,) in query(
            db, "SELECT kind FROM core_jobevent WHERE job_id = %s ORDER BY id", [gang]
        )
    ]
    assert kinds == ["submitted", "admitted", "started", "succeeded"], kinds

    # --- B: an agent that never comes back -----------------------------------------------
    lost = submit(
        stack,
        token,
        ["sh", "-c", 'if [ "$BERTH_ATTEMPT" = 0 ]; then exec sleep 300; fi; echo again; sleep 2'],
        1,
        "orphan",
    )
    wait_for(lambda: job_state(db, lost) == "running", 60, "the job to run")
    host = workers_of(db, lost)[0][2]
    agents[host].kill_leader(signal.SIGKILL)
    killed, killed_wall = time.monotonic(), time.time()
    result = stack.tmp / "agents" / host / "workers" / f"{lost}.0.0" / "result.json"
    wait_for(result.exists, 40, "the orphaned worker to fence itself")
    fenced = json.loads(result.read_text())
    # The shim records no time in the file: its modification time is when the command ended.
    fenced.setdefault("finished_at", result.stat().st_mtime)
    wait_for(
        lambda: (
            query(db, "SELECT condition FROM core_node WHERE hostname = %s", [host])[0][0]
            == "not_ready"
        ),
        40,
        "the silent node to go not ready",
    )
    not_ready = time.monotonic() - killed
    event = wait_for(
        lambda: query(
            db, "SELECT at FROM core_jobevent WHERE job_id = %s AND kind = 'node_lost'", [lost]
        ),
        60,
        "the gang of the lost node to be requeued",
    )
    requeued_at: datetime = event[0][0]
    wait_for(
        lambda: job_state(db, lost) == "succeeded", 60, "the requeued job to succeed elsewhere"
    )
    rows = workers_of(db, lost)
    report = assert_consistent(db, when="after the agent faults")
    figures.update(
        lost_job=lost,
        fence_exit_code=fenced["exit_code"],
        kill_to_fence_s=round(fenced["finished_at"] - killed_wall, 1),
        kill_to_not_ready_s=round(not_ready, 1),
        kill_to_requeue_s=round(requeued_at.timestamp() - killed_wall, 1),
        fence_before_requeue_s=round(requeued_at.timestamp() - fenced["finished_at"], 1),
        lost_job_workers=[(a, r, h, s, c) for a, r, h, s, c, _ in rows],
        jobs=report.jobs,
        jobs_by_state=report.jobs_by_state,
    )
    assert fenced["exit_code"] == 128 + signal.SIGTERM
    assert fenced["finished_at"] < requeued_at.timestamp(), "requeued before the orphan stopped"
    assert requeued_at > datetime.fromtimestamp(killed_wall, UTC)
    assert [(a, r, s) for a, r, _, s, *_ in rows] == [(0, 0, "lost"), (1, 0, "exited")], rows
    assert rows[1][2] != host and rows[1][4] == 0 and "again" in rows[1][5]
    assert query(db, "SELECT condition FROM core_node WHERE hostname = %s", [host])[0][0] == (
        "not_ready"
    )

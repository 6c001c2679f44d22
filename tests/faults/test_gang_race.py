"""Scenario 2b: the two nodes of a gang report at the same moment. Two simulated
agents hold one worker each of a 2 × 8 gang and heartbeat concurrently (a
barrier releases both requests together), first with both workers running, then
with both exited. Each time the gang must settle: `running` after the first pair
of heartbeats, `succeeded` after the second. Before the fix in
portal/core/actions/workers.settle_jobs each heartbeat read the other node's
worker as not yet changed, and the job stayed `admitted` or `running` forever.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.faults.clients import Outcome, SimCluster, Submitter, job_body
from tests.faults.harness import query, wait_for
from tests.faults.invariants import assert_consistent

pytestmark = pytest.mark.faults(timeout=240)

ROUNDS = 20


def together(sims: SimCluster, agents, sessions) -> None:
    """One heartbeat from each agent, sent at the same instant."""
    barrier = threading.Barrier(len(agents))

    def beat(agent, session):
        barrier.wait()
        sims.heartbeat(agent, session)

    threads = [
        threading.Thread(target=beat, args=pair) for pair in zip(agents, sessions, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_two_nodes_reporting_a_gang_at_once_settle_it(
    make_stack, shared_db_url, shared_redis_url, figures
):
    stack = make_stack(shared_db_url, shared_redis_url, BERTH_SCHEDULE_INTERVAL_S=1)
    seeded = stack.seed({"teams": [{"slug": "t0", "nominal": 16}], "bootstrap": True})
    stack.gunicorn(workers=2, threads=4).start()
    stack.wait_web()
    stack.celery_worker("worker", concurrency=1).start()
    stack.beat().start()
    sims = SimCluster(stack.url, seeded["bootstrap"], 2, interval=1.0, threads=2)
    sims.register()
    agents, sessions = sims.agents, [requests.Session(), requests.Session()]
    submitter = Submitter(stack.url, seeded["tokens"]["t0"], "t0", Outcome())
    db = stack.db_url

    def state(job: int) -> str:
        return query(db, "SELECT state FROM core_job WHERE id = %s", [job])[0][0]

    stuck_start, stuck_end = [], []
    for n in range(ROUNDS):
        for agent, session in zip(agents, sessions, strict=True):
            sims.heartbeat(agent, session)  # keep both nodes ready between rounds
        job = submitter.submit(
            f"gang-{n}", job_body(f"gang-{n}", workers=2, gpus=8, run_s=600), time.monotonic() + 30
        )
        wait_for(lambda job=job: state(job) == "admitted", 30, "the gang to be admitted", 0.05)
        for agent, session in zip(agents, sessions, strict=True):
            sims.heartbeat(agent, session)  # each agent learns its worker
        assert all(len(a.workers) == 1 for a in agents), [a.workers for a in agents]
        together(sims, agents, sessions)  # both report "running"
        if state(job) != "running":
            stuck_start.append(job)
        for agent in agents:
            for worker in agent.workers.values():
                worker.ends = 0  # both exit 0 now
        together(sims, agents, sessions)  # both report "exited"
        if state(job) != "succeeded":
            stuck_end.append(job)
        for agent, session in zip(agents, sessions, strict=True):
            sims.heartbeat(agent, session)  # acknowledgements
    figures.update(
        rounds=ROUNDS,
        gangs_not_running_after_both_reported_running=stuck_start,
        gangs_not_succeeded_after_both_reported_exit=stuck_end,
    )
    report = assert_consistent(db, submitter.outcome.accepted, when="after the rounds")
    figures.update(jobs_by_state=report.jobs_by_state)
    assert not stuck_start and not stuck_end

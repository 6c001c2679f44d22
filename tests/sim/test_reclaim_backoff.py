"""The simulator keeps the reclaim backoff's state (scheduler.requeue.count_reclaims) and
runs a pass when a team's cooldown ends, so a borrower starts then, not at the next
arrival or completion."""

from __future__ import annotations

import pytest

from scheduler import PolicyConfig
from scheduler.sim import SimConfig, Simulator
from scheduler.sim.cluster import homogeneous
from scheduler.sim.results import summarize
from tests.sim.helpers import job, team


@pytest.mark.parametrize("on, waited", [(False, 90.0), (True, 110.0)])
def test_a_borrower_starts_when_its_teams_cooldown_ends(on, waited):
    jobs = [
        job(1, "b", at=0, duration=36_000, gpus=8),  # borrows all of a's quota
        job(2, "b", at=50, duration=36_000, gpus=1),  # would borrow too
        job(3, "a", at=100, duration=10, gpus=8),  # reclaims job 1 at 100, runs 130-140
    ]
    policy = PolicyConfig(policy="fairshare", explain=False, reclaim_backoff=on)
    sim = Simulator(
        jobs, homogeneous(1, 8, 1), [team("a", 8), team("b", 0)], SimConfig(policy, check=True)
    ).run()
    assert sim.preemptions == 1 and sim.recs[3].waited == 30
    # free at 140; with the backoff b may borrow again from 160 (reclaimed at 100, 60 s)
    assert sim.recs[2].waited == waited
    kept = {("b", "gpu"): (1, sim.recs[3].job.submitted_at)} if on else {}  # kept only if on
    assert sim.reclaims == kept


@pytest.mark.parametrize("on", [False, True])
def test_a_cooldown_ending_after_the_last_job_does_not_lengthen_the_run(on):
    jobs = [
        job(1, "b", at=0, duration=30, gpus=8),
        job(2, "b", at=1, duration=20, gpus=8),
        job(3, "a", at=10, duration=5, gpus=8),  # reclaims job 2 at 10
    ]
    policy = PolicyConfig(policy="fairshare", explain=False, reclaim_backoff=on)
    cfg = SimConfig(policy, check=True, grace_period_s=5.0, requeue_backoff_s=0.0)
    sim = Simulator(jobs, homogeneous(2, 8, 1), [team("a", 8), team("b", 8)], cfg).run()
    s = summarize(sim, 0.0).summary
    assert sim.preemptions == 1
    assert s["makespan_s"] == max(r.finished for r in sim.recs.values()) - sim.rec.t0

"""The simulator's sanity checks: what any correct replay must satisfy.

Every run here has check=True: each plan is verified against the simulated
cluster (no GPU handed out twice, every pending job answered once, every node's
held + free GPUs equal to its size), so any over-allocation fails the test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.sim import Simulator
from scheduler.sim.cluster import homogeneous, quota_teams
from scheduler.sim.engine import END
from tests.scheduler.helpers import examples
from tests.sim.helpers import POLICIES, config, job, run, team


def mixed_trace(n=40):
    """Jobs of three teams, gangs of 1 to 16 GPUs, arriving in bursts."""
    sizes = (1, 2, 4, 8, 16, 1, 1, 2)
    return [
        job(
            i + 1,
            "abc"[i % 3],
            at=(i // 4) * 50.0,
            duration=300.0 + 97 * (i % 7),
            gpus=sizes[i % 8],
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cluster_larger_than_peak_demand_never_queues(policy):
    jobs = mixed_trace()
    peak = sum(j.gpus for j in jobs)  # all of them at once
    sim, s = run(jobs, nodes=peak // 8 + 2, policy=policy)
    assert s["max_wait_s"] == 0
    for r in sim.recs.values():
        assert r.waited == 0
        assert r.finished - r.job.submitted_at == r.job.duration
    assert s["avg_jct_s"] == pytest.approx(sum(j.duration for j in jobs) / len(jobs), abs=0.1)


class Counting(Simulator):
    """Counts completions per job, to show each job completes exactly once."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.completions: dict[int, int] = {}

    def _complete(self, r):
        self.completions[r.job.id] = self.completions.get(r.job.id, 0) + 1
        super()._complete(r)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_job_in_the_window_completes_exactly_once(policy):
    jobs = mixed_trace(60)
    nodes = homogeneous(3, 8)
    sim = Counting(jobs, nodes, quota_teams(jobs, nodes), config(policy)).run()
    assert sim.completions == {j.id: 1 for j in jobs}
    assert not sim.pending and not sim.running


@pytest.mark.parametrize("policy", POLICIES)
def test_utilization_is_a_share_and_queueing_shows(policy):
    sim, s = run(mixed_trace(60), nodes=2, policy=policy)
    assert 0 < s["utilization"] <= 1
    assert s["avg_wait_s"] > 0
    assert all(0 <= u <= 1 + 1e-9 for u in sim.rec.utilization_series())


@pytest.mark.parametrize("policy", POLICIES)
def test_the_same_input_gives_the_same_output(policy):
    jobs = mixed_trace(50)
    first = run(jobs, nodes=2, policy=policy)[1]
    second = run(list(reversed(jobs)), nodes=2, policy=policy)[1]
    first.pop("sim_wall_s"), second.pop("sim_wall_s")
    assert first == second


def gpu_seconds_accounted(sim) -> float:
    """Return useful plus lost GPU-seconds: every second a job held GPUs."""
    useful = sum(r.job.gpus * r.job.duration for r in sim.recs.values() if r.finished is not None)
    return useful + sum(r.lost_s for r in sim.recs.values())


@pytest.mark.parametrize("policy", POLICIES)
def test_gpu_time_is_conserved(policy):
    sim, s = run(mixed_trace(60), nodes=2, policy=policy)
    assert sim.rec.alloc_s == pytest.approx(gpu_seconds_accounted(sim))
    assert sum(sim.rec.team_alloc_s.values()) == pytest.approx(sim.rec.alloc_s)


def reclaim_trace():
    """Team a borrows the whole cluster with long jobs; team b then reclaims its half."""
    borrowers = [job(i, "a", at=0, duration=10_000, gpus=4) for i in (1, 2, 3, 4)]
    return [*borrowers, job(5, "b", at=100, duration=500, gpus=8)]


def test_a_preempted_job_stops_after_its_grace_period_and_completes_later():
    teams = [team("a", 8), team("b", 8)]
    sim, s = run(reclaim_trace(), nodes=2, policy="fairshare", teams=teams, grace_period_s=30.0)
    assert s["preemptions"] == 2  # two 4-GPU jobs of a free the 8 GPUs b is owed
    victims = [r for r in sim.recs.values() if r.preempted]
    for r in victims:
        # it ran from 0 until b arrived (100 s) plus the 30 s grace period, and lost that work
        assert r.lost_s == pytest.approx((100 + 30) * 4)
        assert r.finished is not None
        assert r.finished - r.job.submitted_at >= r.job.duration + 130
    b = sim.recs[5]
    assert b.waited == pytest.approx(30.0)  # b starts when the victims' grace period ends
    assert s["lost_gpu_hours"] == pytest.approx(2 * 130 * 4 / 3600, abs=0.1)
    assert sim.rec.alloc_s == pytest.approx(gpu_seconds_accounted(sim))


def test_a_preempted_job_that_ends_within_its_grace_period_just_completes():
    """Max runtimes twice the run times: a's jobs end 10 s into their victim's grace."""
    jobs = [job(1, "a", at=0, duration=110, gpus=8), job(2, "a", at=0, duration=110, gpus=8)]
    jobs.append(job(3, "b", at=100, duration=50, gpus=8))
    teams = [team("a", 8), team("b", 8)]
    sim, s = run(jobs, nodes=2, policy="fairshare", teams=teams, runtime_estimate="double")
    assert s["preemptions"] == 1
    assert s["lost_gpu_hours"] == 0
    assert all(
        r.finished - r.job.submitted_at == r.job.duration
        for r in sim.recs.values()
        if r.job.team == "a"
    )


def test_a_job_that_reaches_its_max_runtime_before_a_victim_could_stop_is_waited_for():
    """The same with exact max runtimes: a's jobs end 10 s after b's job arrives, before
    a victim's 30 s of grace; preempting one would lose 100 s of its work and free its
    GPUs 20 s later than it ends by itself (preemption rule 2)."""
    jobs = [job(1, "a", at=0, duration=110, gpus=8), job(2, "a", at=0, duration=110, gpus=8)]
    jobs.append(job(3, "b", at=100, duration=50, gpus=8))
    sim, s = run(jobs, nodes=2, policy="fairshare", teams=[team("a", 8), team("b", 8)])
    assert s["preemptions"] == 0
    assert sim.recs[3].waited == pytest.approx(10.0)


def test_fifo_policies_never_preempt():
    teams = [team("a", 8), team("b", 8)]
    for policy in ("fifo", "fifo-backfill"):
        _, s = run(reclaim_trace(), nodes=2, policy=policy, teams=teams)
        assert s["preemptions"] == 0


def test_gangs_span_nodes_and_start_all_at_once():
    jobs = [job(1, "a", gpus=16), job(2, "a", at=1, gpus=1)]
    sim, _ = run(jobs, nodes=3)
    placed = sim.recs[1]
    assert placed.job.workers == 2 and placed.job.gpus_per_worker == 8
    assert placed.first_start == placed.job.submitted_at


def test_a_gang_that_can_never_fit_is_reported_unfinished_not_looped_on():
    jobs = [job(1, "a", gpus=32), job(2, "a", at=1, gpus=1)]
    sim, s = run(jobs, nodes=2, teams=[team("a", 16)])
    assert s["unfinished"] == 1 and s["jobs"] == 1
    assert sim.recs[2].finished is not None


def test_passes_run_only_when_something_changed_and_jobs_wait():
    # Three arrivals at one timestamp are one pass; each completion with nothing
    # pending is none.
    jobs = [job(i, "a", at=0, duration=100 + i) for i in (1, 2, 3)]
    sim, _ = run(jobs, nodes=1)
    assert sim.passes == 1


def test_stale_events_of_a_requeued_attempt_are_ignored():
    sim, _ = run(reclaim_trace(), nodes=2, teams=[team("a", 8), team("b", 8)])
    assert all(kind != END for _, kind, _, _ in sim.events)  # the heap drained


traces = st.lists(
    st.tuples(
        st.sampled_from("abc"),
        st.integers(0, 2000),  # submit offset
        st.integers(1, 3000),  # duration
        st.sampled_from((1, 1, 2, 3, 4, 8, 16)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=examples(40), deadline=None)
@given(
    traces,
    st.sampled_from(POLICIES),
    st.integers(1, 3),
    st.sampled_from(("exact", "double", "queue-max")),
)
def test_invariants_hold_on_random_small_traces(rows, policy, nodes, estimate):
    jobs = [job(i + 1, t, at, d, g) for i, (t, at, d, g) in enumerate(rows)]
    teams = [team("a", 4 * nodes), team("b", 2 * nodes), team("c", 2 * nodes)]
    # check=True verifies every plan: no GPU over-allocated at any event
    sim, s = run(jobs, nodes=nodes, policy=policy, teams=teams, runtime_estimate=estimate)
    fits = [j for j in jobs if j.gpus <= 8 * nodes]
    assert s["jobs"] == len(fits)  # every job that can ever fit completes (preempted ones too)
    assert s["utilization"] <= 1 + 1e-9
    assert sim.rec.alloc_s == pytest.approx(gpu_seconds_accounted(sim))
    for r in sim.recs.values():
        if r.finished is not None:
            assert r.finished - r.job.submitted_at >= r.job.duration + r.waited - 1e-6

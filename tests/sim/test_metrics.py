"""The measures: fairness, entitlement, fragmentation, percentiles."""

from __future__ import annotations

import pytest

from scheduler import PolicyConfig, Quota, Team
from scheduler.sim import SimConfig, Simulator
from scheduler.sim.cluster import NodeSpec
from scheduler.sim.metrics import fragmentation_share, jain, percentile, waterfill
from scheduler.sim.results import summarize
from scheduler.sim.trace import TraceJob
from tests.sim.helpers import T0, job, run, team


def test_percentiles_interpolate_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 90) == 0.0
    assert percentile(list(range(101)), 99) == 99


def test_jain_is_one_for_equal_ratios_and_one_over_n_for_a_single_winner():
    assert jain([0.8, 0.8, 0.8]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) == 1.0


def test_waterfill_caps_each_team_at_its_demand_and_shares_the_rest_by_weight():
    assert waterfill(10, {"a": 2, "b": 20}, {"a": 1, "b": 1}) == {"a": 2, "b": 8}
    assert waterfill(12, {"a": 20, "b": 20}, {"a": 1, "b": 2}) == {"a": 4, "b": 8}
    shares = waterfill(10, {"a": 3, "b": 3, "c": 0}, {"a": 1, "b": 1, "c": 1})
    assert shares == {"a": 3, "b": 3}  # nothing for a team that demands nothing


def test_fragmentation_counts_free_gpus_in_pieces_smaller_than_a_worker():
    hist = [0] * 9
    hist[1], hist[3], hist[8] = 2, 1, 1  # free: 1, 1, 3, 8
    assert fragmentation_share(hist, 8) == pytest.approx(5 / 13)
    assert fragmentation_share(hist, 2) == pytest.approx(3 / 13)  # 1 + 1 + 1 stranded
    assert fragmentation_share(hist, 1) == 0.0
    assert fragmentation_share([1, 0, 0], 1) is None  # nothing free


def test_a_gang_waiting_on_scattered_free_gpus_shows_as_fragmentation():
    # Two 7-GPU jobs leave one free GPU on each node; an 8-GPU job waits 1000 s.
    jobs = [job(1, "a", duration=1000, gpus=7), job(2, "a", duration=1000, gpus=7)]
    jobs.append(job(3, "a", at=0, duration=10, gpus=8))
    sim, s = run(jobs, nodes=2, policy="fifo", teams=[team("a", 16)])
    assert sim.recs[3].waited == 1000
    assert s["fragmentation"] == 1.0  # both free GPUs are useless to it
    assert s["idle_while_waiting"] == pytest.approx(2 / 16)


def test_a_team_that_gets_what_it_asks_for_has_ratio_one():
    jobs = [job(1, "a", duration=1000, gpus=4), job(2, "b", duration=1000, gpus=4)]
    _, s = run(jobs, nodes=1, teams=[team("a", 4), team("b", 4)])
    assert s["per_team"]["a"]["share_ratio"] == pytest.approx(1.0)
    assert s["jain_fairness"] == pytest.approx(1.0)


def test_heterogeneous_flavors_and_node_shapes_replay_with_every_check_on():
    nodes = [
        NodeSpec("g0", "g2", 8),
        NodeSpec("g1", "g2", 8),
        NodeSpec("t0", "t4", 2),
        NodeSpec("t1", "t4", 2),
    ]
    teams = [
        Team("LS", 1.0, "trace", {"g2": Quota(8), "t4": Quota(2)}),
        Team("BE", 1.0, "trace", {"g2": Quota(8), "t4": Quota(2)}),
    ]
    jobs = []
    for i in range(40):
        flavor = "t4" if i % 3 == 0 else "g2"
        gpus = (1, 2, 4, 8)[i % 4] if flavor == "g2" else 1 + i % 2
        jobs.append(
            TraceJob(i + 1, ("LS", "BE")[i % 2], T0 + 20 * i, 200.0 + 13 * i, 1, gpus, flavor)
        )
    config = SimConfig(policy=PolicyConfig(policy="fairshare", explain=False), check=True)
    sim = Simulator(jobs, nodes, teams, config).run()
    s = summarize(sim, 0.0).summary
    assert s["jobs"] == 40 and s["unfinished"] == 0 and s["gpus"] == 20
    assert 0 < s["utilization"] <= 1
    assert set(sim.rec.capacity) == {"g2", "t4"}


def test_a_team_without_quota_of_its_own_is_left_out_of_jain():
    # b has no nominal quota; it borrows a's idle GPUs for a moment while a waits for nothing
    jobs = [job(1, "a", duration=2000, gpus=8), job(2, "b", duration=100, gpus=8)]
    _, s = run(jobs, nodes=2, teams=[team("a", 16), team("b", 0)])
    assert s["per_team"]["b"]["share_ratio"] is None
    assert s["per_team"]["a"]["share_ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("policy", "grace", "latency"),
    [("fairshare", 30.0, 30.0), ("fairshare", 50.0, 50.0), ("fifo", 30.0, 900.0)],
)
def test_reclaim_latency_runs_from_when_borrowed_gpus_could_host_the_job(policy, grace, latency):
    # b borrows a's idle quota with a second 8-GPU job; at t=100 a submits 8 GPUs within
    # its nominal quota. Fair share reclaims them after one grace period; FIFO never
    # preempts, so a waits for b's job to end at t=1000.
    jobs = [job(1, "b", duration=1000, gpus=8), job(2, "b", duration=1000, gpus=8)]
    jobs += [job(3, "a", at=100, duration=100, gpus=8)]
    # c fits its nominal quota on free GPUs: it never needed a reclaim, so it is not counted.
    jobs += [job(4, "c", at=5000, duration=10, gpus=8)]
    teams = [team("a", 8), team("b", 8), team("c", 8)]
    sim, s = run(jobs, nodes=2, policy=policy, teams=teams, grace_period_s=grace)
    assert sim.recs[3].first_start == T0 + 100 + latency
    assert s["reclaim_jobs"] == 1
    assert s["reclaim_latency_p99_s"] == latency


def test_reclaim_latency_ignores_jobs_above_nominal_and_reports_zero_without_any():
    # a's second job would take it above its nominal quota when submitted: not a reclaim.
    jobs = [job(1, "b", duration=1000, gpus=8), job(2, "a", duration=1000, gpus=8)]
    jobs += [job(3, "a", at=100, duration=100, gpus=8)]
    _, s = run(jobs, nodes=2, teams=[team("a", 8), team("b", 8)])
    assert s["reclaim_jobs"] == 0
    assert s["reclaim_latency_p99_s"] == 0.0


def test_reclaim_latency_stops_while_the_teams_own_jobs_ahead_hold_its_quota():
    # b borrows a's idle quota (two 8-GPU jobs). At t=100 a submits two 8-GPU jobs; each
    # alone fits a's nominal 8 when submitted, but together they do not: job 3 reclaims
    # b's GPUs and starts after one grace period, job 4 waits for job 3, a's own job, to
    # end at t=1130. That wait is not reclaim latency (it counted 1,030 s before).
    jobs = [job(1, "b", duration=5000, gpus=8), job(2, "b", duration=5000, gpus=8)]
    jobs += [job(3, "a", at=100, duration=1000, gpus=8), job(4, "a", at=100, gpus=8)]
    sim, s = run(jobs, nodes=2, teams=[team("a", 8), team("b", 8)])
    assert sim.recs[3].first_start == T0 + 130
    assert sim.recs[4].first_start == T0 + 1130
    assert s["reclaim_jobs"] == 1
    assert s["reclaim_latency_p99_s"] == 30.0


def test_first_estimates_are_compared_with_first_starts():
    # One 8-GPU node. Job 2 waits for job 1 (not preemptible) and is told it starts when
    # job 1 ends (t=1000); job 3, of higher priority in the same queue, arrives later and
    # goes first, so job 2 starts at t=2000, 1000 s late.
    jobs = [job(1, "a", duration=1000, gpus=8, preemptible=False)]
    jobs += [job(2, "a", at=10, duration=1000, gpus=8)]
    jobs += [job(3, "a", at=20, duration=1000, gpus=8, priority=5)]
    sim, s = run(jobs, nodes=1, teams=[team("a", 8)], estimates=True)
    assert sim.recs[2].estimate == T0 + 1000 and sim.recs[2].first_start == T0 + 2000
    assert sim.recs[3].estimate == T0 + 1000 and sim.recs[3].first_start == T0 + 1000
    assert not sim.recs[1].told  # admitted at once: told nothing, not counted
    assert s["estimate_jobs"] == 2 and s["estimate_none"] == 0
    assert s["estimate_late_share"] == 0.5 and s["estimate_early_share"] == 0.0
    assert s["estimate_abs_error_p50_s"] == 500.0 and s["estimate_late_p90_s"] == 900.0


def test_estimates_that_count_declared_run_times_come_out_early():
    jobs = [job(1, "a", duration=1000, gpus=8), job(2, "a", at=10, duration=100, gpus=8)]
    sim, s = run(jobs, nodes=1, teams=[team("a", 8)], estimates=True, runtime_estimate="double")
    assert sim.recs[2].estimate == T0 + 2000 and sim.recs[2].first_start == T0 + 1000
    assert s["estimate_early_share"] == 1.0 and s["estimate_abs_error_p90_s"] == 1000.0


def test_estimates_are_left_out_unless_asked_for():
    _, s = run([job(1, "a", gpus=8), job(2, "a", gpus=8)], nodes=1, teams=[team("a", 8)])
    assert "estimate_jobs" not in s

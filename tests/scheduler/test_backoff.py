"""Requeue backoff: a requeued job is not considered before its eligible_at (reason `backoff`)."""

import pytest

from scheduler import REASONS, requeue_backoff, schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, make_job, reasons, verdict

LATER = NOW + 600  # when the job of each scenario becomes eligible


def waits_on_an_idle_cluster():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=4, restarts=2, eligible_at=LATER)
    return c, {}, {1: "backoff"}, []


def is_eligible_from_its_eligible_at_on():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=4, restarts=2, eligible_at=NOW)
    return c, {}, {}, [1]


def never_fits_outranks_backoff():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.job(1, gpus=16, restarts=1, eligible_at=LATER)
    return c, {}, {1: "never_fits"}, []


def no_nodes_outranks_backoff():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=1, flavor="a100", restarts=1, eligible_at=LATER)
    return c, {}, {1: "no_nodes"}, []


def blocks_nothing_under_strict_fifo():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=8, restarts=1, eligible_at=LATER)  # first in submit order
    c.job(2, gpus=8)
    return c, {"policy": "fifo"}, {1: "backoff"}, [2]


def gets_no_reservation():
    # Eligible, job 1 would reserve n0 for when job 10 ends, and the long job 2 would
    # have to wait (`reserved`); in its backoff, it keeps no GPUs idle.
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.run(10, on={"n0": 4}, started=NOW, runtime=HOUR)
    c.job(1, gpus=8, restarts=1, eligible_at=LATER)
    c.job(2, gpus=4, runtime=10 * HOUR)
    return c, {"policy": "fifo-backfill"}, {1: "backoff"}, [2]


def holds_no_quota():
    # Eligible, job 1 would hold team a's quota until job 10 ends (a quota hold).
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8)
    c.run(10, on={"n0": 4}, started=NOW, runtime=HOUR)
    c.job(1, gpus=8, restarts=1, eligible_at=LATER)
    c.job(2, gpus=4, runtime=10 * HOUR)
    return c, {}, {1: "backoff"}, [2]


def holds_no_cohort_quota():
    # Eligible, job 1 of b must borrow 8 of the cohort's 4 idle GPUs of quota: it would
    # hold the cohort's idle quota until a's jobs end (a cohort hold).
    c = Cluster().nodes_(3)
    c.team("a", nominal=16, cohort="k").team("b", nominal=4, cohort="k")
    c.team("d", nominal=0, cohort="k")
    c.run(10, "a", on={"n0": 8, "n1": 4}, started=NOW, runtime=HOUR)
    c.job(1, "b", workers=2, gpus=6, restarts=1, eligible_at=LATER)
    c.job(2, "d", gpus=4, runtime=10 * HOUR)
    return c, {}, {1: "backoff"}, [2]


def preempts_nothing():
    c = Cluster().node("n0")
    c.team("a", nominal=8, cohort="k").team("b", nominal=0, cohort="k")
    c.run(10, "b", on={"n0": 8})  # b borrows all of a's quota
    c.job(1, "a", gpus=8, restarts=1, eligible_at=LATER)
    return c, {}, {1: "backoff"}, []


def costs_no_candidate_slot():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=1, restarts=1, eligible_at=LATER)
    c.job(2, gpus=1)
    return c, {"max_backfill_candidates": 1}, {1: "backoff"}, [2]


SCENARIOS = [
    waits_on_an_idle_cluster,
    is_eligible_from_its_eligible_at_on,
    never_fits_outranks_backoff,
    no_nodes_outranks_backoff,
    blocks_nothing_under_strict_fifo,
    gets_no_reservation,
    holds_no_quota,
    holds_no_cohort_quota,
    preempts_nothing,
    costs_no_candidate_slot,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_backoff_scenarios(scenario):
    c, config, expect, started = scenario()
    plan = schedule(c.snapshot(**config))
    assert reasons(plan) == expect
    assert admitted(plan) == started
    assert plan.preemptions == ()
    assert plan.stats["reservations"] == 0


@pytest.mark.parametrize(
    "scenario", [gets_no_reservation, holds_no_quota, holds_no_cohort_quota, preempts_nothing]
)
def test_the_same_job_once_eligible_does_hold_others_back(scenario):
    """The counterfactual of the scenarios above: eligible, job 1 reserves, holds or preempts."""
    c, config, _, _ = scenario()
    c.pending = [
        make_job(1, j.team, workers=j.workers, gpus=j.gpus_per_worker) if j.id == 1 else j
        for j in c.pending
    ]
    plan = schedule(c.snapshot(**config))
    assert plan.preemptions or reasons(plan).get(2) == "reserved", plan.verdicts


def test_the_verdict_says_when_and_why_with_position_and_estimate():
    c = Cluster().node("n0")
    c.team("a", nominal=16)
    c.run(10, on={"n0": 8}, started=NOW - 100, runtime=1100)  # n0 is free from NOW + 1000
    c.job(1, gpus=8, restarts=3, eligible_at=LATER)
    c.job(2, gpus=4, runtime=100)
    plan = schedule(c.snapshot())
    one = verdict(plan, 1)
    assert one.reason_code == "backoff" and one.position == 1
    assert one.message == (
        "needs 8 h100 GPUs; backing off after its 3rd requeue (it was preempted or lost its "
        "node): eligible again from 1970-01-12T13:56:40Z, keeping its original submit time"
    )
    # Last in pass order: after job 2 (NOW + 1000 to + 1100), never before it is eligible.
    assert one.estimated_start == NOW + 1100
    two = verdict(plan, 2)
    assert two.reason_code == "no_capacity" and two.position == 2
    assert two.estimated_start == NOW + 1000  # the job in backoff does not delay it


def test_the_estimate_is_never_before_the_job_is_eligible():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=8, restarts=1, eligible_at=LATER)
    assert verdict(schedule(c.snapshot()), 1).estimated_start == LATER


def test_without_explanations_the_verdict_is_the_fixed_summary():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=8, restarts=1, eligible_at=LATER)
    v = verdict(schedule(c.snapshot(explain=False)), 1)
    assert (v.reason_code, v.message, v.position, v.estimated_start) == (
        "backoff",
        REASONS["backoff"],
        1,
        None,
    )


def test_stats_count_the_jobs_backing_off():
    c, config, _, _ = costs_no_candidate_slot()
    stats = schedule(c.snapshot(**config)).stats
    assert (stats["pending"], stats["backing_off"], stats["considered"]) == (2, 1, 2)


@pytest.mark.parametrize(
    ("requeues", "delay"),
    [(0, 0), (1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (10_000, 3600)],
)
def test_the_delay_doubles_per_requeue_up_to_the_max(requeues, delay):
    assert requeue_backoff(requeues) == delay  # Kueue's defaults: base 60 s, max 3600 s
    assert requeue_backoff(requeues, 0.0) == 0.0  # a base of 0 turns it off


def thrash(backoff, hours=10):
    """A lender runs a 1-minute job every 5 minutes on its one GPU; a borrower's 10-hour job
    takes the GPU whenever it is idle and is reclaimed by the lender's next job."""
    c = Cluster().node("n0", gpus=1)
    c.team("lender", nominal=1, cohort="k").team("borrower", nominal=0, cohort="k")
    c.job(1, "borrower", gpus=1, runtime=10 * HOUR, submitted=NOW - 1)
    sim = Sim(c, backoff=backoff)
    waits = []
    for step in range(int(hours * HOUR) // 30):
        now = NOW + 30 * step
        if step % 10 == 0:
            sim.submit(make_job(100 + step, "lender", gpus=1, runtime=60, submitted=now))
        sim.step(now)
    waits = [sim.started[j] - (NOW + 30 * (j - 100)) for j in sim.started if j >= 100]
    return sim, waits


def test_backoff_bounds_reclaim_thrash():
    """Without backoff the borrower is readmitted after every reclaim, 120 times in 10 h.

    With Kueue's defaults it is readmitted after 60, 120, ... 1920 s, then once an
    hour: at most 1 + log2(3600 / 60) + 1 preemptions before the cap, then one per hour.
    The lender's guarantee holds either way: each of its jobs starts within the grace period.
    """
    loop, loop_waits = thrash(backoff=(0.0, 0.0))
    bounded, bounded_waits = thrash(backoff=(60.0, 3600.0))
    assert len(loop.preempted) >= 100
    assert len(bounded.preempted) <= 8 + 10
    assert set(bounded.preempted) == {1}
    assert max(loop_waits) <= 30 and max(bounded_waits) <= 30
    assert len(loop_waits) == len(bounded_waits) == 120  # every lender job ran

"""Preemption (fairshare only): reclaim from borrowers, priority within a queue."""

import pytest

from scheduler import schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, preempted, reasons, verdict


def cohort(*teams, nodes=2):
    """Teams (name, nominal) sharing cohort c on `nodes` 8-GPU nodes."""
    c = Cluster().nodes_(nodes)
    for name, nominal in teams:
        c.team(name, nominal=nominal, cohort="c")
    return c


def reclaim_from_borrower():
    c = cohort(("a", 16), ("b", 0))
    c.run(10, "b", on={"n0": 8})
    c.run(11, "b", on={"n1": 8})
    c.job(1, "a", workers=2, gpus=8)
    return c, {10: "reclaim", 11: "reclaim"}


def reclaim_only_from_teams_above_nominal():
    c = cohort(("a", 8), ("b", 8), ("d", 0))
    c.run(10, "b", on={"n0": 8}, started=NOW - 1)  # newest, but b is within nominal
    c.run(11, "d", on={"n1": 8})  # d borrows a's idle quota
    c.job(1, "a", gpus=8)
    return c, {11: "reclaim"}


def priority_within_queue():
    c = cohort(("a", 16))
    c.run(10, "a", on={"n0": 8}, priority=0)
    c.run(11, "a", on={"n1": 8}, priority=5)
    c.job(1, "a", gpus=8, priority=10)
    return c, {10: "priority"}


def no_priority_preemption_across_queues():
    c = cohort(("a", 16))
    c.run(10, "a", on={"n0": 8}, priority=0, queue="other")
    c.run(11, "a", on={"n1": 8}, priority=0, queue="other")
    c.job(1, "a", gpus=8, priority=10)
    return c, {}


def no_priority_preemption_at_equal_priority():
    c = cohort(("a", 16))
    c.run(10, "a", on={"n0": 8}, priority=10)
    c.run(11, "a", on={"n1": 8}, priority=10)
    c.job(1, "a", gpus=8, priority=10)
    return c, {}


def never_a_non_preemptible_job():
    c = cohort(("a", 16), ("b", 0))
    c.run(10, "b", on={"n0": 8}, preemptible=False)
    c.run(11, "b", on={"n1": 8}, preemptible=False)
    c.job(1, "a", gpus=8)
    return c, {}


def victims_borrowers_first_then_lowest_priority_then_least_work_lost():
    c = cohort(("a", 8), ("b", 16), ("x", 8), nodes=4)
    c.run(10, "x", on={"n3": 8}, priority=-5)  # lowest priority, but x is within its nominal
    c.run(11, "b", on={"n0": 8}, priority=1, started=NOW - 10)
    c.run(
        12,
        "b",
        on={"n1": 8},
        priority=0,
        started=NOW - 5000,
        checkpointed=NOW - 20,
        runtime=2 * HOUR,
    )
    c.run(13, "b", on={"n2": 8}, priority=0, started=NOW - 3000)
    c.job(1, "a", gpus=8)
    # b borrows 8 of a's quota. Among b's jobs: priority 0 first, then the one
    # that loses least work (checkpointed 20 s ago).
    return c, {12: "reclaim"}


def minimal_set_drops_unneeded_victims():
    c = cohort(("a", 8), ("b", 8), nodes=2)
    c.run(10, "b", on={"n0": 4}, started=NOW - 1)  # first in victim order, frees only half a node
    c.run(11, "b", on={"n1": 8}, started=NOW - 2)
    c.run(12, "b", on={"n0": 4}, started=NOW - 3)
    c.job(1, "a", gpus=8)
    return c, {11: "reclaim"}


def preemptor_never_borrows_by_preempting():
    c = cohort(("a", 8), ("b", 0), ("d", 8))
    c.run(10, "b", on={"n0": 8})
    c.run(11, "b", on={"n1": 8})
    c.job(1, "a", workers=2, gpus=8)  # would hold 16 of its 8 nominal
    return c, {}


def one_reclaim_per_nominal():
    c = cohort(("a", 8), ("b", 0), nodes=3)
    c.team("d", nominal=16, cohort="c")
    for i in range(3):
        c.run(10 + i, "b", on={f"n{i}": 8})
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=8)  # the first preemptor's claim already fills a's nominal
    return c, {12: "reclaim"}


SCENARIOS = [
    reclaim_from_borrower,
    reclaim_only_from_teams_above_nominal,
    priority_within_queue,
    no_priority_preemption_across_queues,
    no_priority_preemption_at_equal_priority,
    never_a_non_preemptible_job,
    victims_borrowers_first_then_lowest_priority_then_least_work_lost,
    minimal_set_drops_unneeded_victims,
    preemptor_never_borrows_by_preempting,
    one_reclaim_per_nominal,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_preemption_scenarios(scenario):
    c, expect = scenario()
    plan = schedule(c.snapshot())
    assert {p.job_id: p.reason_code for p in plan.preemptions} == expect
    assert all(p.preemptor_id == 1 for p in plan.preemptions)
    assert 1 not in admitted(plan)  # a preemptor waits for its victims
    if expect:
        assert verdict(plan, 1).reason_code == "waiting_for_preemption"


@pytest.mark.parametrize(
    "config",
    [{"policy": "fairshare", "preemption": False}, {"policy": "fifo-backfill"}, {"policy": "fifo"}],
)
def test_no_preemption_unless_fairshare_with_preemption(config):
    c, _ = reclaim_from_borrower()
    plan = schedule(c.snapshot(**config))
    assert plan.preemptions == ()
    assert reasons(plan) == {1: "cohort_busy"}


def test_stopping_jobs_are_waited_for_not_preempted_again():
    c = cohort(("a", 16), ("b", 0))
    c.run(10, "b", on={"n0": 8}, stopping=True, grace=60)
    c.run(11, "b", on={"n1": 8})
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    v = verdict(plan, 1)
    assert v.reason_code == "waiting_for_preemption"
    assert v.estimated_start == NOW + 60
    assert "stopping jobs (10)" in v.message


def test_a_stopping_job_stops_a_grace_period_after_it_was_told():
    """Told to stop 40 s ago with 60 s of grace, it stops in 20 s: the preemptor's
    estimate says so, not a full grace period from every pass's now, and a job
    overdue to stop is expected any moment (never in the past)."""
    c = cohort(("a", 16), ("b", 0))
    c.run(10, "b", on={"n0": 8}, stopping=True, grace=60, stop_requested=NOW - 40)
    c.run(11, "b", on={"n1": 8})
    c.job(1, "a", gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "waiting_for_preemption"
    assert v.estimated_start == NOW + 20
    v = verdict(schedule(c.snapshot(now=NOW + 100)), 1)
    assert v.estimated_start == NOW + 100


def test_stopping_gpus_count_before_new_victims():
    c = cohort(("a", 16), ("b", 0))
    c.run(10, "b", on={"n0": 8}, stopping=True)
    c.run(11, "b", on={"n1": 8})
    c.job(1, "a", workers=2, gpus=8)  # needs both: 10 is already going, so only 11 is preempted
    plan = schedule(c.snapshot())
    assert preempted(plan) == [11]


def test_messages_name_the_preemptor_and_why():
    c, _ = reclaim_from_borrower()
    plan = schedule(c.snapshot())
    assert "job 1 of team a" in plan.preemptions[0].message
    assert "team b borrows" in plan.preemptions[0].message
    c, _ = priority_within_queue()
    (p,) = schedule(c.snapshot()).preemptions
    assert "job 1" in p.message and "priority 10" in p.message


def test_reclaim_settles_without_a_cycle():
    """a reclaims from b once; afterwards neither team preempts the other again."""
    c = cohort(("a", 8), ("b", 8))
    c.run(10, "b", on={"n0": 8}, runtime=10**6)
    c.run(11, "b", on={"n1": 8}, runtime=10**6)
    c.job(1, "a", gpus=8, runtime=10**6)
    sim = Sim(c)
    for step in range(20):
        sim.step(NOW + 60 * step)
    assert len(sim.preempted) == 1
    assert sim.started.keys() >= {1}
    usage = {t: sum(r.gpus for r in sim.running.values() if r.team == t) for t in "ab"}
    assert usage == {"a": 8, "b": 8}
    assert set(sim.pending) == set(sim.preempted)  # b's victim waits, it does not reclaim back


def test_victim_requeued_keeps_its_place_and_restarts_when_room():
    c, _ = priority_within_queue()
    sim = Sim(c)
    sim.step(NOW)
    assert sim.preempted == [10]
    sim.step(NOW + 31)  # grace period over: the victim is back in the queue
    assert 1 in sim.started and 10 in sim.pending


def test_two_preemptors_in_one_pass_do_not_free_the_same_quota_twice():
    """a and c each reclaim 4 GPUs from b. The second preemptor decides as if the first one's
    victims were gone: counting them too, it preempted 8 jobs for its 4 GPUs."""
    c = cohort(("a", 4), ("c", 4), ("b", 8))
    for i in range(16):  # b borrows all of a's and c's quota, one GPU per job
        c.run(10 + i, "b", on={f"n{i % 2}": 1}, started=NOW - 1000 + i)
    c.job(1, "a", gpus=4)
    c.job(2, "c", gpus=4)
    plan = schedule(c.snapshot())
    by_preemptor = {}
    for p in plan.preemptions:
        by_preemptor.setdefault(p.preemptor_id, []).append(p.job_id)
    assert {k: len(v) for k, v in by_preemptor.items()} == {1: 4, 2: 4}
    assert reasons(plan) == {1: "waiting_for_preemption", 2: "waiting_for_preemption"}

"""Adversarial reclaim and preemption scenarios (issue 13's guarantees, cases the
first tables did not cover): preemptors honoured in an order that differs from
the pass that made them, quota lent beyond the cluster's GPUs, multi-node
victims, heterogeneous nodes, several flavors, three-team cohorts.

Each scenario is a small cluster on the fixed clock; the multi-pass ones apply
every plan (tests.scheduler.helpers.Sim) and let grace periods elapse.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler import Quota, Team, schedule
from tests.scheduler.helpers import (
    FLAVOR,
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    make_job,
    nodes_of,
    preempted,
    reasons,
    verdict,
)
from tests.scheduler.test_reclaim import (
    a_waits_behind_its_borrowing_head,
    check_not_over_committed,
    slack,
)

LONG = 100 * HOUR


def placed(plan, job_id):
    (adm,) = [a for a in plan.admissions if a.job_id == job_id]
    return {w.node for w in adm.placement}


# -- 2. one pass never lends and reclaims the same capacity -----------------------


def test_idle_quota_beyond_the_gpus_is_not_lent_onto_the_gpus_a_team_waits_for():
    """The cohort's quota (a 8, d 16) exceeds its GPUs: n1 runs team x, outside the
    cohort. b borrows d's idle quota; its new 8-GPU job would take n0, the only free
    node, which a's within-nominal job waits for in this pass: lent to b, a would
    reclaim b's older job 10 at once (one job admitted, another preempted, for nothing)."""
    c = a_waits_behind_its_borrowing_head(Cluster().nodes_(3), lender_nominal=16)
    c.team("x", nominal=8)
    c.run(10, "b", on={"n2": 8}, runtime=LONG)
    c.run(11, "x", on={"n1": 8}, runtime=LONG)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    assert admitted(plan) == [2]
    v = verdict(plan, 20)
    assert v.reason_code == "cohort_busy"
    # the free GPUs bind, not the cohort's quota: the sentence says which
    assert "8 of the 8 free GPUs are kept for teams within their nominal quota" in v.message
    assert "cohort c can give it only" not in v.message


def test_no_quota_is_kept_for_a_team_once_its_smallest_waiting_job_would_borrow():
    """a's head job (3x8) would borrow, so b's borrowers come first; a's 1-GPU job 2 and
    8-GPU job 3 both fit a's nominal 8 by size. Once job 2 is admitted, job 3 would
    borrow: nothing is kept for a any more, and b's second borrower (job 5) starts too.
    Before, the smallest size was taken once, when the demand was counted (1 GPU),
    and kept 7 GPUs for a after job 2 had started."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c", decayed={"h100": 512 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("e", nominal=4, cohort="c")
    c.job(1, "a", workers=3, gpus=8, priority=5)
    c.job(2, "a", gpus=1, priority=3)
    c.job(3, "a", gpus=8, priority=1)
    c.job(4, "b", gpus=4, priority=2)
    c.job(5, "b", gpus=4, priority=1)
    plan = schedule(c.snapshot())
    assert sorted(admitted(plan)) == [2, 4, 5]
    assert verdict(plan, 3).reason_code == "cohort_busy"


def test_a_stale_link_does_not_put_a_borrower_first():
    """b's job 1 is named by a pending job of x that it once preempted (the link outlived
    the claim), but b is at its nominal quota: job 1 would borrow, so it has no claim
    and the pass orders it by share, after d's borrowers (d's share is lower)."""
    c = Cluster().nodes_(3)
    c.team("b", nominal=4, cohort="c", decayed={"h100": 200 * HOUR})
    c.team("d", nominal=0, cohort="c")
    c.team("e", nominal=24, cohort="c")
    c.team("x", nominal=8)
    c.run(10, "b", on={"n0": 4}, runtime=LONG)
    c.run(11, "x", on={"n0": 4, "n1": 4}, runtime=LONG, preemptible=False, per_worker=4)
    c.run(12, "x", on={"n2": 4}, runtime=LONG, preemptible=False)
    c.job(1, "b", gpus=4, runtime=LONG, restarts=1)
    c.job(2, "d", gpus=4, runtime=LONG)
    c.job(3, "d", gpus=4, runtime=LONG)
    victim = c.job(20, "x", gpus=4, runtime=LONG)
    c.pending[-1] = replace(victim, preempted_by=1, restart_count=1, eligible_at=NOW + 500)
    plan = schedule(c.snapshot())
    assert sorted(admitted(plan)) == [2, 3]


def four_and_four_free(small_job=False):
    """a's within-nominal 2x8 gang (job 2) waits behind a's head job, which would borrow,
    so b's 4-GPU borrowers come first. The only free GPUs are 4 on n0 and 4 on n1 (x,
    outside the cohort, holds the rest). `small_job`: a also waits with a 1-GPU job."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=16, cohort="c", decayed={"h100": 16 * 7 * 24 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("e", nominal=64, cohort="c")
    c.team("x", nominal=24)
    c.run(10, "x", on={"n0": 4}, preemptible=False, runtime=LONG)
    c.run(11, "x", on={"n1": 4}, preemptible=False, runtime=LONG)
    c.run(12, "x", on={"n2": 8}, preemptible=False, runtime=LONG)
    c.job(1, "a", workers=3, gpus=8, priority=5)
    c.job(2, "a", workers=2, gpus=8, priority=4)
    if small_job:
        c.job(5, "a", gpus=1, priority=0)
    c.job(3, "b", gpus=4)
    c.job(4, "b", gpus=4)
    return c


def test_free_gpus_a_waiting_team_cannot_use_are_not_kept_from_borrowers():
    """The gang cannot be placed on the free GPUs, so they are not kept for it, and b's
    4-GPU jobs start. Keeping them left them idle for as long as x's jobs ran."""
    plan = schedule(four_and_four_free().snapshot())
    assert sorted(admitted(plan)) == [3, 4]


# -- 3. freed GPUs belong to the preemptor, across passes ---------------------------


def two_preemptors_with_different_grace_periods():
    """a's 8-GPU job 1 reclaims job 10 on n0 (4 GPUs, a 60 s grace period) and reserves
    n0's 4 free GPUs; e's 4-GPU job 2, considered after it (e's share is higher) but
    submitted earlier, reclaims job 11 on n1 (10 s grace). n1's other 4 GPUs run a
    non-preemptible job of b."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c")
    c.team("e", nominal=4, cohort="c", decayed={"h100": 4 * 7 * 24 * HOUR})
    c.team("b", nominal=4, cohort="c")
    c.run(10, "b", on={"n0": 4}, grace=60, runtime=LONG)
    c.run(11, "b", on={"n1": 4}, grace=10, runtime=LONG)
    c.run(12, "b", on={"n1": 4}, preemptible=False, runtime=LONG)
    c.job(1, "a", gpus=8, submitted=NOW - 10, runtime=LONG)
    c.job(2, "e", gpus=4, submitted=NOW - 20, runtime=LONG)
    return c


def test_an_earlier_preemptor_does_not_take_the_gpus_reserved_for_a_later_one():
    """Once job 2's victim has stopped, n0's free GPUs stay reserved for job 1 until its
    own victim stops. Before, the next pass honoured job 2 first (it was submitted
    first), best fit put it on n0, and job 1 lost its claim: job 10 was preempted for
    nothing and job 1 waited until b's non-preemptible job ended, days later."""
    sim = Sim(two_preemptors_with_different_grace_periods())
    first = sim.step(NOW)
    assert Counter(p.preemptor_id for p in first.preemptions) == {1: 1, 2: 1}
    second = sim.step(NOW + 10)
    assert placed(second, 2) == {"n1"}  # at once: job 1's charge is not counted twice
    assert verdict(second, 1).reason_code == "waiting_for_preemption"
    third = sim.step(NOW + 60)
    assert placed(third, 1) == {"n0"}
    assert sim.preempted == [10, 11]


def test_a_preemptor_keeps_its_claim_while_its_team_would_borrow_meanwhile():
    """b's high-priority 2x4 gang (job 2) reclaims a's 7-GPU job 102 on n2. While it
    waits for its victim, b's lower-priority jobs 1 and 3 would borrow 3 GPUs: they wait
    (`reserved`, a quota hold of job 2, Pass.claim_wait), so job 2 keeps its claim and
    starts on n2 once 102 has stopped, and they start beside it. Admitted meanwhile (as
    before the hold), they took job 2's claim away: it then fitted b's quota only by
    borrowing, and with idle quota kept for a's requeued job 102 it preempted jobs 1
    and 3 of its own queue (one reclaim, three victims)."""
    c = Cluster()
    for i, gpus in enumerate([8, 4, 8, 4, 4]):
        c.node(f"n{i}", gpus=gpus, block=f"b{i}", rack=f"r{i}")
    c.team("a", nominal=14, cohort="c").team("b", nominal=11, cohort="c")
    c.team("d", nominal=8, cohort="c")
    c.run(100, "a", on={"n0": 8}, runtime=LONG)
    c.run(101, "b", on={"n1": 3}, runtime=LONG, preemptible=False)
    c.run(102, "a", on={"n2": 7}, runtime=LONG, grace=10)
    c.run(103, "a", on={"n3": 2}, runtime=LONG)
    c.run(104, "a", on={"n4": 1}, runtime=LONG)
    c.run(105, "d", on={"n4": 1}, runtime=LONG)
    c.job(1, "b", gpus=1, runtime=LONG)
    c.job(2, "b", workers=2, gpus=4, priority=1, runtime=LONG)
    c.job(3, "b", gpus=2, runtime=LONG)
    sim = Sim(c)
    first = sim.step(NOW)
    assert preempted(first) == [102] and admitted(first) == []
    assert reasons(first) == {2: "waiting_for_preemption", 1: "reserved", 3: "reserved"}
    assert "past its nominal quota while job 2 waits for the jobs it preempted" in (
        verdict(first, 1).message
    )
    second = sim.step(NOW + 30)
    assert sorted(admitted(second)) == [1, 2, 3] and second.preemptions == ()
    assert placed(second, 2) == {"n2"}
    assert sim.preempted == [102]


def test_a_preemptor_keeps_its_target_and_falls_back_when_it_is_gone():
    """A preemptor's plan names its reservation (Plan.reservations), the next pass keeps
    it there (PendingJob.reserved_on) and admits the job on it once its victims have
    stopped; a stored target that no longer describes the gang (a node gone) is
    ignored, and the job is placed by best fit as before."""
    for gone in (False, True):
        c = Cluster().nodes_(2)
        c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
        c.run(10, "b", on={"n0": 8}, runtime=LONG)
        c.run(11, "b", on={"n1": 8}, runtime=LONG, started=NOW - 50)
        c.job(1, "a", gpus=8, runtime=LONG)
        sim = Sim(c)
        first = sim.step(NOW)
        assert preempted(first) == [11]
        assert [(r.job_id, r.nodes) for r in first.reservations] == [(1, (("n1", 8),))]
        assert sim.pending[1].reserved_on == (("n1", 8),)
        if gone:
            sim.pending[1] = replace(sim.pending[1], reserved_on=(("n9", 8),))
        second = sim.step(NOW + 10)  # its victim still stops: reserved again, on n1
        assert [(r.job_id, r.nodes) for r in second.reservations] == [(1, (("n1", 8),))]
        third = sim.step(NOW + 30)
        assert admitted(third) == [1] and placed(third, 1) == {"n1"}
        assert third.reservations == () and third.preemptions == ()


def test_a_job_held_by_its_teams_preemptor_may_still_preempt_by_priority():
    """The hold of a waiting preemptor (Pass.claim_wait) stops a job from taking its team
    past its nominal quota, not from taking the place of lower-priority jobs of its own
    queue: a's priority-2 job 1 reclaims b's borrowed 4 GPUs, and a's priority-1 job 2,
    held by it, preempts a's priority-0 job 10 (try_priority_preempt); both start after
    one grace period, and a is at its nominal quota."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 4}, runtime=LONG)
    c.run(11, "b", on={"n1": 8}, runtime=LONG, preemptible=False)
    c.run(12, "b", on={"n0": 4}, runtime=LONG)
    c.job(1, "a", gpus=4, priority=2, runtime=LONG)
    c.job(2, "a", gpus=4, priority=1, runtime=LONG)
    sim = Sim(c)
    first = sim.step(NOW)
    assert sorted((p.job_id, p.preemptor_id) for p in first.preemptions) == [(10, 2), (12, 1)]
    assert reasons(first) == {1: "waiting_for_preemption", 2: "waiting_for_preemption"}
    second = sim.step(NOW + 30)
    assert sorted(admitted(second)) == [1, 2] and second.preemptions == ()


def test_a_short_job_of_the_team_waits_for_its_preemptor_too():
    """Found by a review: the quota hold of a waiting preemptor (Pass.claim_wait) once
    let through a job of its team that would end before the victims stopped. Passes 10
    s apart, grace 30 s: a's 1-GPU job 2 (25 s) started beside a's preemptor job 1, and
    at the next pass a was over its nominal quota with job 1, which lost its claim;
    d's job 3 took the GPUs job 1's victim freed, and job 1 preempted b's job 101 too:
    two victims for one claim. Now job 2 waits (`reserved`) and job 1 starts on what
    its victim freed."""
    c = Cluster()
    c.node("n1", gpus=8).node("n2", gpus=1)
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(4)}, {}),
        Team("b", 1.0, "c", {"h100": Quota(0)}, {}),
        Team("d", 1.0, "c", {"h100": Quota(9)}, {}),
    ]
    c.run(101, "b", on={"n1": 4}, runtime=LONG)
    c.run(102, "b", on={"n1": 4}, runtime=LONG)
    sim = Sim(c, preemption=True, backfill=True)
    sim.submit(make_job(1, "a", gpus=4, submitted=NOW, runtime=HOUR))
    sim.submit(make_job(2, "a", gpus=1, submitted=NOW + 1, runtime=25, queue="r"))
    by = {}
    for step in range(5):
        if step == 1:
            sim.submit(make_job(3, "d", gpus=4, submitted=NOW + 10, runtime=HOUR))
        plan = sim.step(NOW + 10 * step)
        if step == 0:
            assert reasons(plan)[2] == "reserved"
            assert "while job 1 waits for the jobs it preempted" in verdict(plan, 2).message
        by.update((p.job_id, p.preemptor_id) for p in plan.preemptions)
    assert by == {102: 1, 101: 3}
    assert {1, 2, 3} <= sim.started.keys()


def test_the_teams_short_jobs_wait_for_its_preemptor_even_if_its_victim_stops_early():
    """Found by a review of a withdrawn exemption (docs/scheduling.md, "Known limits"):
    letting a's 10-minute jobs pass the hold of a's preemptor, whose victim has an hour
    of grace, assumed the preemptor starts when the grace period ends. In the portal a
    victim stops when its workers exit, here after 60 s: the short jobs still ran, job
    1 had no claim, b's victim was readmitted on the GPUs it had freed and job 1
    preempted it again. Held, they start after job 1, and job 1 preempts once."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=24, cohort="c")
    c.run(10, "b", on={"n0": 8}, runtime=LONG, grace=3600.0)
    c.run(11, "d", on={"n1": 4}, runtime=LONG)
    c.run(12, "d", on={"n2": 4}, runtime=LONG)  # 8 idle GPUs, in pieces of 4
    sim = Sim(c, preemption=True)
    sim.submit(make_job(1, "a", gpus=8, submitted=NOW, runtime=LONG))
    sim.submit(make_job(2, "a", gpus=4, submitted=NOW + 1, runtime=600, queue="r"))
    sim.submit(make_job(3, "a", gpus=4, submitted=NOW + 2, runtime=600, queue="r"))
    plan = sim.step(NOW)
    assert reasons(plan) == {1: "waiting_for_preemption", 2: "reserved", 3: "reserved"}
    sim.stop_at[10] = NOW + 60  # its workers exit early (a checkpoint, say)
    for t in range(10, 1300, 10):
        sim.step(NOW + t)
    assert sim.preempted == [10] and sim.started[1] == NOW + 60
    assert min(sim.started[2], sim.started[3]) >= NOW + 60


def test_the_claim_hold_does_not_hide_a_quota_reason():
    """Found by a review: a's job 2 cannot fit its team's quota at all (a team outside
    any cohort, at its nominal quota with its priority preemptor); it was told it waits
    for that preemptor (`reserved`, Pass.claim_wait), as if it would start after it."""
    c = Cluster().node("n0", gpus=8).node("n1", gpus=8)
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 8}, priority=0, runtime=LONG)
    c.job(1, "a", gpus=8, priority=1, runtime=10 * HOUR)
    c.job(2, "a", gpus=4, priority=0, runtime=HOUR)
    plan = Sim(c, preemption=True).step(NOW)
    assert [(p.job_id, p.preemptor_id) for p in plan.preemptions] == [(10, 1)]
    assert reasons(plan) == {1: "waiting_for_preemption", 2: "quota"}


# -- 1. guards: multi-node victims, three-team cohorts --------------------------------


def test_a_victim_gang_spanning_two_nodes_is_counted_once_in_quota():
    """b borrows 8 with one 2x4 gang over n0 and n1 and runs 4 more on n1. a's 8-GPU
    job needs n0: stopping the gang frees 4 GPUs on n0 and 4 on n1 and brings b back to
    its nominal 4, so it is the only victim and a starts after one grace period."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=4, cohort="c")
    c.run(10, "b", on={"n0": 4, "n1": 4}, per_worker=4, runtime=LONG)
    c.run(11, "b", on={"n1": 4}, runtime=LONG, started=NOW - 4000)
    c.run(12, "d", on={"n0": 4}, runtime=LONG, preemptible=False)
    c.job(1, "a", gpus=4, runtime=LONG)
    c.job(2, "a", gpus=4, runtime=LONG)
    sim = Sim(c)
    first = sim.step(NOW)
    assert preempted(first) == [10]
    sim.step(NOW + 30)
    assert sim.started.keys() == {1, 2}
    assert sim.preempted == [10]


def test_a_lender_reclaims_quota_borrowed_from_another_lender():
    """b borrowed 8 of the idle quota of a and d. d's job takes it back: b's newest
    borrowed jobs on one node stop, and a, idle, is not affected."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c").team("d", nominal=8, cohort="c")
    c.team("b", nominal=8, cohort="c")
    for i in range(16):
        c.run(100 + i, "b", on={f"n{i % 2}": 1}, started=NOW - 5000 + i, runtime=LONG)
    c.job(1, "d", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()  # n2 is free and d's quota is there: no reclaim
    assert admitted(plan) == [1]
    c.run(50, "a", on={"n2": 8}, runtime=LONG)  # now a uses its own: d must reclaim
    c.pending.clear()
    c.job(1, "d", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    victims = preempted(plan)
    assert len(victims) == 8
    assert len({w.node for r in c.running if r.id in victims for w in r.placement}) == 1
    assert all("team b borrows" in p.message for p in plan.preemptions)
    assert "uses 0 of 8 nominal" in plan.preemptions[0].message


def two_preemptors_whose_victims_stop_together():
    """b's 4-GPU job 1 and 2x4 job 2, both within b's nominal quota, reclaim borrowed
    GPUs of a: job 1 the 4-GPU node n4 of block b2, job 2 the free halves of n2 and
    n3 of block b1 (their other halves run non-preemptible jobs of x)."""
    c = Cluster()
    c.node("n2", gpus=8, block="b1", rack="r1").node("n3", gpus=8, block="b1", rack="r1")
    c.node("n4", gpus=4, block="b2", rack="r2")
    c.team("a", nominal=0, cohort="c")
    c.team("b", nominal=12, cohort="c")
    c.team("x", nominal=8)
    c.run(90, "x", on={"n2": 4}, preemptible=False, runtime=LONG)
    c.run(91, "x", on={"n3": 4}, preemptible=False, runtime=LONG)
    c.run(107, "a", on={"n2": 4}, grace=10, runtime=LONG, started=NOW - 900)
    c.run(108, "a", on={"n3": 4}, grace=10, runtime=LONG, started=NOW - 900)
    c.run(109, "a", on={"n4": 4}, grace=10, runtime=LONG, started=NOW - 300)
    c.job(1, "b", gpus=4, submitted=NOW - 20, runtime=LONG)
    c.job(2, "b", workers=2, gpus=4, submitted=NOW - 10, runtime=LONG)
    return c


def test_preemptors_whose_victims_stopped_together_each_get_the_gpus_freed_for_them():
    """Both preemptors' victims stop before the next pass, so neither has a reservation
    left. Admitted in queue order by best fit, job 1 took a half of n2 and job 2 preempted
    again to fit in one block; admitted largest first, each takes what was freed for it
    and one reclaim costs one victim each."""
    sim = Sim(two_preemptors_whose_victims_stop_together())
    first = sim.step(NOW)
    victims = {p.job_id: p.preemptor_id for p in first.preemptions}
    assert victims == {109: 1, 107: 2, 108: 2}
    second = sim.step(NOW + 30)
    assert second.preemptions == ()
    assert placed(second, 1) == {"n4"}
    assert placed(second, 2) == {"n2", "n3"}


# -- several preemptors at once, random clusters ----------------------------------


@st.composite
def crowded(draw):
    """2-6 nodes of 4 or 8 GPUs in blocks of 1-3, filled with 1- to 8-GPU jobs of three
    teams of one cohort (b's sometimes non-preemptible, grace periods 10 or 30 s,
    some checkpointed), random nominal quotas that are not over-committed, and 1-4
    pending jobs or 2-worker gangs of any of the teams."""
    c = Cluster()
    per_block = draw(st.integers(1, 3))
    for i in range(draw(st.integers(2, 6))):
        b = i // per_block
        c.node(f"n{i}", gpus=draw(st.sampled_from([4, 8, 8])), block=f"b{b}", rack=f"r{b}")
    teams = ["a", "b", "d"]
    ids = iter(range(100, 1000))
    used = Counter()
    for name, node in list(c.nodes.items()):
        left = len(node["free"]) - draw(st.integers(0, 3))
        while left > 0:
            k = min(left, draw(st.sampled_from([1, 2, 4, 8])))
            team = draw(st.sampled_from(teams))
            c.run(
                next(ids),
                team,
                on={name: k},
                started=NOW - draw(st.integers(1, 5000)),
                runtime=LONG,
                preemptible=team != "b" or draw(st.booleans()),
                grace=draw(st.sampled_from([10.0, 30.0])),
                checkpointed=draw(st.none() | st.just(NOW - 30)),
            )
            used[team] += k
            left -= k
    total = sum(n["gpus"] for n in c.nodes.values())
    for t in teams:
        c.team(t, nominal=draw(st.integers(0, total // 2)), cohort="c")
    assume(slack(c.teams, used) >= 0)
    for j in range(draw(st.integers(1, 4))):
        workers = draw(st.integers(1, 2))
        gpus = draw(st.sampled_from([1, 2, 4, 8] if workers == 1 else [4, 8]))
        c.job(
            1 + j,
            draw(st.sampled_from(teams)),
            workers=workers,
            gpus=gpus,
            priority=draw(st.integers(0, 2)),
            runtime=LONG,
        )
    return c


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(crowded())
def test_each_preemptor_is_admitted_after_one_grace_period_and_preempts_once(c):
    """Whatever the preemptors of one pass are and however their victims lie, every
    preemptor that stays within its team's nominal quota is admitted at the next pass
    after its victims' grace periods (<= 30 s) and preempts in one pass only (its freed
    GPUs are its own, no second round of victims); victims are preemptible and not
    already stopping, no job is admitted and preempted by one plan, and no GPU or quota
    is over-committed at any step. (A preemptor whose team no longer fits its nominal
    quota with it has no claim: docs/scheduling.md, "Known limits".)"""
    sim = Sim(c)
    nominal = {t.name: t.quotas["h100"].nominal for t in c.teams}
    jobs = {j.id: j for j in (*c.running, *c.pending)}  # team and GPUs of every job
    passes: dict[int, set[int]] = {}
    within: set[int] = set()  # preemptors within their team's nominal quota
    for step, now in enumerate((NOW, NOW + 30, NOW + 60, NOW + 90)):
        before = dict(sim.running)
        started = set(sim.started)  # a job started, reclaimed later, may preempt anew
        plan = sim.step(now)
        gone = set(preempted(plan))
        used = Counter(r.team for r in before.values() for _ in range(r.gpus) if r.id not in gone)
        used.update(
            jobs[a.job_id].team for a in plan.admissions for w in a.placement for _ in w.gpus
        )
        for p in plan.preemptions:
            assert before[p.job_id].preemptible and not before[p.job_id].stopping
            if p.preemptor_id not in started:
                passes.setdefault(p.preemptor_id, set()).add(step)
            job = jobs[p.preemptor_id]
            if step == 0 and used[job.team] + job.gpus <= nominal[job.team]:
                within.add(job.id)
        assert not set(admitted(plan)) & set(preempted(plan))
        check_not_over_committed(sim)
        if step == 1:
            late = [j for j in within if j not in sim.started]
            assert late == [], f"preemptors {late} not admitted after the grace period"
    assert {j: s for j, s in passes.items() if len(s) > 1 and j in within} == {}


def test_a_whole_node_freed_for_a_1x8_job_is_not_taken_by_a_2x4_gang():
    """d's 1x8 job 2 reclaims n3; b's 2x4 gang job 1 reclaims two jobs on n4, beside its
    3 free GPUs. Both claims have 8 GPUs; once all victims have stopped, the one with
    the bigger workers goes first, so each gets the GPUs freed for it. In queue order,
    best fit put the gang on n3 and job 2 on n4."""
    c = Cluster()
    c.node("n3", gpus=8, block="b1", rack="r1")
    c.node("n4", gpus=8, block="b2", rack="r2").node("n5", gpus=8, block="b2", rack="r2")
    c.team("a", nominal=0, cohort="c").team("b", nominal=13, cohort="c")
    c.team("d", nominal=17, cohort="c")
    c.run(103, "a", on={"n3": 8}, grace=10, runtime=LONG, started=NOW - 1)
    c.run(104, "a", on={"n4": 1}, grace=10, runtime=LONG, started=NOW - 4)
    c.run(105, "a", on={"n4": 4}, grace=10, runtime=LONG, started=NOW - 1)
    c.run(106, "b", on={"n5": 1}, preemptible=False, runtime=LONG)
    c.run(107, "a", on={"n5": 7}, grace=10, runtime=LONG, started=NOW - 1)
    c.job(1, "b", workers=2, gpus=4, runtime=LONG)
    c.job(2, "d", gpus=8, runtime=LONG)
    sim = Sim(c)
    first = sim.step(NOW)
    assert {p.job_id: p.preemptor_id for p in first.preemptions} == {103: 2, 104: 1, 105: 1}
    second = sim.step(NOW + 30)
    assert second.preemptions == ()
    assert placed(second, 2) == {"n3"}
    assert placed(second, 1) == {"n4"}


# -- a preemptor's GPUs are reserved once ---------------------------------------------


def preemptor_beside_free_gpus(gpus):
    """a's 8-GPU job 1 reclaims b's 4-GPU job 10 on n0 (30 s grace) and n0's 4 free GPUs;
    x's job 2 of `gpus` GPUs waits for GPUs; x's job 11 holds n1 for 10 h."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.team("x", nominal=16)
    c.run(10, "b", on={"n0": 4}, grace=30, runtime=LONG)
    c.run(11, "x", on={"n1": 8}, preemptible=False, started=NOW - 600, runtime=10 * HOUR)
    c.job(1, "a", gpus=8, runtime=LONG)
    c.job(2, "x", gpus=gpus, runtime=HOUR)
    return c


def test_the_next_blocked_jobs_reservation_is_not_projected_onto_a_preemptors_gpus():
    """As below, but x's job 2 needs 4 GPUs: the 4 that job 10 frees on n0 are the
    preemptor's from then on, so job 2's reservation is on n1 when job 11 ends, as its
    estimated start says. Before, the projection gave it n0 at the end of job 10's
    grace period ("reserved for it from" 30 s away) while its estimated start was 10 h
    away."""
    c = preemptor_beside_free_gpus(4)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [10]
    ends = NOW - 600 + 10 * HOUR
    w = verdict(plan, 2)
    assert w.estimated_start == ends
    assert "reserved for it from 1970-01-12T23:36:40Z" in w.message
    assert _at(ends) == "1970-01-12T23:36:40Z"


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_preemptor_takes_no_backfill_reservation_from_the_next_blocked_job():
    """a's 8-GPU job 1 reclaims b's 4-GPU job 10 on n0 and the 4 free GPUs beside it, which
    are set aside for it (its target). Its verdict says when it starts (when job 10 has
    stopped) and names no other reservation. x's job 2 waits for GPUs too: the flavor's
    backfill reservation is its (on n1, when x's job 11 ends). Before, job 1 took the
    reservation, projected without the GPUs set aside for it ("reserved for it from" 10 h
    away, its estimated start too), and job 2 had none."""
    c = preemptor_beside_free_gpus(8)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [10]
    v = verdict(plan, 1)
    assert v.reason_code == "waiting_for_preemption"
    assert "reserved for it from" not in v.message
    assert v.estimated_start == NOW + 30
    w = verdict(plan, 2)
    assert "reserved for it from" in w.message
    assert w.estimated_start == NOW - 600 + 10 * HOUR


# -- second review: projections and kept GPUs ------------------------------------------


def test_a_projection_gives_back_only_what_a_reservation_took():
    """Two reservations (x's job 1 on n0 when job 10 ends, then z's 3x8 gang) and a's job 2,
    which reclaims job 10 in between, so n0 is its own from 30 s on. Job 1's reservation
    then takes nothing of n0 in the gang's projection; giving back all it asked for put 16
    free GPUs on an 8-GPU node, and the pass failed with a ValueError."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c", decayed={"h100": 3000 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("x", nominal=64)
    c.team("z", nominal=64, decayed={"h100": 100000 * HOUR})
    c.run(10, "b", on={"n0": 8}, grace=30, started=NOW - 600, runtime=2 * HOUR + 600)
    c.run(11, "x", on={"n1": 8}, preemptible=False, started=NOW - 600, runtime=10 * HOUR)
    c.run(12, "x", on={"n2": 8}, preemptible=False, started=NOW - 600, runtime=200 * HOUR)
    c.job(1, "x", gpus=8, runtime=HOUR)
    c.job(2, "a", gpus=8, runtime=LONG)
    c.job(3, "z", workers=3, gpus=8, runtime=HOUR)
    plan = schedule(c.snapshot(backfill_reservations=2))
    assert preempted(plan) == [10]
    assert verdict(plan, 2).reason_code == "waiting_for_preemption"


def test_a_preemptors_gpus_are_its_own_from_each_victims_stop():
    """a's job 1 reclaims b's jobs 10 (30 s grace) and 11 (600 s) on n0. n0 is the
    preemptor's as each victim stops, so x's 4-GPU job 2 is reserved n1 when x's job 12
    ends, as its estimated start says; before, job 10's GPUs went to it at 30 s."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.team("x", nominal=16)
    c.run(10, "b", on={"n0": 4}, grace=30, runtime=LONG)
    c.run(11, "b", on={"n0": 4}, grace=600, runtime=LONG)
    c.run(12, "x", on={"n1": 8}, preemptible=False, started=NOW - 600, runtime=10 * HOUR)
    c.job(1, "a", gpus=8, runtime=LONG)
    c.job(2, "x", gpus=4, runtime=HOUR)
    plan = schedule(c.snapshot())
    assert sorted(preempted(plan)) == [10, 11]
    ends = NOW - 600 + 10 * HOUR
    w = verdict(plan, 2)
    assert w.estimated_start == ends
    assert f"reserved for it from {_at(ends)}" in w.message


def test_a_small_waiting_job_keeps_only_what_it_can_use():
    """With a's 1-GPU job 5 as well: of the 8 free GPUs a can use 1, so b's first 4-GPU
    borrower starts too. Before, one fitting job made all of a's kept quota count, and 7
    GPUs stayed idle."""
    plan = schedule(four_and_four_free(small_job=True).snapshot())
    assert sorted(admitted(plan)) == [3, 5]


def test_gpus_held_for_a_backfill_reservation_are_not_counted_free_for_a_borrower():
    """x's 2x8 job 1 holds n1's 8 free GPUs for its reservation; n0's 8 are the only ones
    a long job may take, and a's within-nominal job 5 waits for them. b's long borrower
    may not take them: before, the held GPUs counted as free, b's job 3 took n0 and job 5
    reclaimed b's older job 13 in the same pass."""
    c = Cluster()
    c.node("n0", block="b0", rack="r0")
    for n in ("n1", "n2", "n3"):
        c.node(n, block="b1", rack="r1")
    c.team("a", nominal=16, cohort="c", decayed={"h100": 16 * 7 * 24 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("e", nominal=64, cohort="c")
    c.team("x", nominal=24)
    c.run(12, "x", on={"n2": 8}, preemptible=False, started=NOW - 600, runtime=HOUR + 600)
    c.run(13, "b", on={"n3": 8}, runtime=LONG)
    c.job(1, "x", workers=2, gpus=8, runtime=LONG)
    c.job(2, "a", workers=3, gpus=8, priority=5, runtime=LONG)
    c.job(5, "a", gpus=8, priority=1, runtime=LONG)
    c.job(3, "b", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    assert admitted(plan) == [5]


# -- priority preemption behind a cohort hold -----------------------------------------


def test_a_priority_preemptor_is_not_held_back_by_a_borrowers_cohort_hold():
    """a uses its nominal 8 with job 10 (priority 0); b's borrower job 8 is first in line
    and holds the cohort's idle quota from when job 10 ends. a's priority-1 job 12 would
    borrow now, but it preempts job 10 and then stays within a's nominal quota, which
    lends the cohort 7 more GPUs, not fewer. Before, the hold made it `reserved` and it
    waited the whole of job 10's run (2.8 h in a replay, tests/sim/test_preemptors.py)."""
    c = Cluster().node("n0")
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "a", on={"n0": 8}, runtime=LONG)
    c.job(8, "b", gpus=1, runtime=LONG)
    c.job(12, "a", gpus=1, priority=1, runtime=LONG)
    plan = schedule(c.snapshot(explain=True))
    assert [(p.job_id, p.preemptor_id, p.reason_code) for p in plan.preemptions] == [
        (10, 12, "priority")
    ]
    assert verdict(plan, 12).reason_code == "waiting_for_preemption"
    sim = Sim(c)
    sim.step(NOW)
    sim.step(NOW + 30)
    assert sim.started == {12: NOW + 30, 8: NOW + 30}  # 8 borrows what a no longer uses


def test_a_job_that_would_still_borrow_after_its_priority_victims_keeps_the_hold():
    """The same with a's job 12 asking for 12 GPUs of 2 nodes: even with job 10 gone a
    would borrow 4, so the cohort hold of b's job 8 stands and nothing is preempted."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 8}, runtime=LONG)
    c.run(11, "b", on={"n1": 4}, runtime=LONG)
    c.job(8, "b", gpus=8, runtime=LONG)
    c.job(12, "a", workers=2, gpus=6, priority=1, runtime=LONG)
    plan = schedule(c.snapshot(explain=True))
    assert plan.preemptions == ()
    assert verdict(plan, 12).reason_code in ("reserved", "cohort_busy", "quota")


# -- the victims a borrower's quota allows, in the order that frees the most ------------


def test_a_whole_node_is_reclaimed_when_only_the_borrowers_largest_job_last_frees_it():
    """a needs all 8 GPUs of n0, where b (borrowing 4) runs a 2-GPU job and three 1-GPU
    jobs beside 3 free GPUs; n1 is b's non-preemptible job. A victim of another team is
    taken only while that team still borrows: in victim order (the 2-GPU job is the
    newest) b stops borrowing after three victims and n0 has 7 free, so the gang
    waited `cohort_busy` for as long as b's jobs ran. Taken 1, 1, 1 and the 2-GPU job
    last, b borrows before each and n0 is whole (b ends 1 GPU under its nominal 9,
    the overshoot Kueue allows: a job is not divisible)."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=9, cohort="c")
    c.run(10, "b", on={"n1": 8}, preemptible=False, started=NOW - 9000, runtime=LONG)
    for i, k in enumerate((1, 1, 1, 2)):
        c.run(20 + i, "b", on={"n0": k}, started=NOW - 4000 + 100 * i, runtime=LONG)
    c.job(1, "a", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert sorted(preempted(plan)) == [20, 21, 22, 23]
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    for p in plan.preemptions:  # each victim is told what b used before this reclaim
        assert "team b borrows (13 used of 9 nominal)" in p.message, p.message
    sim = Sim(c)
    sim.step(NOW)
    sim.step(NOW + 30)
    assert sim.started == {1: NOW + 30}


def test_idle_quota_a_priority_preemptor_needs_is_not_lent_first():
    """a uses 2 of its nominal 9 with two priority-0 jobs; its priority-1 8-GPU job 7
    fits a's quota only once it preempts them. Its idle 7 were not kept for it (it
    would borrow now), so b's borrower job 8 took 1 of them and job 7 then reclaimed b's
    older job 3 as well: lent and reclaimed in one pass (tests/scheduler/test_runs.py)."""
    c = Cluster().node("n0", gpus=4, block="b0").node("n1", gpus=8, block="b1")
    c.team("a", nominal=9, cohort="c").team("b", nominal=0, cohort="c")
    c.run(3, "b", on={"n0": 1}, started=NOW - 60, runtime=LONG)
    c.run(5, "a", on={"n0": 1}, started=NOW - 30, runtime=LONG)
    c.run(6, "a", on={"n0": 1}, started=NOW - 30, runtime=LONG)
    c.job(7, "a", gpus=8, priority=1, runtime=LONG)
    c.job(8, "b", gpus=1, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == []  # a's idle quota is kept for job 7
    assert verdict(plan, 8).reason_code == "cohort_busy"
    assert {p.preemptor_id for p in plan.preemptions} == {7}
    sim = Sim(c)
    sim.step(NOW)
    sim.step(NOW + 30)
    assert sim.started == {7: NOW + 30}


def test_a_priority_preemptor_keeps_its_claim_while_its_own_victim_stops():
    """a's priority-1 job 40 preempts a's job 13 (a is at its nominal 8). Passes run
    every 30 s, the grace period is 120 s. At the next pass a still counts job 13's
    GPUs, so job 40 looked over its nominal quota: it lost its claim, d's new job took
    job 13's stopping GPUs, and job 40 preempted job 12 too."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=4, cohort="c")
    for i in range(4):
        c.run(10 + i, "a", on={"n0": 2}, runtime=LONG, grace=120.0, started=NOW - 600 + i)
    c.run(20, "b", on={"n1": 8}, runtime=LONG, grace=120.0, preemptible=False)
    c.job(40, "a", gpus=2, priority=1, runtime=LONG)
    sim = Sim(c)
    plans = []
    for step in range(6):
        if step == 1:
            sim.submit(make_job(30, "d", gpus=2, submitted=NOW + 30, runtime=LONG))
        plans.append(sim.step(NOW + 30 * step))
    assert sim.preempted == [13]
    assert sim.started[40] == NOW + 120


def test_a_priority_preemptor_held_back_from_borrowing_picks_victims_that_free_enough():
    """a uses 7 of its nominal 8; its borrowing was reclaimed 10 s ago, so with the
    reclaim backoff on a may not borrow, and a's priority-1 2-GPU job 40 may preempt only if a
    then uses no more. Job 10 (1 GPU) alone makes room and fits the quota but would
    let a use one GPU more: the search stops at what a uses now, so it takes job 11
    (4 GPUs) instead. Before, the fewest victims were chosen, found too few, and job
    40 was told `backoff` (and the failure was remembered for a's 2x2 job 41 too)."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c", reclaims={FLAVOR: (1, NOW - 10)})
    c.team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 1}, started=NOW - 100, runtime=LONG)
    c.run(11, "a", on={"n0": 4}, started=NOW - 1000, runtime=LONG)
    c.run(12, "a", on={"n1": 2}, preemptible=False, runtime=LONG)
    c.job(40, "a", gpus=2, priority=1, runtime=LONG)
    plan = schedule(c.snapshot(reclaim_backoff=True))
    assert [(p.job_id, p.preemptor_id) for p in plan.preemptions] == [(11, 40)]


def test_no_quota_is_kept_for_a_priority_job_that_cannot_fit_even_after_preempting():
    """a uses 3 of its nominal 9 (2 GPUs in priority-0 preemptible jobs). Its waiting
    job 30 (7 GPUs, priority 0) cannot preempt, and job 31 (3x3, priority 1) would need
    10 even after preempting both: neither fits a's quota, so nothing is kept for a and
    b's borrower job 40 starts. A first version paired the smallest job's size with the
    top-priority job's victims and kept 6 GPUs idle for as long as a's jobs waited."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=9, cohort="c").team("b", nominal=7, cohort="c", weight=10.0)
    c.run(10, "a", on={"n0": 1}, runtime=LONG)
    c.run(11, "a", on={"n0": 1}, runtime=LONG)
    c.run(12, "a", on={"n0": 1}, preemptible=False, runtime=LONG)
    c.run(20, "b", on={"n1": 7}, runtime=LONG)
    c.job(30, "a", gpus=7, runtime=LONG)
    c.job(31, "a", workers=3, gpus=3, priority=1, runtime=LONG)
    c.job(40, "b", gpus=1, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [40]


def test_the_second_walk_frees_the_most_a_borrowers_budget_allows():
    """b borrows 3; n0 holds b's three 1-GPU jobs and a 4-GPU job beside 1 free GPU, and
    a's 6-GPU job needs n0. Smallest first, the three 1-GPU jobs use up b's budget and
    the 4-GPU job is no longer allowed (4 free); one 1-GPU job and then the 4-GPU job
    free 6 (found by the second review: `_most_freed` is exact over a node's jobs)."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=6, cohort="c").team("b", nominal=7, cohort="c")
    c.run(10, "b", on={"n1": 3}, preemptible=False, runtime=LONG)
    for i, k in enumerate((1, 1, 1, 4)):
        c.run(20 + i, "b", on={"n0": k}, started=NOW - 4000 + 100 * i, runtime=LONG)
    c.job(1, "a", gpus=6, runtime=LONG)
    plan = schedule(c.snapshot())
    victims = preempted(plan)
    assert 23 in victims and len(victims) == 2, victims
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"


def test_a_team_whose_job_is_stopping_is_not_lent_out_in_the_pass_that_reclaims_for_it():
    """a (nominal 8) has a 2x4 job stopping (cancelled) on n3 and n4, beside x's jobs.
    Counted with it, a was at its nominal quota: ordered among the borrowers and kept
    nothing for, so b's borrower 20 took n2, the only free node, and a's 8-GPU job 1,
    within nominal once job 10 stops but with its GPUs split 4 + 4, reclaimed b's older
    job 11 in the same pass (a review's case). Once its stopping jobs stop, a is within
    nominal (Pass.settled): job 1 goes first, on n2, and nothing is preempted."""
    long = 100 * HOUR
    c = Cluster().nodes_(5)
    c.team("a", nominal=8, cohort="c").team("d", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c").team("x", nominal=8)
    c.run(10, "a", on={"n3": 4, "n4": 4}, per_worker=4, stopping=True, stop_requested=NOW - 5)
    c.run(12, "x", on={"n3": 4}, preemptible=False, runtime=long)
    c.run(13, "x", on={"n4": 4}, preemptible=False, runtime=long)
    c.run(14, "x", on={"n0": 8}, preemptible=False, runtime=long)
    c.run(11, "b", on={"n1": 8}, started=NOW - 3000, runtime=long)
    c.job(1, "a", gpus=8, runtime=long)
    c.job(20, "b", gpus=8, runtime=long)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [1] and nodes_of(plan, 1) == ["n2"]
    assert preempted(plan) == []
    assert verdict(plan, 20).reason_code == "cohort_busy"


def test_a_team_replaced_by_its_own_priority_preemptor_keeps_its_idle_quota():
    """The same through a plain run: a's priority job 1 preempts a's job 10; ten seconds
    later a's job 2 (within nominal beside job 1) and b's borrower 20 arrive, and n2 has
    just come free. Counted with job 10 and job 1's charge, a looked full: 20 took n2 and
    job 2 reclaimed b's job 11 in the same pass. Now job 2 takes n2, and job 1 starts
    when job 10 has stopped; b's job 11 keeps running."""
    long = 100 * HOUR
    c = Cluster().nodes_(4)
    c.team("a", nominal=16, cohort="c").team("d", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c").team("x", nominal=8)
    c.run(10, "a", on={"n0": 8}, runtime=long, started=NOW - 100)
    c.run(13, "a", on={"n2": 8}, runtime=long)  # ends at NOW + 5 (sim.runs)
    c.run(11, "b", on={"n1": 8}, started=NOW - 3000, runtime=long)
    c.run(12, "x", on={"n3": 8}, preemptible=False, runtime=long)
    c.job(1, "a", gpus=8, priority=10, runtime=long)
    sim = Sim(c)
    sim.runs[13] = 605.0  # before its max runtime: no pass counts on it ending
    assert preempted(sim.step(NOW)) == [10]
    sim.submit(make_job(2, "a", gpus=8, runtime=long, submitted=NOW + 6))
    sim.submit(make_job(20, "b", gpus=8, runtime=long, submitted=NOW + 7))
    plan = sim.step(NOW + 10)
    assert admitted(plan) == [2] and preempted(plan) == []
    for t in (40, 70):
        sim.step(NOW + t)
    assert 1 in sim.started and 11 in sim.running and 20 not in sim.started
    assert sim.preempted == [10]


def _beside_a_borrower(with_borrower: bool, gang: bool) -> Cluster:
    """b (nominal 0) borrows with 4-GPU jobs; 4 GPUs are free. a's head job (2x8,
    priority 5) would borrow, so b, of lower share, is considered before a's job 2,
    within a's nominal 8, which fits once b's job 11 stops: an 8-GPU job on n0 beside
    the free 4, or (`gang`) a 2x4 gang on n0 and n2's free 4 in block b0, where x
    (outside the cohort) holds the other half of every node."""
    long = 100 * HOUR
    c = Cluster()
    if gang:
        for n, block in (("n0", "b0"), ("n2", "b0"), ("n1", "b1"), ("n3", "b1")):
            c.node(n, block=block)
    else:
        c.nodes_(2)
    c.team("a", nominal=8, cohort="c", decayed={FLAVOR: 8 * 7 * 24 * HOUR})
    c.team("d", nominal=16, cohort="c").team("b", nominal=0, cohort="c").team("x", nominal=32)
    c.run(11, "b", on={"n0": 4}, runtime=long, started=NOW - 4000)
    c.run(12, "b", on={"n1": 4}, runtime=long, started=NOW - 4000)
    c.run(13, "b", on={"n3" if gang else "n1": 4}, runtime=long, started=NOW - 4000)
    if gang:
        for i, n in enumerate(("n0", "n1", "n2", "n3")):
            c.run(30 + i, "x", on={n: 4}, preemptible=False, runtime=long)
    c.job(1, "a", workers=2, gpus=8, priority=5, runtime=long)
    c.job(2, "a", workers=2 if gang else 1, gpus=4 if gang else 8, runtime=long)
    if with_borrower:
        c.job(20, "b", gpus=4, runtime=long)
    return c


def test_free_gpus_a_reclaiming_job_would_use_are_not_lent_in_that_pass():
    """The free 4 were "not what a's job waits for" (it does not fit them alone): lent to
    b's job 20, and a's job 2 then reclaimed b's jobs 12 and 13 in the same pass, two
    victims where one does (a review's case). They are kept for the pass now."""
    for gang in (False, True):
        assert preempted(schedule(_beside_a_borrower(False, gang).snapshot())) == [11]
        plan = schedule(_beside_a_borrower(True, gang).snapshot())
        assert 20 not in admitted(plan), (gang, admitted(plan), preempted(plan))
        assert preempted(plan) == [11], (gang, preempted(plan))
        assert verdict(plan, 20).reason_code == "cohort_busy"


def test_free_gpus_are_not_kept_for_a_reclaim_the_borrowers_budget_forbids():
    """b (nominal 7) borrows 1 GPU with two 4-GPU jobs beside 4 free GPUs each: a's 2x8
    gang, within nominal, may reclaim one of them only (a team's victims but its largest
    must add up to less than it borrows), so it cannot use the free 8. Counted with all
    of b's jobs, they were kept from e's borrower and sat idle (a review's case)."""
    long = 100 * HOUR

    def cluster(with_e: bool) -> Cluster:
        c = Cluster().nodes_(3)
        c.team("a", nominal=16, cohort="c", decayed={FLAVOR: 8 * 7 * 24 * HOUR})
        c.team("b", nominal=7, cohort="c").team("d", nominal=16, cohort="c")
        c.team("e", nominal=0, cohort="c").team("x", nominal=8)
        c.run(13, "x", on={"n2": 8}, preemptible=False, runtime=long)
        c.run(11, "b", on={"n0": 4}, runtime=long, started=NOW - 4000)
        c.run(12, "b", on={"n1": 4}, runtime=long, started=NOW - 4000)
        c.job(1, "a", workers=3, gpus=8, priority=5, runtime=long)
        c.job(2, "a", workers=2, gpus=8, runtime=long)
        if with_e:
            c.job(20, "e", gpus=4, runtime=long)
        return c

    assert preempted(schedule(cluster(False).snapshot())) == []
    plan = schedule(cluster(True).snapshot())
    assert preempted(plan) == [] and 20 in admitted(plan), verdict(plan, 20).message


def test_a_job_held_by_its_teams_claim_preempts_only_what_its_nominal_quota_needs():
    """a (nominal 14, beside an idle lender) has a priority-2 1x8 job that preempted its
    own 8-GPU job on n0 in the last pass and waits for it (a claim on a's quota); a's
    two priority-0 2-GPU jobs run on n1 beside 4 free GPUs. A priority-1 1x4 job would
    take a to 12 + 4 = 16: one 2-GPU victim brings it to its nominal 14, which the claim
    does not hold. Held by the claim, it was sent to the search for jobs held from
    borrowing, whose quota is what the team uses now, and preempted both (a tester's
    random run: a 4x2 gang took 2 + 2 + 4 GPUs where 2 would do; outside a cohort it
    waits `quota` and took one). Only a job over its nominal quota is held by a claim,
    so its search may use the nominal quota."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0").node("n1", gpus=8, block="b1", rack="r1")
    c.team("a", nominal=14, cohort="c").team("l", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 8}, started=NOW - HOUR, runtime=100 * HOUR, grace=600)
    c.run(11, "a", on={"n1": 2}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(12, "a", on={"n1": 2}, started=NOW - HOUR, runtime=100 * HOUR)
    c.job(1, "a", gpus=8, priority=2, runtime=100 * HOUR)
    sim = Sim(c)
    sim.step(NOW)
    assert sim.preempted == [10]
    sim.submit(make_job(2, "a", gpus=4, priority=1, runtime=100 * HOUR))
    plan = sim.step(NOW + 30)
    assert [(x.job_id, x.preemptor_id) for x in plan.preemptions] in ([(11, 2)], [(12, 2)])


def _beside_a_far_reservation(runtime: float, with_gang: bool = True) -> Cluster:
    """One 8-GPU node: team b's own priority-2 job (4 GPUs, 200 s), three borrowers' 1-GPU
    jobs (grace 300, 120 and 300 s; e's runs 100 h), 1 GPU free. b's 1x8 gang, no room,
    reserves the node from +100 h (when e's job ends) and holds the free GPU; b's 2-GPU
    job of `runtime` reclaims."""
    c = Cluster()
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.team("b", nominal=15, cohort="c")
    for t in ("a", "d", "e"):
        c.team(t, nominal=0, cohort="c")
    c.run(9, "b", on={"n1": 4}, started=NOW - 20, runtime=200, priority=2, grace=120.0)
    c.run(1, "a", on={"n1": 1}, started=NOW - 70, runtime=700, priority=1, grace=300.0)
    c.run(4, "e", on={"n1": 1}, started=NOW - 70, runtime=100 * HOUR, grace=120.0)
    c.run(13, "d", on={"n1": 1}, started=NOW - 30, runtime=600, priority=1, grace=300.0)
    if with_gang:
        c.job(8, "b", workers=1, gpus=8, priority=1, submitted=NOW - 70, runtime=200)
    c.job(15, "b", workers=1, gpus=2, submitted=NOW, runtime=runtime)
    return c


def test_a_short_preemptor_uses_the_free_gpus_a_far_reservation_holds():
    """A preemptor that ends, once the longest grace period of its flavor is over, before
    every backfill reservation starts may use the GPUs they hold, as a job admitted
    without preemption may (Backfill._admit_short): they come back in time. Hidden, a
    2-GPU, 200 s job beside one free GPU held for a gang 100 h away preempted two
    borrowers' jobs where one did (an adversarial tester's random run, 1 in 12,000)."""
    alone = schedule(_beside_a_far_reservation(200, with_gang=False).snapshot())
    plan = schedule(_beside_a_far_reservation(200).snapshot())
    assert len(preempted(alone)) == 1
    assert len(preempted(plan)) == 1, verdict(plan, 15).message
    assert verdict(plan, 15).reason_code == "waiting_for_preemption"
    assert "reserved for it from" in verdict(plan, 8).message  # the gang keeps its reservation


def test_a_preemptor_that_could_outlast_the_reservation_does_not_use_its_gpus():
    """Ending before the reservation only if it started at once is not enough: a preemptor
    starts when its victims have stopped, up to the longest grace period (300 s) later."""
    plan = schedule(_beside_a_far_reservation(100 * HOUR - 100).snapshot())
    assert len(preempted(plan)) == 2, verdict(plan, 15).message


def test_a_preemptor_waiting_for_a_kept_ending_job_does_not_use_the_held_gpus():
    """The bound counts the jobs the pass counts as ending by their end: a kept claim's
    horizon (PendingJob.reserved_until) keeps a job counted as ending past every grace
    period now running. Bound by the 30 s grace alone, a 2-GPU job of 100 h - 100 s
    reserved the gang's held GPUs of n2, waited for that job (+470 s) and the gang,
    reserved from +100 h, started 390 s late (a review's case)."""
    c = Cluster()
    c.node("n1", gpus=8)
    c.node("n2", gpus=8)
    c.team("a", nominal=6, cohort="c")
    c.team("x", nominal=4, cohort="c")
    c.team("y", nominal=24)
    c.run(20, "a", on={"n1": 4}, started=NOW + 470 - 2 * HOUR, runtime=2 * HOUR, grace=30.0)
    c.run(21, "y", on={"n1": 2}, started=NOW - 600, runtime=200 * HOUR, preemptible=False)
    c.run(23, "a", on={"n1": 2}, started=NOW - 600, runtime=300 * HOUR, grace=30.0)
    c.run(22, "y", on={"n2": 6}, started=NOW - 600, runtime=LONG + 600, preemptible=False)
    # x's preemptor keeps a claim on job 20's GPUs, counted as ending by +470 s
    kept = make_job(1, "x", gpus=4, submitted=NOW - 900, runtime=HOUR)
    c.pending.append(
        replace(kept, reserved_on=(("n1", 4),), reserved_until=NOW + 470, reserved_ending=(20,))
    )
    c.job(5, "y", workers=1, gpus=8, submitted=NOW - 800, runtime=HOUR)  # reserves n2
    c.job(7, "a", gpus=2, priority=1, submitted=NOW - 10, runtime=LONG - 100)
    plan = schedule(c.snapshot())
    (mine,) = [r for r in plan.reservations if r.job_id == 7]
    assert [n for n, _ in mine.nodes] == ["n1"], mine
    assert "reserved for it from" in verdict(plan, 5).message


def test_a_short_preemptor_is_searched_for_after_a_long_one_of_its_key_failed():
    """The pass remembers failed searches (Pass.preempt_fails: a later job of the same
    team, queue, priority and shape fails too), but a short job's search sees the GPUs
    held for a far reservation where a long one's did not. b's 2-GPU job of 100 h finds
    one borrower's GPU, too few beside the held free one; b's 200 s job after it may use
    the held GPU and preempts that borrower. Remembered together, the failure of the
    first made the second wait (a review's case, reproduced here)."""

    def cluster(with_long: bool) -> Cluster:
        c = Cluster()
        c.node("n1", gpus=8, block="b0", rack="r0")
        c.team("b", nominal=15, cohort="c").team("a", nominal=0, cohort="c")
        c.team("y", nominal=2)
        c.run(9, "b", on={"n1": 4}, started=NOW - 20, runtime=200, priority=2, grace=120.0)
        c.run(1, "a", on={"n1": 1}, started=NOW - 70, runtime=700, priority=1, grace=300.0)
        c.run(4, "y", on={"n1": 2}, started=NOW - 70, runtime=100 * HOUR, preemptible=False)
        # b's gang reserves n1 from +100 h, when y's job ends, and holds the free GPU
        c.job(8, "b", workers=1, gpus=8, priority=1, submitted=NOW - 70, runtime=200)
        if with_long:
            c.job(14, "b", workers=1, gpus=2, submitted=NOW - 5, runtime=100 * HOUR - 100)
        c.job(15, "b", workers=1, gpus=2, submitted=NOW, runtime=200)
        return c

    alone = schedule(cluster(with_long=False).snapshot())
    plan = schedule(cluster(with_long=True).snapshot())
    assert preempted(alone) == [1]
    assert preempted(plan) == [1], verdict(plan, 15).message
    assert verdict(plan, 15).reason_code == "waiting_for_preemption"
    assert verdict(plan, 14).reason_code == "no_capacity"
    assert "reserved for it from" in verdict(plan, 8).message

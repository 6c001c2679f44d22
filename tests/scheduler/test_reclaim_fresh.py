"""Issue 13's promises, cases a fresh adversarial tester found that the earlier tables
(test_reclaim*.py, test_victim_sets.py, test_runs.py, test_ending_jobs.py) missed: each
failed before its fix (docs/scheduling.md, Preemption rules 3 and 4).
"""

from __future__ import annotations

import pytest

from scheduler import schedule
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    nodes_of,
    preempted,
    reasons,
    verdict,
)

LONG = 100 * HOUR


# -- a preemptor's wait names every stopping job its decision counted on ---------------


def test_a_priority_preemptor_is_told_when_the_quota_it_counts_on_comes_back():
    """Team d (nominal 4, no cohort) has a cancelled 8-GPU job 100 still stopping on n0
    (600 s grace, told to stop now) and a priority-0 4-GPU job 103 on n1 (a 4-GPU
    node). Its priority-1 4-GPU job 1 counts job 100 as gone (rule 2's view) and
    preempts job 103 to fit d's nominal quota; its target is n1, where 103 runs.

    It cannot start before job 100 has stopped (d holds 8 of 4 until then): it starts
    600 s later, and its first verdict names job 100 and says so. Before the fix it
    said "waits for 1 job(s) it preempted (103) to free their GPUs by <now + 30 s>",
    with the team's claim hold dated the same: a preemptor with victims listed only
    them and the stopping jobs on its target's nodes, not those of its team or cohort
    elsewhere whose quota it counted on (`preemption._quota_from`). A random run hit
    the same in a cohort: d's priority preemptor told "+30 s" in the pass where a
    reclaimed d's jobs (120 s of grace), started at +120 s."""
    c = Cluster().node("n0", gpus=8).node("n1", gpus=4)
    c.team("d", nominal=4)
    c.run(100, "d", on={"n0": 8}, runtime=LONG, grace=600.0, stopping=True, stop_requested=NOW)
    c.run(103, "d", on={"n1": 4}, runtime=LONG, grace=30.0)
    c.job(1, "d", gpus=4, priority=1, runtime=LONG)
    sim = Sim(c)
    sim.stop_at[100] = NOW + 600  # the Sim stops only the victims it made itself
    first = sim.step(NOW)
    assert preempted(first) == [103]
    told = verdict(first, 1)
    started = None
    for step in range(1, 25):
        sim.step(NOW + 30 * step)
        if 1 in sim.started:
            started = sim.started[1]
            break
    assert started == NOW + 600
    assert "(100)" in told.message, told.message  # names the stopping job it waits for
    assert told.estimated_start >= NOW + 600, told.estimated_start - NOW


# -- reclaim under fragmentation: a set exists, none is taken --------------------------


def test_a_3x4_gang_reclaims_when_twelve_candidates_hold_a_set():
    """Block b0: n0 (4 GPUs), n2 and n4 (8 each); n1 alone in b1. b (nominal 0) borrows
    12, d (nominal 6) borrows 2, all with small preemptible jobs; x (outside the
    cohort) and one non-preemptible job of d sit beside them. a (nominal 14, using
    none) submits a 3x4 gang. Twelve candidates, so the search is meant to be exact.

    A set exists (found by brute force over all 4,096): b's 17, 18 and d's 19, 20
    clear n2 (two workers), b's 24, 25 free 4 GPUs of n4 beside its free one (the
    third worker), and b's 10 on n0 gives back the last GPU of quota; each team still
    borrows before each of its victims if taken largest last. The exact search
    (`preemption._exact_all`) spends its 1,024 fit checks before it finds one and the
    search per target's greedy orders find none; before `_trimmed`, a was told
    `cohort_busy` and waited for the borrowers' 100-hour jobs. Now it preempts, and
    starts once its victims have stopped."""
    c = Cluster()
    for name, gpus, block in [("n0", 4, "b0"), ("n1", 8, "b1"), ("n2", 8, "b0"), ("n4", 8, "b0")]:
        c.node(name, gpus=gpus, block=block, rack=block)
    c.team("a", nominal=14, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=6, cohort="c").team("x", nominal=2)
    for i, team, node, k, age, pre in [
        (10, "b", "n0", 1, 700, True),
        (11, "x", "n0", 2, 1400, True),
        (12, "d", "n0", 1, 3400, True),
        (13, "b", "n1", 1, 4000, True),
        (15, "b", "n1", 2, 4700, True),
        (17, "b", "n2", 1, 4600, True),
        (18, "b", "n2", 4, 800, True),
        (19, "d", "n2", 1, 1800, True),
        (20, "d", "n2", 2, 2800, True),
        (22, "d", "n4", 2, 2900, False),
        (23, "d", "n4", 1, 100, True),
        (24, "b", "n4", 1, 300, True),
        (25, "b", "n4", 2, 500, True),
        (26, "d", "n4", 1, 1700, True),
    ]:
        c.run(i, team, on={node: k}, started=NOW - age, runtime=LONG, preemptible=pre)
    c.job(1, "a", workers=3, gpus=4, runtime=LONG)
    plan = schedule(c.snapshot())
    assert plan.preemptions, verdict(plan, 1).message
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    assert not {22, 11} & set(preempted(plan))  # non-preemptible, outside the cohort
    sim = Sim(c)
    assert sim.start_of(1, every=30.0, passes=3) == NOW + 30.0


# -- one pass never lends quota and reclaims it ------------------------------------------


def _lent_then_reclaimed() -> Cluster:
    """Cohort c: d (nominal 8, weight 0.1, so it goes after e) runs a 4-GPU job 100 on
    n0 that reaches its max run time in 10 s; e (nominal 8) runs an 8-GPU job 101 on
    n1, exactly its nominal quota; n2's 4 GPUs are free. d submits an 8-GPU job 1
    (within nominal only once job 100 has ended), e a 4-GPU job 2 (it would borrow 4
    of d's idle quota)."""
    c = Cluster().node("n0", gpus=4).node("n1", gpus=8).node("n2", gpus=4)
    c.team("d", nominal=8, cohort="c", weight=0.1).team("e", nominal=8, cohort="c")
    c.run(100, "d", on={"n0": 4}, started=NOW - 590, runtime=600.0)
    c.run(101, "e", on={"n1": 8}, started=NOW - 600, runtime=LONG)
    c.job(1, "d", gpus=8, runtime=LONG)
    c.job(2, "e", gpus=4, runtime=LONG)
    return c


def test_one_pass_does_not_lend_quota_and_reclaim_it_when_the_lender_counts_ending_jobs():
    """ "One pass never lends and reclaims the same quota" (docs/scheduling.md), also
    when the lender's job is within its nominal quota only once its team's jobs that
    reach their max run time first have ended (rule 2).

    Team e uses exactly its nominal 8 when the pass begins: it borrows nothing. e's job
    2 comes first (lower share). Before the fix it borrowed d's idle 4, since
    `Pass.kept_for_others` counted d with its ending job (4 + 8 > 8: nothing kept),
    and then d's job 1, whose rule 1 counts the ending job, found e borrowing and
    reclaimed e's 8-GPU job 101 in the same pass ("team e borrows (12 used of 8
    nominal)", 4 of them lent a moment before): e lost 4,800 GPU-seconds of work to
    swap one job for a smaller one. Now d's idle 4 are kept for job 1."""
    plan = schedule(_lent_then_reclaimed().snapshot())
    assert admitted(plan) == [] and preempted(plan) == []
    assert "kept for teams within their nominal quota" in verdict(plan, 2).message
    sim = Sim(_lent_then_reclaimed())
    for step in range(4):  # nor in the passes after job 100 has ended
        plan = sim.step(NOW + 10.0 * step)
        assert not (admitted(plan) and preempted(plan)), (step, admitted(plan), preempted(plan))


def test_a_preemptor_names_only_the_stopping_jobs_whose_quota_it_needs():
    """Cohort c: a and b, nominal 8 each. a's job 100 (8 GPUs over four nodes) stops with
    10 minutes of grace, b's job 101 with 30 s; a's priority-1 4-GPU job 1 preempts a's
    job 103. What binds is a's own nominal quota (8 used + 4 until job 100 has
    stopped), not the cohort's: job 101 frees b's quota, which a does not need. Its
    wait names 103 and 100 and not 101 (a review's case: soonest end first, 101 was
    listed too)."""
    c = Cluster()
    for n in ["n0", "n3", "n4", "n5", "n1", "n2"]:
        c.node(n, gpus=4)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(
        100, "a", on={"n0": 2, "n3": 2, "n4": 2, "n5": 2}, per_worker=2, runtime=LONG,
        grace=600.0, stopping=True, stop_requested=NOW,
    )  # fmt: skip
    for i, n in enumerate(["n0", "n3", "n4", "n5"]):
        c.run(110 + i, "b", on={n: 2}, runtime=LONG, preemptible=False)
    c.run(101, "b", on={"n2": 2}, runtime=LONG, grace=30.0, stopping=True, stop_requested=NOW)
    c.run(102, "b", on={"n2": 2}, runtime=LONG, preemptible=False)
    c.run(103, "a", on={"n1": 4}, runtime=LONG, grace=30.0)
    c.job(1, "a", gpus=4, priority=1, runtime=LONG)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [103]
    told = verdict(plan, 1)
    assert "(103)" in told.message and "(100)" in told.message and "101" not in told.message
    assert told.estimated_start == NOW + 600.0


@pytest.mark.parametrize("lending_limit", [None, 0, 2])
def test_a_borrower_does_not_take_the_free_gpus_of_a_team_that_lends_none(lending_limit):
    """a (nominal 8) uses 4 and waits with a 4-GPU job; its first job, a 12-GPU gang,
    would borrow, so b's borrowing 2x4 gang comes first in share order and fits the 8
    free GPUs on y's idle quota. With a's lending limit at 0, none of a's idle quota was
    kept for its job (only the lendable part was), so b's gang took the free GPUs and
    a's job reclaimed b's older job 10 in the same pass: lent, then reclaimed."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c", lending_limit=lending_limit)
    c.team("b", nominal=0, cohort="c").team("y", nominal=16, cohort="c")
    c.run(11, "a", on={"n0": 4}, started=NOW - HOUR, runtime=LONG)
    c.run(10, "b", on={"n1": 4}, started=NOW - HOUR, runtime=LONG)
    c.job(1, "b", workers=2, gpus=4)
    c.job(3, "a", workers=3, gpus=4, priority=1)
    c.job(2, "a", gpus=4)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [2]
    assert preempted(plan) == []
    v = verdict(plan, 1)
    assert v.reason_code == "cohort_busy"
    assert "4 of the 8 free GPUs are kept for teams within their nominal quota" in v.message


def test_a_borrower_does_not_take_the_one_node_a_team_within_nominal_can_use():
    """22 GPUs are free but only n0 is whole; a (within its nominal 8, its borrowing 2x8
    gang first in its queue) waits with a 1x8 job. b's borrowing 1x8 job comes first in
    share order: 22 free less the 8 kept for a left it room by count, and it took n0,
    the only node a's job could use; a's job then waited `fragmented`."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c", decayed={"h100": 1e7})
    c.team("b", nominal=0, cohort="c").team("y", nominal=32, cohort="c")
    c.run(10, "b", on={"n1": 1}, started=NOW - HOUR, runtime=LONG)
    c.run(12, "y", on={"n2": 1}, started=NOW - HOUR, runtime=LONG)
    c.job(1, "b", gpus=8)
    c.job(3, "a", workers=2, gpus=8, priority=1)
    c.job(2, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [2]
    assert preempted(plan) == []
    v = verdict(plan, 1)
    assert v.reason_code == "cohort_busy"
    assert "of the 22 free GPUs, the ones it would be placed on are kept for teams" in v.message
    c.pending.pop()  # a waits for nothing it could use: b borrows n0
    assert admitted(schedule(c.snapshot())) == [1]


def test_a_short_borrower_is_asked_where_it_would_go_with_held_gpus_shown():
    """y's 2x8 gang 5 is reserved for 1 h from now on x (16 GPUs, 12 free: 8 of them
    held for it) and z. b's 4-GPU borrower 1 ends before the reservation starts, so it
    is placed as _admit_short places it, with the held GPUs shown: on l (6 free, the
    best fit then), not on x's 4 unheld GPUs (the best fit with them hidden). Asked
    where it would go with them hidden, it was let through, took l, and a's 6-GPU job
    within nominal, which only l held, waited `fragmented`."""
    c = Cluster().node("x", gpus=16).node("z").node("l")
    c.team("a", nominal=8, cohort="c", decayed={"h100": 1e7})
    c.team("b", nominal=0, cohort="c").team("y", nominal=40, cohort="c")
    c.run(10, "y", on={"x": 4}, started=NOW - HOUR, runtime=LONG)
    c.run(11, "y", on={"z": 8}, started=NOW - HOUR, runtime=2 * HOUR)
    c.run(12, "a", on={"l": 2}, started=NOW - HOUR, runtime=LONG)
    c.job(5, "y", workers=2, gpus=8)
    c.job(1, "b", gpus=4, runtime=HOUR / 2)
    c.job(3, "a", workers=2, gpus=8, priority=1)
    c.job(2, "a", gpus=6, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [2], reasons(plan)
    assert nodes_of(plan, 2) == ["l"]
    assert preempted(plan) == []
    assert verdict(plan, 1).reason_code == "cohort_busy"
    c.pending.pop()  # a's job runs on l: b's short job goes on x's held GPUs, harming no one
    c.run(2, "a", on={"l": 6}, started=NOW, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [1]
    assert nodes_of(plan, 1) == ["x"]


# -- the free GPUs a team within nominal could use without victims ----------------------


def test_a_borrower_does_not_take_the_free_gpus_beside_a_teams_ending_job():
    """d's 2x4 gang 2 is within d's nominal 8 once d's job 11, 15 s from its max
    runtime, has ended: on n1, its 4 GPUs and the 4 free beside them. b's borrowing
    1x4 job 1 comes first in share order; the free GPUs were "not what the gang waits
    for" (it fits them only with job 11's), so b took them, and the gang reclaimed b's
    older job 10 in the same pass: lent, then reclaimed (helper-8's case)."""
    c = Cluster().node("n0", gpus=4).node("n1", gpus=8)
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=8, cohort="c", decayed={"h100": 1e7})
    c.run(10, "b", on={"n0": 4}, started=NOW - 600, runtime=LONG)
    c.run(11, "d", on={"n1": 4}, started=NOW - 600, runtime=615)
    c.job(1, "b", gpus=4, runtime=LONG)
    c.job(2, "d", workers=2, gpus=4, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == []
    assert preempted(plan) == []
    assert "4 of the 4 free GPUs are kept for teams" in verdict(plan, 1).message
    assert verdict(plan, 2).reason_code == "no_capacity"
    sim = Sim(c)
    assert sim.start_of(2, every=5.0, passes=10) == NOW + 15
    assert sim.preempted == []


def test_a_borrower_does_not_take_free_gpus_that_a_team_would_otherwise_reclaim_for():
    """b's 2x4 gang 3 (within nominal once b's job 1 ends in 20 s) fits n1's 8 free GPUs
    now. e's borrowing 2x2 job 9, first in share order, would take 4 of them; the gang
    could then still be placed with what it may reclaim (d's borrowing job 6 on n0), so
    e's job counted as leaving it as much as before, was admitted, and the gang
    reclaimed job 6 in the same pass: a preemption the free GPUs made needless."""
    c = Cluster().node("n0", block="b0", rack="r0").node("n1", block="b1", rack="r1")
    c.team("a", nominal=16, cohort="c").team("b", nominal=8, cohort="c")
    c.team("d", nominal=0, cohort="c").team("e", nominal=0, cohort="c")
    c.run(1, "b", on={"n0": 2}, started=NOW - 180, runtime=200, preemptible=False)
    c.run(6, "d", on={"n0": 4}, started=NOW - 30, runtime=LONG, priority=2)
    c.job(9, "e", workers=2, gpus=2, runtime=LONG)
    c.job(3, "b", workers=2, gpus=4, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [3]
    assert nodes_of(plan, 3) == ["n1", "n1"]
    assert preempted(plan) == []
    assert "the ones it would be placed on are kept" in verdict(plan, 9).message


def test_quota_lent_in_a_pass_is_not_reclaimed_in_it():
    """d runs 6 GPUs within its nominal 8; its 1x4 job 17 borrows 2 of a's idle quota
    on n0 (4 GPUs, a block of its own, no use to e's 1x6 job 11 within nominal). The
    admission made d a borrower, and job 11 then reclaimed d's older 6-GPU job 9 in the
    same pass: quota lent, then reclaimed (helper-8's case). Quota this pass lent is not
    reclaimable in it (Pass.borrows); the next pass may reclaim it, as any borrowing."""
    c = Cluster().node("n0", gpus=4, block="b0", rack="r0").node("n1", block="b1", rack="r1")
    c.team("a", nominal=8, cohort="c").team("d", nominal=8, cohort="c")
    c.team("e", nominal=6, cohort="c", decayed={"h100": 1e7})
    c.run(9, "d", on={"n1": 6}, started=NOW - 600, runtime=LONG)
    c.job(17, "d", gpus=4, runtime=LONG)
    c.job(20, "e", gpus=8, priority=1, runtime=LONG)
    c.job(11, "e", gpus=6, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [17]
    assert plan.admissions[0].borrowed == 2
    assert preempted(plan) == []
    assert verdict(plan, 11).reason_code == "no_capacity"


def test_a_job_admitted_beside_its_teams_stopping_victim_is_not_said_to_borrow():
    """b (nominal 16, no cohort): its priority-2 job 23 preempts its priority-0 job 17;
    a pass later, with job 17 still stopping, b's job 20 is admitted. The ledger then
    held job 17's GPUs and job 23's charge for the same place, and the admission was
    said to borrow 4 GPUs ("borrowing 4 GPUs from the cohort" in the portal) in a team
    with no cohort, within its nominal quota (helper-8's case)."""
    c = Cluster().node("n0").node("n1", gpus=4).node("n2", gpus=4)
    c.team("b", nominal=16)
    c.run(17, "b", on={"n0": 4}, priority=0, started=NOW - 600, runtime=LONG)
    c.run(18, "b", on={"n1": 4}, priority=1, started=NOW - 600, runtime=LONG)
    c.job(23, "b", gpus=8, priority=2, runtime=LONG)
    c.job(20, "b", gpus=4, priority=0, runtime=LONG)
    sim = Sim(c)
    assert preempted(sim.step(NOW)) == [17]
    plan = sim.step(NOW + 10)
    assert admitted(plan) == [20]
    assert plan.admissions[0].borrowed == 0


def test_an_ending_borrowers_gpus_are_not_counted_twice_for_a_team_within_nominal():
    """d's 1x8 job 2 is within nominal once d's job 22 ends in 15 s, but no node can
    hold it: n1 has x's non-preemptible job beside e's borrowing job 21, which ends in
    15 s too. Job 21's 4 GPUs were counted as coming free and as reclaimable, n1 looked
    like room for 8, and b's borrower was refused n0's free GPUs (a review's case)."""
    c = Cluster().node("n0", gpus=4).node("n1").node("n2", gpus=4)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=8, cohort="c", decayed={"h100": 1e7}).team("e", nominal=0, cohort="c")
    c.team("x", nominal=4)
    c.run(20, "x", on={"n1": 4}, runtime=LONG, preemptible=False)
    c.run(21, "e", on={"n1": 4}, started=NOW - 600, runtime=615)
    c.run(22, "d", on={"n2": 4}, started=NOW - 600, runtime=615)
    c.job(1, "b", gpus=4, runtime=LONG)
    c.job(2, "d", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [1]
    assert preempted(plan) == []


def test_no_more_gpus_are_said_kept_than_are_free():
    """d's 6-GPU job fits n1 once d's job 11 ends in 15 s: beside a's 2 GPUs, its 4 and
    the 2 free. b's 2-GPU borrower is refused the 2 free GPUs, and was told "4 of the 2
    free GPUs are kept" (the GPUs coming free counted as free; a review's case)."""
    c = Cluster().node("n0", gpus=4).node("n1")
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=8, cohort="c", decayed={"h100": 1e7})
    c.run(10, "b", on={"n0": 4}, started=NOW - 600, runtime=LONG)
    c.run(11, "d", on={"n1": 4}, started=NOW - 600, runtime=615)
    c.run(12, "a", on={"n1": 2}, started=NOW - 600, runtime=LONG, preemptible=False)
    c.job(1, "b", gpus=2, runtime=LONG)
    c.job(2, "d", gpus=6, runtime=LONG)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [] and preempted(plan) == []
    assert "2 of the 2 free GPUs are kept" in verdict(plan, 1).message


def test_no_quota_is_kept_for_a_job_that_counts_its_teams_stopped_victims():
    """a (nominal 8, no borrowing) runs two priority-0 4-GPU jobs; b (nominal 8) uses 7
    and c's 6 are idle. In fair-share order: b's job 3 borrows 2; a's priority-1 2-GPU
    job 1 preempts one of a's own 4-GPU jobs; then b's job 4 asks for 2 more of c's
    idle quota.

    a's 8-GPU job 2 cannot fit a's quota this pass (a settles at 6 of 8, and only its
    other 4-GPU job is left below it), so nothing is kept for it and job 4 borrows.
    Before the fix the pass still counted the stopped victim among the a jobs job 2
    could preempt (`Pass._preemptible_below`, filled when job 3 asked), kept 2 GPUs of
    idle quota for job 2 and told job 4 `cohort_busy` for the pass."""
    c = Cluster().node("n0").node("n1").node("n2")
    c.team("a", nominal=8, cohort="c", borrowing_limit=0)
    c.team("b", nominal=8, cohort="c").team("c", nominal=6, cohort="c")
    c.run(100, "a", on={"n0": 4}, runtime=LONG)
    c.run(101, "a", on={"n0": 4}, runtime=LONG)
    c.run(200, "b", on={"n1": 7}, runtime=LONG)
    c.job(1, "a", gpus=2, priority=1, runtime=LONG)
    c.job(2, "a", gpus=8, priority=1, runtime=LONG)
    c.job(3, "b", gpus=2, runtime=LONG)
    c.job(4, "b", gpus=2, runtime=LONG)
    plan = schedule(c.snapshot())
    assert len(preempted(plan)) == 1 and set(preempted(plan)) <= {100, 101}
    assert admitted(plan) == [3, 4], reasons(plan)
    assert reasons(plan)[2] == "quota"

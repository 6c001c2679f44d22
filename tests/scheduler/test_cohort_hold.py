"""Cohort holds: a gang that must borrow does not starve behind small borrowers.

A team's gang larger than its nominal quota needs several GPUs of idle cohort
quota at once. Without a hold, every GPU a lender frees is borrowed at once by
a smaller job, so the gang waits forever (reason cohort_busy). The first
cohort_busy job of a cohort and flavor holds the cohort's lendable quota from
the time enough borrowed GPUs come back; later borrowers must end by then.
"""

from __future__ import annotations

from itertools import count

from scheduler import schedule
from scheduler.backfill import Backfill
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    make_job,
    preempted,
    reasons,
    verdict,
)


def lender_cluster():
    """16 GPUs; team s borrows all of lender l's idle quota with 1-GPU jobs that end
    one a minute; team b (nominal 4) wants a gang of 8, so it must borrow 4."""
    c = Cluster().nodes_(2)
    c.team("b", nominal=4, cohort="co").team("s", nominal=4, cohort="co")
    c.team("l", nominal=8, cohort="co")
    for i in range(12):  # s holds its 4 nominal GPUs and borrows 8 of l's
        c.run(100 + i, "s", on={f"n{i // 8}": 1}, started=NOW - 600, runtime=600 + 60 * i)
    return c


def test_the_first_cohort_busy_job_holds_the_cohorts_idle_quota():
    c = lender_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "s", workers=1, gpus=1, submitted=NOW - 40, runtime=3600)  # would borrow, too long
    c.job(3, "s", workers=1, gpus=1, submitted=NOW - 30, runtime=60)  # ends before the hold
    plan = schedule(c.snapshot())
    # 4 GPUs are free but b may borrow none of them: s borrows all of l's idle quota
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "reserved"
    assert 3 in [a.job_id for a in plan.admissions]
    # the hold starts when 4 of s's borrowed GPUs will have come back: its 4th job ends
    assert "idle quota from 1970-01-12T13:49:40Z" in verdict(plan, 2).message  # NOW + 180
    assert verdict(plan, 1).estimated_start >= NOW + 180


def test_other_teams_jobs_within_nominal_quota_are_never_held_back():
    c = lender_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "l", workers=1, gpus=2, submitted=NOW - 40, runtime=3600)  # within l's nominal 8
    plan = schedule(c.snapshot())
    assert 2 in [a.job_id for a in plan.admissions]


def run_stream(sim, steps):
    """s submits a one-GPU borrower a minute; return when b's gang starts."""
    ids = count(10_000)
    for n in range(steps):
        now = NOW + n * 60.0
        jid = next(ids)
        sim.submit(make_job(jid, "s", gpus=1, submitted=now, runtime=3600))
        sim.step(now)
        if 1 in sim.started:
            return sim.started[1]
    return None


def test_a_gang_that_must_borrow_starts_despite_a_stream_of_small_borrowers():
    c = lender_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 1)
    started = run_stream(Sim(c, explain=False), steps=120)
    # The quota is there after 180 s; a whole node is free once n0's last job ends.
    assert started == NOW + 420


def test_without_the_hold_the_gang_starves(monkeypatch):
    monkeypatch.setattr(Backfill, "_hold_cohort", lambda self, p, job: None)
    c = lender_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 1)
    assert run_stream(Sim(c, explain=False), steps=120) is None


def own_stream_cluster():
    """16 GPUs; lender l (nominal 12) runs 8 ten-hour jobs within its quota on n1, so
    it can lend 4; team b (nominal 4) runs one 1-GPU job on n0 that ends in 5 min and
    wants a gang of 8: it must borrow 4, all l can lend, once its job has ended."""
    c = Cluster().nodes_(2)
    c.team("b", nominal=4, cohort="co").team("l", nominal=12, cohort="co")
    for i in range(8):
        c.run(100 + i, "l", on={"n1": 1}, started=NOW - 600, runtime=36_000)
    c.run(99, "b", on={"n0": 1}, started=NOW - 600, runtime=900)
    return c


def own_stream(sim, steps, every=60.0):
    """b submits a 1-GPU, 30-minute job every `every` s (each within b's nominal quota
    when b runs little); return when b's gang (job 1) starts, or None."""
    ids = count(10_000)
    for n in range(steps):
        now = NOW + n * every
        sim.submit(make_job(next(ids), "b", gpus=1, submitted=now, runtime=1800))
        sim.step(now)
        if 1 in sim.started:
            return sim.started[1]
    return None


def test_a_gang_that_must_borrow_starts_despite_its_own_teams_later_small_jobs():
    """The team's later jobs within its nominal quota take the quota its earlier gang
    needs: each one it runs is one GPU more the gang would have to borrow. Without the
    hold holding them too, every job b submits after the gang took its quota and the gang
    waited for l's ten-hour jobs; held like the team's later borrowers (and as a GPU
    reservation holds them, Backfill.quota_taken), they wait until the gang has started
    and it starts when job 99 ends."""
    c = own_stream_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 1)
    started = own_stream(Sim(c, explain=False), steps=600)
    assert started == NOW + 300


def test_the_teams_later_jobs_that_end_by_the_hold_still_start():
    c = own_stream_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=3600)  # outlasts the hold
    c.job(3, "b", workers=1, gpus=1, submitted=NOW - 30, runtime=240)  # ends by NOW + 300
    plan = schedule(c.snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "reserved"
    assert 3 in [a.job_id for a in plan.admissions]
    said = verdict(plan, 2).message
    assert "it would take quota that job 1 of team b needs from 1970-01-12T13:51:40Z" in said
    assert "if its max runtime were at most 5 min" in said
    # it starts when b's quota can take it with the gang charged from its start, not then
    assert verdict(plan, 2).estimated_start == NOW + 300 + 3600


def _gang_of_16(l_jobs):
    """b (nominal 8) wants a gang of 16, so must borrow 8 of l's (nominal 8); l runs
    `l_jobs` 1-GPU ten-hour jobs, the first 8 within its quota on n0; b's job 2 (1 GPU,
    ten hours) comes after the gang."""
    c = Cluster().nodes_(2)
    c.team("b", nominal=8, cohort="co").team("l", nominal=8, cohort="co")
    for i in range(l_jobs):
        c.run(100 + i, "l", on={f"n{i // 8}": 1}, started=NOW - 600, runtime=36_000)
    c.job(1, "b", workers=2, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=36_000)
    return c


def test_the_teams_later_jobs_are_not_held_when_the_gang_needs_a_lenders_own_quota():
    """The gang needs l's quota back, l's own jobs within its nominal quota, and l may take
    it again the moment it comes back: holding b's later jobs for it kept b's guaranteed
    quota idle all day (a review's case). They start as before."""
    plan = schedule(_gang_of_16(8).snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert 2 in admitted(plan)


def test_the_teams_later_jobs_still_reclaim_its_quota_lent_out():
    """l borrows all of b's quota (16 jobs on 16 GPUs): b's job 2 may reclaim it, which
    b's gang, having to borrow, may not; it reclaims rather than wait for the gang."""
    plan = schedule(_gang_of_16(16).snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "waiting_for_preemption"
    assert len(preempted(plan)) == 1


def test_the_teams_later_jobs_are_held_when_a_borrower_gives_the_gang_its_quota_back():
    """b (nominal 4) needs 4 of l's quota for its gang of 8; l (nominal 12) runs 8 within it
    and m (nominal 0) borrows 1 GPU of l's idle quota for 5 minutes. m's GPU comes back,
    as borrowed GPUs do while the hold keeps other borrowers out, and b's own job 99 ends
    then: b's later jobs that would outlast that wait for the gang, though m borrows
    (a review's case: a peer borrowing another lender's quota is no lent-out quota of
    b's to reclaim)."""
    c = own_stream_cluster()
    c.team("m", nominal=0, cohort="co")
    c.run(98, "m", on={"n0": 1}, started=NOW - 600, runtime=900)
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=3600)
    plan = schedule(c.snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "reserved"
    assert Sim(c, explain=False).start_of(1, 60.0, 20) == NOW + 300


def _b_and_lender(l_jobs, runtime=40 * HOUR):
    """b (nominal 4) wants a gang of 8 on 2 nodes; lender l (nominal 12) runs `l_jobs`
    1-GPU jobs within its quota on n1."""
    c = Cluster().nodes_(2)
    c.team("b", nominal=4, cohort="co").team("l", nominal=12, cohort="co")
    for i in range(l_jobs):
        c.run(100 + i, "l", on={"n1": 1}, started=NOW - 600, runtime=runtime)
    return c


def test_a_later_job_the_gangs_quota_holds_too_is_not_held():
    """At the hold's start (+5 h) b's two jobs have ended: its gang and job 2 borrow 5
    together, and l lends 5. Held, job 2 waited 5 h for nothing (a review's case)."""
    c = _b_and_lender(7)
    for i in (98, 99):
        c.run(i, "b", on={"n0": 1}, started=NOW - 600, runtime=5 * HOUR + 600)
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=10 * HOUR)
    plan = schedule(c.snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert admitted(plan) == [2]


def test_an_overdue_release_holds_nothing():
    """b's job 99 has been stopping for an hour past its grace period: the hold's time is
    "now" at every pass, so every later job of b was held for as long as it stayed stuck
    (a review's case). A hold at now is no sure time: they start."""
    c = _b_and_lender(8)
    c.run(99, "b", on={"n0": 1}, started=NOW - 7200, stopping=True, stop_requested=NOW - HOUR)
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=HOUR)
    for later in (0, HOUR):
        plan = schedule(c.snapshot(now=NOW + later))
        assert reasons(plan)[1] == "cohort_busy"
        assert admitted(plan) == [2], later


def test_a_held_job_does_not_preempt_its_own_teams_jobs_the_hold_counts_on():
    """b's gang and job 2 have priority 5; b's job 99 (priority 0) ends in 5 min, when the
    gang's quota is there. Held, job 2 preempted job 99 by priority and kept its GPU for
    4 h: one more preemption, and the gang started later (a review's case)."""
    c = _b_and_lender(8, runtime=36_000)
    c.run(99, "b", on={"n0": 1}, started=NOW - 600, runtime=900)
    c.run(98, "b", on={"n0": 1}, started=NOW - 600, runtime=7200)  # ends at +1 h 50
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50, priority=5)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=4 * HOUR, priority=5)
    plan = schedule(c.snapshot())
    assert preempted(plan) == []
    assert reasons(plan)[2] == "reserved"
    sim = Sim(c, explain=False)
    assert sim.start_of(1, 600.0, 30) == NOW + 6600  # when job 98 ends
    assert sim.preempted == []


def test_a_later_job_that_ends_before_the_gangs_gpus_are_free_is_not_held():
    """The gang's quota is there at +5 h, but x (outside the cohort) holds half of n0 and
    n2 for 20 h, so no node has 8 free GPUs before then. Held to the quota's time, b's
    8-hour job waited 5 h for a gang that started after 20 h (a review's case)."""
    plan = schedule(_gang_behind_x(8 * HOUR).snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert admitted(plan) == [2]


def test_a_later_job_that_would_sit_on_the_gangs_gpus_is_held():
    """The reservation property's case (FIFO + backfill): a's 2x8 gang, short of quota
    for one pass, waits under a cohort hold whose quota a's 3-minute job leaves it; but
    placed by best fit the job took the one free GPU of n1, which the gang needs in 2
    min, and the gang started a pass late. It waits now, and the gang starts on time."""
    c = Cluster().nodes_(4)
    c.team("a", nominal=8, cohort="c").team("l", nominal=24, cohort="c")
    c.team("b", nominal=0, cohort="c").team("x", nominal=32)
    for i, team, node, k, ends in (
        (100, "a", "n0", 1, 120), (101, "b", "n0", 2, 180), (102, "a", "n0", 1, 60),
        (103, "a", "n1", 1, 120), (104, "a", "n1", 3, 120), (105, "b", "n1", 1, 120),
        (106, "x", "n2", 5, 60), (107, "b", "n3", 6, 120), (108, "a", "n3", 1, 60),
    ):  # fmt: skip
        c.run(i, team, on={node: k}, started=NOW - HOUR, runtime=HOUR + ends)
    c.job(1, "a", workers=2, gpus=8, submitted=NOW - 500)
    c.job(10, "a", gpus=2, runtime=120, submitted=NOW - 400)
    c.job(11, "b", gpus=1, runtime=180, submitted=NOW - 399)
    c.job(12, "a", gpus=4, runtime=60, submitted=NOW - 398)
    c.job(13, "a", gpus=1, runtime=180, submitted=NOW - 397)
    sim = Sim(c, policy="fifo-backfill")
    assert sim.start_of(1, 60.0, 6) == NOW + 120


def _gang_behind_x(runtime):
    """b (nominal 4) wants a gang of 8 (2 h) and must borrow 4 of l's; its quota is there
    at +5 h when b's job 99 ends, but x (outside the cohort) holds half of n0 and n2 for
    20 h, so no node has 8 free GPUs before +19 h 50 min; b's job 2 (2 GPUs) is
    `runtime` long."""
    c = Cluster().nodes_(3)
    c.team("b", nominal=4, cohort="co").team("l", nominal=12, cohort="co")
    c.team("x", nominal=8)
    for n in ("n0", "n2"):
        c.run(200 + int(n[1]), "x", on={n: 4}, started=NOW - 600, runtime=20 * HOUR)
    for i in range(8):
        c.run(100 + i, "l", on={"n1": 1}, started=NOW - 600, runtime=40 * HOUR)
    c.run(99, "b", on={"n0": 1}, started=NOW - 600, runtime=5 * HOUR + 600)
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50, runtime=2 * HOUR)
    c.job(2, "b", workers=1, gpus=2, submitted=NOW - 40, runtime=runtime)
    return c


def test_a_held_jobs_sentence_and_estimate_are_at_the_gangs_start():
    """Held to the gang's start (+19 h 50 min, when its GPUs are free), a 21-hour job was
    told it could start if it ran at most 5 h (the quota's time), and estimated at +7 h
    where it started after 21 h 50 min (a review's case); a 19-hour job starts now."""
    assert admitted(schedule(_gang_behind_x(19 * HOUR).snapshot())) == [2]
    c = _gang_behind_x(21 * HOUR)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved"
    assert "it could start now if its max runtime were at most 19 h 50 min" in v.message
    assert Sim(c, explain=False).start_of(2, 600.0, 200) == v.estimated_start == NOW + 78600


def test_a_job_within_nominal_that_fits_no_node_reclaims_rather_than_wait():
    """b's job 2 (8 GPUs, within b's nominal 10) fits b's headroom and 15 free GPUs, but
    no node holds 8 of them while m borrows l's 6 on n0: counted by free GPUs it looked
    placeable and was held behind b's gang; placed, it reclaims m's job (a review's case,
    the replays' reclaim latency of 28 min on Dec 11 / 72)."""
    c = Cluster().nodes_(3)
    c.team("b", nominal=10, cohort="c").team("l", nominal=6, cohort="c")
    c.team("m", nominal=0, cohort="c").team("x", nominal=8)
    c.run(100, "m", on={"n0": 6}, started=NOW - 600, runtime=2 * HOUR + 600)
    c.run(101, "b", on={"n1": 1}, started=NOW - 600, runtime=1200)
    c.run(102, "x", on={"n2": 1}, started=NOW - 600, runtime=40 * HOUR)
    c.job(1, "b", workers=2, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=8, submitted=NOW - 40, runtime=4 * HOUR)
    plan = schedule(c.snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "waiting_for_preemption"
    assert preempted(plan) == [100]


def test_a_gpu_reservation_of_a_later_job_does_not_move_the_gangs_start():
    """FIFO + backfill: l's job 11, after a's gang in submit order, gets the flavor's GPU
    reservation; counted in the gang's projection it pushed the gang's start back past
    a's 3-hour job 12, which was let through as ending by then, and the gang started
    after 3 h instead of 20 min (a review's case)."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("l", nominal=12, cohort="c")
    c.team("b", nominal=0, cohort="c").team("x", nominal=8)
    c.run(100, "x", on={"n0": 6}, started=NOW - 600, runtime=1800)
    c.run(101, "b", on={"n1": 7}, started=NOW - 600, runtime=1260)
    c.job(1, "a", workers=2, gpus=8, runtime=2 * HOUR, submitted=NOW - 500)
    c.job(11, "l", gpus=8, runtime=5 * HOUR, submitted=NOW - 400)
    c.job(12, "a", gpus=1, runtime=3 * HOUR, submitted=NOW - 300)
    assert Sim(c, policy="fifo-backfill").start_of(1, 60.0, 40) == NOW + 1200


def test_the_gangs_estimate_is_its_start_when_its_gpus_come_later_than_its_quota():
    """Its quota is back at +5 h, its GPUs at +19 h 50 min: told +5 h beside its team's
    job held to +19 h 50 min (a review's case), it is now estimated at its start."""
    c = _gang_behind_x(21 * HOUR)
    plan = schedule(c.snapshot())
    assert verdict(plan, 2).reason_code == "reserved"
    assert verdict(plan, 1).estimated_start == NOW + 71400
    assert Sim(c, explain=False).start_of(1, 600.0, 200) == NOW + 71400


def test_a_non_preemptible_borrower_gives_the_team_nothing_to_reclaim():
    """As the stream case, with m (nominal 0) borrowing one GPU non-preemptibly: b's job
    2 cannot reclaim it, so b's quota counts as lent out no more than with m's job
    absent, and job 2 (which fits no free GPU on its own node, but waits behind the gang
    either way) is held as when nobody borrows."""
    c = own_stream_cluster()
    c.team("m", nominal=0, cohort="co")
    for i in range(7):  # n0 full: b's job 2 fits no free GPU, so it "may need to reclaim"
        c.run(90 + i, "m", on={"n0": 1}, started=NOW - 600, runtime=900, preemptible=False)
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=1, submitted=NOW - 40, runtime=3600)
    plan = schedule(c.snapshot())
    assert reasons(plan)[1] == "cohort_busy"
    assert reasons(plan)[2] == "reserved"
    assert preempted(plan) == []

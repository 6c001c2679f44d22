"""Preemption rule 2: a running job that reaches its max runtime before any victim could
stop is waited for, not preempted around (issue 13).

A preempted job stops a grace period after it is told; a job whose max runtime ends
sooner frees its GPUs sooner by itself (the portal stops it then: a timeout). So a
preemptor that would need victims counts those jobs' GPUs and quota as coming free
(Running.ending, Stops.end), preempts fewer jobs or none, and reserves the GPUs
they free. Replays: 18% of fair share's preemptions were of this kind
(docs/simulation.md, "Jobs that end by themselves are waited for").
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler import schedule
from scheduler.model import Quota, Team
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
from tests.scheduler.test_runs import scripted

LONG = 100 * HOUR


def ends_in(seconds: float, started: float = NOW - 600) -> dict:
    """Arguments of Cluster.run for a job whose max runtime ends `seconds` from NOW."""
    return {"started": started, "runtime": NOW + seconds - started}


def borrower_cluster(end_in: float, grace: float = 30.0) -> Cluster:
    """b (nominal 8) borrows a's 8: an 8-GPU job on n0 whose max runtime ends in `end_in`
    seconds, eight 1-GPU jobs on n1; a's 1x8 job 1 is within its nominal 8."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 8}, grace=grace, **ends_in(end_in))
    for i in range(8):
        c.run(20 + i, "b", on={"n1": 1}, started=NOW - 900 + i, runtime=LONG, grace=grace)
    c.job(1, "a", gpus=8, runtime=LONG)
    return c


def test_a_reclaim_waits_for_a_borrower_that_reaches_its_max_runtime_first():
    c = borrower_cluster(end_in=10)
    plan = schedule(c.snapshot())
    assert preempted(plan) == []
    v = verdict(plan, 1)
    assert v.reason_code == "waiting_for_preemption"
    assert "waits for 1 job(s) that reach their max run time (10)" in v.message
    assert v.estimated_start == NOW + 10
    assert [(r.job_id, r.nodes) for r in plan.reservations] == [(1, (("n0", 8),))]
    # b's next job, submitted later, does not take n0 when job 10 has ended
    sim = Sim(c)
    sim.step(NOW)
    sim.submit(make_job(2, "b", gpus=8, runtime=LONG, submitted=NOW + 1))
    sim.step(NOW + 5)
    plan = sim.step(NOW + 10)
    assert admitted(plan) == [1] and sim.preempted == []


@pytest.mark.parametrize(
    ("end_in", "grace"),
    [
        (60, 30.0),  # after a victim's grace period: preempting frees GPUs sooner
        (10, 5.0),  # the victims would stop in 5 s
    ],
)
def test_a_job_that_does_not_end_before_a_victim_could_stop_is_preempted_around(end_in, grace):
    c = borrower_cluster(end_in=end_in, grace=grace)
    plan = schedule(c.snapshot())
    assert preempted(plan), plan.verdicts
    assert "max run time" not in verdict(plan, 1).message


def beside_an_ending_job() -> Cluster:
    """n0: b's 4-GPU job 10 ending in 10 s and four long 1-GPU ones; n1: four long 1-GPU
    jobs and an old 4-GPU one of b; a's 1x8 job 1 is within its nominal 8."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 4}, **ends_in(10))
    for i in range(4):
        c.run(20 + i, "b", on={"n0": 1}, started=NOW - 60, runtime=LONG)
    for i in range(4):
        c.run(30 + i, "b", on={"n1": 1}, started=NOW - 50, runtime=LONG)
    c.run(40, "b", on={"n1": 4}, started=NOW - 5000, runtime=LONG)
    c.job(1, "a", gpus=8, runtime=LONG)
    return c


def test_ending_gpus_make_fewer_victims_on_the_same_node():
    """a's 1x8 preempts the four 1-GPU jobs beside the ending one on n0 only and starts
    when they have stopped."""
    c = beside_an_ending_job()
    sim = Sim(c)
    plan = sim.step(NOW)
    assert sorted(preempted(plan)) == [20, 21, 22, 23]
    assert "and 1 job(s) that reach their max run time (10)" in verdict(plan, 1).message
    sim.step(NOW + 10)
    plan = sim.step(NOW + 30)
    assert admitted(plan) == [1] and len(sim.preempted) == 4


def test_a_priority_preemptor_waits_for_its_own_teams_ending_job():
    """a fills its nominal 8: a low-priority 4-GPU job and a 4-GPU job ending in 10 s.
    Its priority job 1 (4 GPUs) waits for the ending one instead of preempting the other,
    and keeps its claim although a is at its nominal until the job has ended."""
    c = Cluster().nodes_(1)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 4}, runtime=LONG, started=NOW - 60)
    c.run(11, "a", on={"n0": 4}, **ends_in(10))
    c.job(1, "a", gpus=4, priority=10, runtime=LONG)
    sim = Sim(c)
    plan = sim.step(NOW)
    assert preempted(plan) == []
    assert "reach their max run time (11)" in verdict(plan, 1).message
    sim.step(NOW + 5)  # its claim holds on the pass in between
    plan = sim.step(NOW + 10)
    assert admitted(plan) == [1] and sim.preempted == []


def test_a_job_that_would_not_preempt_does_not_reserve_ending_gpus():
    """a is at its nominal and nobody borrows: job 1 has no victim to choose, so it is not
    a preemptor and waits for GPUs as before; nothing is reserved for it (a stream of
    such jobs would otherwise jump every backfill reservation)."""
    c = Cluster().nodes_(1)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 8}, **ends_in(10))
    c.job(1, "a", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert reasons(plan) == {1: "no_capacity"}
    assert plan.reservations == ()


def told_and_started(sim, arrivals, every, passes):
    """Run scripted passes; return each preemptor's first estimate and each job's start."""
    told, starts = {}, {}
    for step, plan in scripted(sim, arrivals, every, passes):
        for a in admitted(plan):
            starts.setdefault(a, NOW + step * every)
        for v in plan.verdicts:
            if v.reason_code == "waiting_for_preemption":
                told.setdefault(v.job_id, v.estimated_start)
    return told, starts


def test_a_second_preemptor_does_not_count_ending_gpus_another_one_holds():
    """Found by the random runs (passes every 15 s, victims stop at once). Job 10 reclaims
    b's job 1 and waits for a's job 7, which ends at +120 s, on n0; a pass later the
    higher-priority job 11 reclaimed b's job 4 on n1 yet counted n0's ending GPUs too,
    was admitted first at +120 s onto the GPUs job 10 was promised, and job 10 started a
    pass after its estimate. Now job 11 takes the GPUs its own victim frees."""
    c = Cluster()
    c.node("n0", gpus=4, flavor="h100", block="b0", rack="r0")
    c.node("n1", gpus=8, flavor="h100", block="b1", rack="r1")
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(11)}, {}),
        Team("b", 1.0, "c", {"h100": Quota(0)}, {}),
    ]
    arrivals = [(0, i, "b", 1, g, LONG) for i, g in ((1, 1), (2, 2), (3, 4), (4, 4), (5, 1))]
    arrivals += [(1, 6, "a", 1, 1, 45), (3, 7, "a", 1, 1, 45), (3, 8, "a", 1, 1, 10)]
    arrivals += [(6, 9, "a", 1, 1, 45), (6, 10, "a", 1, 2, 10), (7, 11, "a", 1, 2, 45, "h100", 1)]
    told, starts = told_and_started(Sim(c, early=(0.0,), backfill=False), arrivals, 15.0, 10)
    assert told[10] == NOW + 120
    assert starts[10] <= told[10] and starts[11] <= told[11]


def test_a_reclaim_message_counts_the_teams_ending_job_as_its_decision_did():
    """a's 4-GPU job on n0 ends in 10 s; b borrows 4 with 1-GPU jobs, four of them beside
    it. a's 1x8 job is within its nominal 8 once its own job has ended, so it reclaims
    the four: the message says a uses 0 of 8, not 4 (which with 8 more is over 8)."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "a", on={"n0": 4}, **ends_in(10))
    for i in range(12):
        c.run(20 + i, "b", on={"n0" if i < 4 else "n1": 1}, started=NOW - 60 + i, runtime=LONG)
    c.job(1, "a", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert sorted(preempted(plan)) == [20, 21, 22, 23]
    for p in plan.preemptions:
        assert "needs 8 h100 GPUs and uses 0 of 8 nominal" in p.message, p.message


def test_a_victims_quota_goes_to_its_preemptor_before_a_job_that_waits_for_others():
    """Found by the random runs (passes every 10 s, grace 30 s): a's jobs 15 and 16
    reclaim one 1-GPU job of b each; a's higher-priority job 17 then waits, without a
    victim, for the cohort's quota to come back (b's stopping job 5, a's job 14 ending).
    When 5 has stopped, 17 came first by priority, took the quota 15's victim freed, and
    15 waited past its estimate for job 14 to end. A preemptor with victims now comes
    first (preemption._kept_key)."""
    c = Cluster()
    for i, gpus in enumerate((4, 4, 8)):
        c.node(f"n{i}", gpus=gpus, flavor="h100", block=f"b{i}", rack=f"r{i}")
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(13, None, 5)}, {}),
        Team("b", 1.0, "c", {"h100": Quota(0)}, {}),
    ]
    arrivals = [(0, i, "b", 1, 1, LONG) for i in range(1, 11)]
    arrivals += [(0, 11, "b", 1, 2, LONG), (0, 12, "b", 1, 4, LONG)]
    arrivals += [(1, 14, "a", 2, 4, 45), (1, 15, "a", 1, 1, 15), (2, 16, "a", 1, 1, 15)]
    arrivals += [(3, 17, "a", 1, 1, 15, "h100", 1)]
    told, starts = told_and_started(Sim(c, backfill=False), arrivals, 10.0, 7)
    assert told[15] == NOW + 40 and starts[15] == NOW + 40
    assert all(starts[j] - told[j] < 10 for j in (15, 16, 17)), (told, starts)


def test_an_ending_job_whose_own_grace_is_longer_than_the_victims_is_preempted_around():
    """Timed out at its limit rather than ending, it would stop its grace period later."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 8}, grace=600.0, **ends_in(10))
    for i in range(8):
        c.run(20 + i, "b", on={"n1": 1}, started=NOW - 900 + i, runtime=LONG)
    c.job(1, "a", gpus=8, runtime=LONG)
    plan = schedule(c.snapshot())
    assert preempted(plan) and "max run time" not in verdict(plan, 1).message


class PortalSim(Sim):
    """The portal's timeout: a job that reaches its max runtime keeps running until the
    monitor's sweep (every `sweep` s from NOW) finds it strictly past it
    (stop_overdue_jobs), which stops it with its grace period."""

    sweep = 10.0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.timeout: dict[int, float] = {}

    def _finish(self, now):
        kept = {}
        for r in list(self.running.values()):
            if r.id in self.timeout or (not r.stopping and r.started_at + r.max_runtime <= now):
                del self.running[r.id]
                if r.id in self.timeout and self.timeout[r.id] <= now:
                    for w in r.placement:
                        self.nodes[w.node]["free"].extend(w.gpus)
                    continue
                swept = (now - NOW) % self.sweep == 0
                if r.id not in self.timeout and r.started_at + r.max_runtime < now and swept:
                    r = replace(r, stopping=True, stop_requested_at=now)
                    self.timeout[r.id] = now + r.grace_period
                kept[r.id] = r
        super()._finish(now)
        self.running.update(kept)


@pytest.mark.parametrize("every", [10, 15])
def test_a_job_timed_out_at_its_limit_is_waited_for_until_the_timeout_frees_it(every):
    """Job 10 does not end at its max runtime (+10 s): the sweep at +20 stops it, and it
    frees n0 30 s later. Job 1 keeps waiting for it past its max runtime, preempts
    nothing (before a review: it lost its wait at the first pass after +10 and preempted
    the eight 1-GPU jobs after all) and starts when n0 is free, at most a sweep and a
    grace period later than a preemption at NOW would have let it (the trade rule 2
    makes for the victims' work: docs/scheduling.md)."""
    c = borrower_cluster(end_in=10)
    sim = PortalSim(c)
    for t in range(0, 120, every):
        sim.step(NOW + t)
        if 1 in sim.started:
            break
    assert sim.preempted == []
    assert NOW + 50 <= sim.started[1] <= NOW + 10 + PortalSim.sweep + 30 + every


def test_a_job_past_its_max_runtime_is_never_a_victim():
    """The same as test_ending_gpus_make_fewer_victims_on_the_same_node under the portal's
    timeout, passes every 15 s: at +15 job 10 runs past its max runtime, not yet swept.
    It was then preempted for the same preemptor (two rounds of victims, and a job that
    should time out requeued instead)."""
    c = beside_an_ending_job()
    sim = PortalSim(c)
    for t in range(0, 120, 15):
        sim.step(NOW + t)
        if 1 in sim.started:
            break
    assert sorted(sim.preempted) == [20, 21, 22, 23]
    assert 1 in sim.started and 10 not in sim.pending


def test_a_priority_preemptor_needing_a_victim_and_an_ending_own_job_takes_both():
    """a fills its nominal 8 with a low-priority 4-GPU job and one ending in 10 s; b
    waits behind a cohort hold. a's priority 8-GPU job preempts the low-priority one,
    waits for the ending one, and starts when the victim has stopped (it preempted
    nothing and was told 100 h: a review)."""
    c = Cluster().node("n0")
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "a", on={"n0": 4}, runtime=LONG, started=NOW - 60)
    c.run(11, "a", on={"n0": 4}, **ends_in(10))
    c.job(8, "b", gpus=1, runtime=LONG)
    c.job(12, "a", gpus=8, priority=1, runtime=LONG)
    sim = Sim(c)
    plan = sim.step(NOW)
    assert preempted(plan) == [10]
    assert verdict(plan, 12).estimated_start == NOW + 30
    for t in (10, 20, 30):
        sim.step(NOW + t)
    assert sim.started[12] == NOW + 30


def test_an_ending_job_on_a_cordoned_node_gives_its_quota_back():
    """n2 is cordoned: b's 8-GPU job 10 there ends in 10 s. a's job 1 needs its quota (the
    free GPUs are n1's), not its GPUs: it waits for it, as for a stopping job there (it
    preempted the eight 1-GPU jobs on n0 and named job 10 as well: a review)."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n2": 8}, **ends_in(10))
    for i in range(8):
        c.run(20 + i, "b", on={"n0": 1}, started=NOW - 900 + i, runtime=LONG)
    c.job(1, "a", gpus=8, runtime=LONG)
    del c.nodes["n2"]
    plan = schedule(c.snapshot())
    assert preempted(plan) == []
    assert "waits for 1 job(s) that reach their max run time (10)" in verdict(plan, 1).message


def test_a_preemptor_keeps_counting_an_ending_job_once_its_victim_is_stopping():
    """a's 8-GPU job needs n0: it preempts b's job 10 (grace 30 s) and counts b's
    non-preemptible job 11, which ends at +20 s. At +10 s job 10 was stopping, the only
    preemptible job, and the horizon (the shortest grace of the flavor's preemptible
    jobs) was taken from running jobs not stopping: there was none, so job 11 was no
    longer ending. The preemptor lost its claim and was told `cohort_busy`: "non-
    preemptible jobs ... free up ... at the latest" a minute after job 11's end."""
    c = Cluster().node("n0")
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 4}, grace=30, started=NOW - 60, runtime=10 * HOUR)
    c.run(11, "b", on={"n0": 4}, grace=0, started=NOW - HOUR + 20, preemptible=False)
    c.job(1, "a", gpus=8)
    sim = Sim(c)
    assert preempted(sim.step(NOW)) == [10]
    for t in (10, 20):
        v = verdict(sim.step(NOW + t), 1)
        assert v.reason_code == "waiting_for_preemption", (t, v.message)
        assert v.estimated_start == NOW + 30
    assert admitted(sim.step(NOW + 30)) == [1]


def test_a_claim_still_waiting_for_an_ending_job_keeps_its_freed_gpus_once_its_victims_stop():
    """The random-runs property's case: d's 2x2 job reclaims n0 from a's three 1-GPU jobs,
    counting b's non-preemptible 1-GPU job there, which ends 30 s later, as ending
    (rule 2). Its victims stop at once (workers exiting early); at the next pass b's job
    still runs, and with no preemptible job left in the flavor nothing counted as ending
    any more: the preemptor lost its claim (told `cohort_busy`), a's requeued jobs took
    the GPUs their stop had freed for it, and it preempted them a second time when b's
    job ended. A requeued victim's grace period is still the horizon its preemptor
    decided with (state.mark_ending), so the claim holds until b's job ends."""
    c = Cluster()
    c.node("n0", gpus=4, block="b0", rack="r0").node("n1", gpus=4, block="b1", rack="r1")
    c.team("a", nominal=0, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=4, cohort="c")
    sim = Sim(c, early=(0.0,), preemption=True, backfill=False, explain=False)
    arrivals = [(0, i, "a", 1, 1, LONG) for i in (1, 2, 3, 4)] + [(1, 7, "d", 2, 2, 15)]
    sim.submit(make_job(6, "b", gpus=1, submitted=NOW - 1, runtime=45, preemptible=False))
    rounds = [step for step, plan in scripted(sim, arrivals, 15, 6) if preempted(plan)]
    assert rounds == [1], rounds
    assert sim.started[7] == NOW + 45  # when b's job ended


def _stale_link(with_requeued_victim: bool) -> Cluster:
    c = Cluster()
    for n in ("n0", "n1", "n2"):
        c.node(n, gpus=8)
    c.team("a", nominal=8, cohort="c").team("e", nominal=8, cohort="c")
    c.team("b", nominal=0, cohort="c").team("d", nominal=8, cohort="c")
    # team e's non-preemptible job ends by itself in 10 minutes
    c.run(10, "e", on={"n0": 8}, started=NOW - HOUR, runtime=HOUR + 600, preemptible=False)
    # borrower b's preemptible job, with a one-hour grace period (the only candidate)
    c.run(11, "b", on={"n1": 8}, started=NOW - HOUR, runtime=100 * HOUR, grace=HOUR)
    # team a uses its nominal quota: its preemptor 1 is pending with no claim (over its quota)
    c.run(12, "a", on={"n2": 8}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    c.job(1, "a", workers=1, gpus=8, submitted=NOW - 2 * HOUR, runtime=100 * HOUR)
    if with_requeued_victim:
        # job 1's victim of an earlier pass, requeued (grace 30 s), still linked to it
        v = make_job(20, "a", workers=1, gpus=1, submitted=NOW - 3 * HOUR, restarts=1,
                     eligible_at=NOW - 600, runtime=100 * HOUR)  # fmt: skip
        c.pending.append(replace(v, preempted_by=1, grace_period=30.0))
    # team d, within its nominal quota, wants a whole node
    c.job(2, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    return c


def test_without_the_link_the_preemptor_waits_for_the_ending_job():
    plan = schedule(_stale_link(False).snapshot(preemption=True))
    assert preempted(plan) == []
    assert reasons(plan)[2] == "waiting_for_preemption"


def test_a_stale_requeued_victim_does_not_shrink_the_horizon():
    """Review of f12673a (state.mark_ending counts requeued victims' grace periods).

    A requeued victim whose preemptor is still pending now counts towards its flavor's
    horizon g (docs/scheduling.md, rule 2). g is a minimum, so a victim requeued with a short
    grace period *shrinks* the horizon for every other preemptor of the flavor, for as long
    as its preemptor stays pending -- also when that preemptor has no claim any more (its
    link is only cleared when it is admitted: portal/core/scheduling/apply.py).

    Rule 2 (docs/scheduling.md, scheduler/preemption.py module docstring): a job that
    needs victims counts "the running jobs that reach their max runtime before any victim
    could stop": it waits for them and preempts fewer jobs or none. Here the only possible
    victim has a one-hour grace period, and a non-preemptible job ends in 10 minutes, so the
    new preemptor should wait for that job (as it does without the stale link). With the
    requeued victim of an unrelated, claimless preemptor in the queue, g drops to 30 s, the
    ending job no longer counts, and the preemptor preempts the borrower's job (lost work,
    and it now waits up to an hour for that victim instead of 10 minutes).
    """
    plan = schedule(_stale_link(True).snapshot(preemption=True))
    assert reasons(plan)[1] != "waiting_for_preemption"  # the linked preemptor has no claim
    assert preempted(plan) == [], "job 11 (1 h grace) preempted though job 10 ends in 10 min"


def _shorter_grace_beside() -> Cluster:
    """a's 1x8 job cannot be placed now; on n3 a's non-preemptible 1-GPU job reaches its
    max runtime at +270 s, within the flavor's shortest grace period (600 s, borrower
    d's 2-GPU job on n1), so the 1x8 job reserves n3 and waits for it without victims.
    a's 1x4 job, with a 30 s grace period, starts on n2 in the same pass (a tester's
    random run)."""
    c = Cluster()
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=4, block="b2", rack="r2")
    c.node("n3", gpus=8, block="b1", rack="r1")
    c.team("a", nominal=16, cohort="c").team("d", nominal=0, cohort="c")
    c.run(10, "d", on={"n1": 2}, grace=600.0, runtime=100 * HOUR)
    c.run(20, "a", on={"n3": 1}, preemptible=False, started=NOW - 30, runtime=300.0)
    c.job(1, "a", gpus=8, priority=1, submitted=NOW - 20)
    c.job(2, "a", gpus=4, priority=0, submitted=NOW - 10)
    return c


def test_a_wait_for_an_ending_job_is_told_its_end():
    plan = schedule(_shorter_grace_beside().snapshot())
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    assert verdict(plan, 1).estimated_start == NOW + 270
    assert admitted(plan) == [2] and not plan.preemptions


def test_a_wait_for_an_ending_job_outlasts_a_shorter_grace_starting_beside_it():
    """At the next pass the flavor's shortest grace is the 1x4 job's 30 s. Asked anew
    from the jobs running then, the job ending at +270 no longer counted as ending, the
    kept target no longer held the 1x8 job, and it reclaimed d's job (600 s of grace):
    it started at +630 instead of +270, and d's job lost its work for nothing. The
    claim keeps the horizon it decided with (Reservation.until, state.mark_ending)."""
    sim = Sim(_shorter_grace_beside(), preemption=True)
    start = sim.start_of(1, every=30.0, passes=30)
    assert sim.preempted == [] and start is not None and start <= NOW + 300


def test_a_claim_on_an_ending_job_stores_the_horizon_it_decided_with():
    """Its reservation carries now + the flavor's shortest grace then (d's 600 s)."""
    plan = schedule(_shorter_grace_beside().snapshot())
    [held] = plan.reservations
    assert (held.job_id, held.nodes, held.until, held.ending) == (1, (("n3", 8),), NOW + 600, (20,))


def test_a_claim_on_its_victims_alone_stores_no_horizon():
    c = Cluster().node("n1").team("a", nominal=8, cohort="c").team("d", cohort="c")
    c.run(10, "d", on={"n1": 8}, runtime=LONG)
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [10]
    assert [(r.job_id, r.until, r.ending) for r in plan.reservations] == [(1, None, ())]


def _the_second_pass(now: float = NOW + 30, grace: float = 30.0, **stored) -> object:
    """A pass after the first of _shorter_grace_beside: a's 1x4 job (30 s of grace) runs
    on n2, and the 1x8 job waits with its stored target on n3 (and `stored`); a's
    non-preemptible job ending at +270 has `grace`."""
    c = _shorter_grace_beside()
    c.pending = [j for j in c.pending if j.id != 2]
    c.running = [replace(r, grace_period=grace) if r.id == 20 else r for r in c.running]
    c.run(2, "a", on={"n2": 4}, started=NOW)
    c.pending[0] = replace(c.pending[0], **{"reserved_on": (("n3", 8),), **stored})
    return schedule(c.snapshot(now=now))


@pytest.mark.parametrize(
    ("stored", "kept"),
    [
        ({"reserved_until": NOW + 600, "reserved_ending": (20,)}, True),
        ({}, False),  # none stored: the flavor's horizon is now + 30 s
        ({"reserved_until": NOW + 20, "reserved_ending": (20,)}, False),  # no longer ahead
        ({"reserved_until": NOW + 200, "reserved_ending": (20,)}, False),  # before its end
        ({"reserved_until": NOW + 600, "reserved_ending": (10,)}, False),  # not that job
        ({"reserved_until": NOW + 600}, False),  # no job counted: none
    ],
)
def test_a_stored_horizon_keeps_the_wait_for_the_job_it_counted_on(stored, kept):
    plan = _the_second_pass(**stored)
    if kept:
        assert not plan.preemptions
        assert verdict(plan, 1).reason_code == "waiting_for_preemption"
        assert verdict(plan, 1).estimated_start == NOW + 270
    else:
        assert preempted(plan) == [10]


def test_a_stored_claim_keeps_a_job_whose_grace_outlasts_what_is_left_of_its_horizon():
    """The non-preemptible job ends at +270 with 400 s of grace, at most the 600 s it was
    counted with. Asked of what is left of the horizon (360 s at +240), it stopped
    counting while it still ran, and the claim preempted after all (a random run)."""
    kept = {"reserved_until": NOW + 600, "reserved_ending": (20,)}
    for now in (NOW + 30, NOW + 240, NOW + 290):  # past its max runtime: overdue
        plan = _the_second_pass(now, 400.0, **kept)
        assert not plan.preemptions
        assert verdict(plan, 1).estimated_start == max(now, NOW + 270)
    assert preempted(_the_second_pass(NOW + 240, 400.0)) == [10]  # none stored


def test_a_horizon_without_its_target_is_not_kept():
    """reserved_until counts only with the stored target it was written with."""
    plan = _the_second_pass(reserved_until=NOW + 600, reserved_ending=(20,), reserved_on=())
    assert preempted(plan) == [10]


def test_a_stored_claim_counts_no_job_started_after_it_decided():
    """a's 1x8 job waits with n3 for a's job 20 ending at +270 (stored: +600, job 20).
    A borrower's 4-GPU job with 30 s of grace, admitted on n4 at +30, ends at +570: no
    job the claim counted. b's within-nominal 1x4 job, which only preempting it (or d's
    600 s-grace job) lets in, preempts it. Counted as ending (the flavor's horizon moved
    to the claim's), it was no victim, and b's job waited for its max runtime, kept
    waiting by that horizon copied into its own reservation (a review's case)."""
    c = Cluster()
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=4, block="b2", rack="r2")
    c.node("n3", gpus=8, block="b1", rack="r1")
    c.node("n4", gpus=4, block="b4", rack="r4")
    c.team("a", nominal=14, cohort="c").team("b", nominal=8, cohort="c")
    c.team("d", nominal=0, cohort="c")
    c.run(10, "d", on={"n1": 5}, grace=600.0, runtime=LONG)
    c.run(20, "a", on={"n3": 1}, preemptible=False, started=NOW - 30, runtime=300.0)
    c.run(2, "a", on={"n2": 4}, started=NOW)
    c.run(3, "d", on={"n4": 4}, started=NOW + 30, runtime=540.0)
    gang = c.job(1, "a", gpus=8, priority=1, submitted=NOW - 20)
    c.pending[0] = replace(
        gang, reserved_on=(("n3", 8),), reserved_until=NOW + 600, reserved_ending=(20,)
    )
    c.job(4, "b", gpus=4, submitted=NOW + 50, runtime=LONG)
    plan = schedule(c.snapshot(now=NOW + 60))
    assert preempted(plan) == [3]
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"  # its own claim holds
    assert verdict(plan, 1).estimated_start == NOW + 270
    assert verdict(plan, 4).estimated_start <= NOW + 270  # not X's end, +570


def test_a_claim_keeps_no_job_it_counts_for_quota_alone():
    """a's priority-1 1x8 job preempts a's priority-0 job on n3 for its GPUs, and counts
    a's non-preemptible job on n1, ending at +200, for a's nominal 8: it keeps nothing
    with its reservation. Kept, a job elsewhere counted as ending for every preemptor of
    the flavor, and another team's job waited for it where a 30 s-grace victim would
    have let it start at once (a review's random runs)."""
    c = Cluster().node("n1").node("n3", block="b3", rack="r3")
    c.team("a", nominal=8, cohort="c").team("e", nominal=2)
    c.run(10, "e", on={"n1": 2}, grace=600.0, runtime=LONG)
    c.run(21, "a", on={"n1": 1}, preemptible=False, **ends_in(200))
    c.run(22, "a", on={"n3": 1}, grace=600.0, runtime=LONG)
    c.job(1, "a", gpus=8, priority=1)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [22]
    assert "(21)" in verdict(plan, 1).message  # it waits for 21's quota
    assert [(r.job_id, r.nodes, r.until, r.ending) for r in plan.reservations] == [
        (1, (("n3", 8),), None, ())
    ]

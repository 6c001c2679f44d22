"""`Pass.reclaimable(pool, team)` was cached once per pass and team, but a
reclaim later in the same pass changes the answer (its victims become stopping, and their
team then borrows less, so fewer or none of its other jobs may be reclaimed). Later
consumers read the stale answer (a helper's case; now a preemption forgets its cohort's
entries: Pass.charge).

Scenario (one block, four 8-GPU nodes, one cohort c; x runs outside it):

    n0: b's 11 (4, preemptible, oldest)      + 4 free
    n1: b's 12 (4, preemptible, newest)      + x's 30 (2, non-preemptible) + 2 free
    n2: x's 31 (8, non-preemptible)
    n3: x's 32 (2, non-preemptible)          + 6 free

b (nominal 4) uses 8, so it borrows 4: a within-nominal job may reclaim ONE of b's jobs.
Pass order (fair share, shares m < g < a):
  1. m's 5 (3x8, would borrow): its quota check asks kept_for_others -> _usable ->
     _beside_reclaim(a) (a's 1x8 job 3 fits no free node), which fills
     Pass._reclaim[(h100, a)] = {n1: 4} (b's 12, first in victim order);
  2. m's 6 (1x8, within nominal) reclaims b's 11 on n0 (its only place; n0's free 4
     are now reserved for it). b now uses 4 of nominal 4 once 11 stops: it borrows
     nothing, and no job of b may be reclaimed any more;
  3. g's 21 (1x4, borrower): _usable(a) reads the stale {n1: 4} and counts a's 2x4
     job 2 as placeable on n3's free 4 + n1's free 2 beside b's 12: "6 of the 8 free
     GPUs are kept for teams within their nominal quota whose jobs wait for them in
     this pass, so it may take only 2 now". 21 waits `cohort_busy`;
  4. a's jobs 1, 2, 3: none starts and none reclaims (b borrows nothing). The 6 GPUs
     "kept" for them sit idle; 21 starts at the next pass (Sim: +10 s).

Recomputed (reclaimable_now) the kept count is 0 and 21 starts in pass 1.
The same stale entry also reaches backfill._may_reclaim: a's job 2 is exempted from
its own team's gang hold (OWN_HOLD) as "a job that may reclaim", is told `fragmented`
and takes the flavor's backfill reservation, though it may reclaim nothing.
"""

from __future__ import annotations

from scheduler import schedule
from tests.scheduler.helpers import (
    FLAVOR,
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    preempted,
    verdict,
)

LONG = 100 * HOUR
WEEK = 7 * 24 * HOUR


def cluster(with_borrower: bool = True) -> Cluster:
    c = Cluster().nodes_(4)
    c.team("a", nominal=16, cohort="c", decayed={FLAVOR: 16 * WEEK})
    c.team("m", nominal=16, cohort="c", decayed={FLAVOR: 1 * WEEK})
    c.team("b", nominal=4, cohort="c")
    c.team("g", nominal=0, cohort="c", decayed={FLAVOR: 4 * WEEK})
    c.team("x", nominal=32)
    c.run(11, "b", on={"n0": 4}, runtime=LONG, started=NOW - 8000)
    c.run(12, "b", on={"n1": 4}, runtime=LONG, started=NOW - 4000)
    c.run(30, "x", on={"n1": 2}, preemptible=False, runtime=LONG)
    c.run(31, "x", on={"n2": 8}, preemptible=False, runtime=LONG)
    c.run(32, "x", on={"n3": 2}, preemptible=False, runtime=LONG)
    c.job(5, "m", workers=3, gpus=8, priority=5, runtime=LONG)
    c.job(6, "m", gpus=8, runtime=LONG)
    c.job(1, "a", workers=3, gpus=8, priority=5, runtime=LONG)
    c.job(2, "a", workers=2, gpus=4, runtime=LONG)
    c.job(3, "a", gpus=8, runtime=LONG)
    if with_borrower:
        c.job(21, "g", gpus=4, runtime=LONG)
    return c


def test_gpus_are_not_kept_for_a_reclaim_an_earlier_reclaim_of_the_pass_ruled_out():
    plan = schedule(cluster().snapshot())
    # the setting: m's 6 reclaims b's 11, after which b borrows nothing
    assert preempted(plan) == [11]
    assert verdict(plan, 6).reason_code == "waiting_for_preemption"
    # no job of a starts or reclaims in this pass: nothing uses GPUs kept for a
    assert not {1, 2, 3} & set(admitted(plan))
    # so the borrower is not held back for a
    assert 21 in admitted(plan), verdict(plan, 21).message  # was cohort_busy, "6 ... kept"


def test_the_kept_gpus_sat_idle_for_a_pass():
    """Run forward: with passes 10 s apart, 21 should start at once; it was started at
    the second pass, although a's jobs took none of the GPUs kept for them."""
    sim = Sim(cluster())
    assert sim.start_of(21, 10.0, 3) == NOW  # was NOW + 10


def test_a_job_that_can_reclaim_nothing_is_not_exempted_from_its_teams_gang_hold():
    """Without g's borrower: a's job 2 cannot reclaim (b borrows nothing once 11 stops),
    so backfill._may_reclaim must not exempt it from the hold a's gang 1 puts on a's
    quota (docs/scheduling.md: "Never a job that may reclaim ..."). It read the stale
    Pass.reclaimable, was told `fragmented` and was given the flavor's backfill
    reservation."""
    plan = schedule(cluster(with_borrower=False).snapshot())
    assert preempted(plan) == [11]
    v = verdict(plan, 2)
    assert v.reason_code == "reserved", v.message  # was fragmented
    assert "would take quota that job 1 of team a needs" in v.message

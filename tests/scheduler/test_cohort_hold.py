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
from tests.scheduler.helpers import NOW, Cluster, Sim, make_job, reasons, verdict


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


def test_jobs_within_nominal_quota_are_never_held_back():
    c = lender_cluster()
    c.job(1, "b", workers=1, gpus=8, submitted=NOW - 50)
    c.job(2, "b", workers=1, gpus=2, submitted=NOW - 40, runtime=3600)  # within b's nominal 4
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

"""GPU-hour budgets at the boundary: a job is admitted only if the team's used GPU-hours,
what its running jobs may still use and the job's own GPUs x max run time stay within
the limit (Slurm's GrpTRESMins with AccountingStorageEnforce=safe)."""

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import REASONS, Budget, Snapshot, schedule
from scheduler.timewords import instant
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    make_job,
    make_team,
    preempted,
    reasons,
    verdict,
)
from tests.scheduler.test_properties import snapshots

RESETS = NOW + 10 * 24 * HOUR
OVER = "budget_exhausted"


def budget(used, limit=5000.0, team="vision", flavor="h100", **kw) -> Budget:
    kw.setdefault("resets_at", RESETS)
    return Budget(team, flavor, limit, used, **kw)


def step_with(sim: Sim, t: float, *budgets: Budget):
    """Run the Sim's pass at `t` (its ended jobs already finished) with these budgets."""
    snap = Snapshot(
        t,
        sim._nodes(),
        sim.teams,
        tuple(sim.running.values()),
        tuple(sim.pending.values()),
        sim.config,
        budgets,
    )
    return sim.apply(schedule(snap), t)


def with_budgets(c: Cluster, *budgets, **config):
    return replace(c.snapshot(**config), budgets=budgets)


def cluster() -> Cluster:
    c = Cluster().nodes_(4)
    c.team("vision", nominal=32)
    c.team("speech", nominal=32)
    return c


# (name, used GPU-hours, job gpus, job max run time in hours, admitted?)
BOUNDARY = [
    ("far under", 1000.0, 8, 10.0, True),
    ("just under", 4980.0, 4, 4.75, True),  # 4,999
    ("exactly at", 4980.0, 4, 5.0, True),  # 5,000: lands on the limit
    ("just over", 4980.0, 4, 5.25, False),  # 5,001: its max run time would cross
    ("at the limit", 5000.0, 1, 1 / 60, False),  # nothing is left, however small
    ("past the limit", 5100.0, 1, 1.0, False),
]


@pytest.mark.parametrize(("name", "used", "gpus", "hours", "starts"), BOUNDARY, ids=lambda x: x)
def test_the_boundary(name, used, gpus, hours, starts):
    c = cluster()
    c.job(1, "vision", gpus=gpus, runtime=hours * HOUR)
    plan = schedule(with_budgets(c, budget(used)))
    assert admitted(plan) == ([1] if starts else [])
    assert reasons(plan) == ({} if starts else {1: OVER})


def test_running_jobs_count_with_the_rest_of_their_max_run_time():
    """4,900 used + 8 GPUs x 10 h still allowed to a running job = 4,980: a 30 GPU-hour
    job would cross; without the running job it fits."""
    c = cluster()
    c.run(10, "vision", on={"n0": 8}, started=NOW - 2 * HOUR, runtime=12 * HOUR)
    c.job(1, "vision", gpus=3, runtime=10 * HOUR)
    plan = schedule(with_budgets(c, budget(4900.0)))
    assert reasons(plan) == {1: OVER}
    assert plan.preemptions == ()  # running jobs continue

    c.running = [replace(c.running[0], stopping=True)]  # stopping: commits its 30 s of grace
    assert admitted(schedule(with_budgets(c, budget(4900.0)))) == [1]
    assert reasons(schedule(with_budgets(c, budget(4970.0 - 8 * 30 / HOUR + 0.01)))) == {1: OVER}


def test_jobs_admitted_in_the_same_pass_are_charged():
    """20 GPU-hours left: the first 15 GPU-hour job goes, the second would cross."""
    c = cluster()
    c.job(1, "vision", gpus=3, runtime=5 * HOUR)
    c.job(2, "vision", gpus=3, runtime=5 * HOUR)
    c.job(3, "vision", gpus=1, runtime=5 * HOUR)  # 5 more: exactly at the limit
    plan = schedule(with_budgets(c, budget(4980.0)))
    assert admitted(plan) == [1, 3]
    assert reasons(plan) == {2: OVER}


def test_only_its_team_and_flavor_wait():
    c = cluster().node("a0", flavor="a100")
    c.teams = [replace(t, quotas={**t.quotas, "a100": t.quotas["h100"]}) for t in c.teams]
    c.job(1, "vision", gpus=8)
    c.job(2, "vision", gpus=8, flavor="a100")
    c.job(3, "speech", gpus=8)
    plan = schedule(with_budgets(c, budget(5000.0)))
    assert admitted(plan) == [2, 3]
    assert reasons(plan) == {1: OVER}


def test_it_holds_nothing_back_no_reservation_no_preemption():
    """A blocked vision job first in line would get the backfill reservation (or preempt
    speech's borrowed GPUs); over its budget it gets neither and speech's job starts."""
    c = Cluster().nodes_(1)
    c.team("vision", nominal=8)
    c.team("speech", nominal=0)
    c.run(10, "speech", on={"n0": 4}, runtime=HOUR)
    c.job(1, "vision", gpus=8, submitted=NOW - 5000)
    c.job(2, "speech", gpus=4, runtime=10 * HOUR)
    plan = schedule(with_budgets(c, budget(5000.0)))
    assert plan.preemptions == ()
    assert plan.stats["reservations"] == 0
    assert reasons(plan) == {1: OVER, 2: reasons(plan)[2]}
    assert reasons(plan)[2] != "reserved"


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "fairshare"])
def test_strict_fifo_is_not_blocked_by_a_job_over_its_budget(policy):
    c = cluster()
    c.job(1, "vision", gpus=8, submitted=NOW - 5000)
    c.job(2, "speech", gpus=8)
    plan = schedule(with_budgets(c, budget(5000.0), policy=policy))
    assert (admitted(plan), reasons(plan)) == ([2], {1: OVER})


def test_never_fits_and_no_nodes_outrank_it_and_it_outranks_backoff():
    c = cluster()
    c.job(1, "vision", gpus=8, workers=9)  # more than the team may ever hold
    c.job(2, "vision", gpus=8, flavor="mi300")
    c.job(3, "vision", gpus=1, restarts=1, eligible_at=NOW + 600)
    c.job(4, "vision", gpus=1, restarts=1, old_attempt=True)
    plan = schedule(with_budgets(c, budget(5000.0)))
    assert reasons(plan) == {1: "never_fits", 2: "no_nodes", 3: OVER, 4: OVER}


def test_it_outranks_an_arrays_limit_too():
    c = Cluster().node("n0")
    c.team("vision", nominal=8)
    for i in (1, 2, 3):
        c.job(i, "vision", runtime=100 * HOUR)
        c.pending[-1] = replace(c.pending[-1], array_id=7, array_limit=1)
    plan = schedule(with_budgets(c, budget(0.0, limit=50.0)))
    assert reasons(plan) == {1: OVER, 2: OVER, 3: OVER}


def test_a_preemptor_its_victims_name_is_not_admitted_past_the_budget():
    """A reservation is a claim on GPUs, not on GPU-hours: honouring it checks the budget."""
    for named in (False, True):
        c = Cluster().nodes_(1)
        c.team("vision", nominal=8)
        c.team("speech", nominal=0)
        c.job(1, "vision", gpus=8, runtime=10 * HOUR)  # 80 GPU-hours on a budget of 50
        c.job(2, "speech", gpus=8, runtime=HOUR, eligible_at=NOW + 600)  # its victim, requeued
        if named:
            c.pending[-1] = replace(c.pending[-1], preempted_by=1)
        plan = schedule(with_budgets(c, budget(0.0, limit=50.0)))
        assert admitted(plan) == [] and reasons(plan)[1] == OVER, named


def test_the_sentence_at_the_limit_and_the_estimate_is_the_reset():
    c = cluster()
    c.job(1, "vision", gpus=8)
    v = verdict(schedule(with_budgets(c, budget(5012.5))), 1)
    assert v.message == (
        f"team vision used 5,012 of 5,000 h100 GPU-hours this month; resets at {instant(RESETS)}"
    )
    assert v.estimated_start == RESETS


def test_the_sentence_when_its_max_run_time_would_cross():
    c = cluster()
    c.run(10, "vision", on={"n0": 8}, started=NOW - 2 * HOUR, runtime=12 * HOUR)
    c.job(1, "vision", gpus=4, runtime=6 * HOUR)
    v = verdict(schedule(with_budgets(c, budget(4900.0))), 1)
    assert v.message == (
        "team vision used 4,900 of 5,000 h100 GPU-hours this month; its running jobs may use "
        "80 more and this job up to 24 (4 GPUs x 6 h max run time), which would cross the "
        f"limit; resets at {instant(RESETS)}"
    )


def test_a_rolling_window_has_no_reset_and_no_estimate():
    c = cluster()
    c.job(1, "vision", gpus=8)
    rolling = budget(700.0, limit=700.0, period="rolling", resets_at=None, window_days=30)
    v = verdict(schedule(with_budgets(c, rolling)), 1)
    assert v.message == (
        "team vision used 700 of 700 h100 GPU-hours in the last 30 days; usage older than "
        "30 days leaves the window"
    )
    assert v.estimated_start is None


def test_a_job_bigger_than_the_whole_budget_is_told_so():
    c = cluster()
    c.job(1, "vision", gpus=8, runtime=100 * HOUR)
    v = verdict(schedule(with_budgets(c, budget(0.0, limit=500.0))), 1)
    assert v.reason_code == OVER
    assert "this job alone may use 800 (8 GPUs x 4 d 4 h max run time)" in v.message
    assert v.estimated_start is None


def test_without_explanations_the_fixed_summary():
    c = cluster()
    c.job(1, "vision", gpus=8)
    v = verdict(schedule(with_budgets(c, budget(5000.0), explain=False)), 1)
    assert (v.reason_code, v.message) == (OVER, REASONS[OVER])


# --- property: whatever the snapshot, admissions never overrun a budget ------------------


@st.composite
def budgeted(draw):
    snap = draw(snapshots())
    pairs = sorted({(j.team, j.flavor) for j in snap.pending})
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    budgets = []
    for team, flavor in chosen:
        limit = draw(st.sampled_from([1.0, 10.0, 100.0, 1000.0]))
        budgets.append(Budget(team, flavor, limit, draw(st.floats(0, 1.2 * limit))))
    return replace(snap, budgets=tuple(budgets))


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budgeted())
def test_admissions_never_overrun_a_budget(snap):
    plan = schedule(snap)
    # Preemptors named by their victims (stopping, or requeued) are admitted first
    # (scheduler.preemption): they passed the budget gate when they preempted.
    named = {r.preempted_by for r in snap.running} | {j.preempted_by for j in snap.pending}
    jobs = {j.id: j for j in snap.pending}
    for b in snap.budgets:
        key = (b.team, b.flavor)
        taken = [
            jobs[a.job_id]
            for a in plan.admissions
            if (jobs[a.job_id].team, jobs[a.job_id].flavor) == key
        ]
        checked = [j for j in taken if j.id not in named]
        if not checked:
            continue
        committed = sum(
            r.gpus * max(0.0, r.started_at + r.max_runtime - snap.now) / HOUR
            for r in snap.running
            if (r.team, r.flavor) == key and not r.stopping
        )
        spent = sum(j.gpus * j.max_runtime / HOUR for j in taken)
        assert b.used + committed + spent <= b.limit + 1e-6
    over = {v.job_id for v in plan.verdicts if v.reason_code == OVER}
    assert all(
        (jobs[i].team, jobs[i].flavor) in {(b.team, b.flavor) for b in snap.budgets} for i in over
    )


def test_a_preemptor_waiting_for_its_victims_is_charged_to_its_budget():
    """a's 1x4 gang (400 GPU-hours at most) reclaims two of b's borrowed jobs and waits
    for them; a's 1-GPU job (100 more) would take a past its 500 once the gang runs.
    Left out of the budget while it waited, the gang's GPU-hours let the 1-GPU job
    reclaim b's third job too, and at the next pass, the gang admitted first, the job
    was over the budget: b's job lost its work for nothing (a random disrupted run)."""
    c = Cluster().node("n0", gpus=4, block="b0", rack="r0").node("n1", gpus=4)
    c.team("a", nominal=5, cohort="c").team("b", cohort="c")
    for i in (1, 2, 3):
        c.run(i, "b", on={"n0": 1}, runtime=100 * HOUR)
    c.job(6, "a", gpus=4, runtime=100 * HOUR)
    c.job(7, "a", gpus=1, runtime=100 * HOUR)
    plan = schedule(with_budgets(c, budget(1.0, limit=500.0, team="a")))
    assert sorted(p.preemptor_id for p in plan.preemptions) == [6, 6]
    assert verdict(plan, 7).reason_code == "budget_exhausted"
    message = verdict(plan, 7).message  # a runs nothing: not "its running jobs" (a review)
    assert (
        "; its jobs waiting for stopping jobs or for a reservation may use 400 once they start and this job"
        in message
    )


def test_the_budget_sentence_names_running_and_waiting_jobs_apart():
    c = Cluster().node("n0", gpus=4, block="b0", rack="r0").node("n1", gpus=4)
    c.team("a", nominal=5, cohort="c").team("b", cohort="c")
    for i in (1, 2, 3):
        c.run(i, "b", on={"n0": 1}, runtime=100 * HOUR)
    c.run(4, "a", on={"n1": 1}, started=NOW - HOUR, runtime=11 * HOUR)  # 10 GPU-hours left
    c.job(6, "a", gpus=3, runtime=100 * HOUR)
    c.job(7, "a", gpus=1, runtime=100 * HOUR)
    plan = schedule(with_budgets(c, budget(1.0, limit=400.0, team="a")))
    assert {p.preemptor_id for p in plan.preemptions} == {6}
    assert (
        "; its running jobs may use 10 more, its jobs waiting for stopping jobs or for a "
        "reservation 300 once they start, and this job up to 100 (1 GPUs x 4 d 4 h max run time), which would cross"
    ) in verdict(plan, 7).message


def test_a_stopping_jobs_grace_period_is_committed_so_its_preemptor_keeps_its_budget():
    """Team e (nominal 24, budget 170 GPU-hours, no cohort) runs job 5 (8 GPUs, priority 0,
    an hour of grace). At NOW its priority-1 job 6 (8 GPUs x 10 h) preempts job 5 by
    priority: 8 used + 72 committed + 80 = 160 <= 170. At NOW + 710 (another team's job has
    ended, n1 is free) e's job 9 (8 GPUs x 10 h) was admitted: used 9.6 + 0 committed (a
    stopping job committed nothing more) + 80 (job 6, waiting) + 80 = 169.6 <= 170. But job
    5 still holds its 8 GPUs for 2,890 s (6.4 GPU-hours), and when it stopped (NOW + 3600)
    job 6 was told budget_exhausted: job 5 lost its work for a preemptor that could not
    start (an adversarial helper's random runs). A stopping job now commits the rest of
    its grace period: job 9 waits (176 > 170), and job 6 starts when job 5 has stopped."""
    c = Cluster().node("n0", block="b0", rack="r0").node("n1", block="b0", rack="r0")
    c.node("n2", gpus=1, block="b0", rack="r0")
    c.team("e", nominal=24)
    c.teams += [make_team("x", 8), make_team("y", 1)]
    c.run(5, "e", on={"n0": 8}, started=NOW - HOUR, runtime=10 * HOUR, grace=3600.0)
    c.run(7, "x", on={"n1": 8}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    c.run(8, "y", on={"n2": 1}, runtime=100 * HOUR, grace=30.0)  # the flavor's grace: 30 s
    c.job(6, "e", gpus=8, priority=1, runtime=10 * HOUR)
    sim = Sim(c)
    sim.runs[7] = HOUR + 700  # it ends early, at +700: nothing the pass could foresee

    def used_at(t):  # e's GPU-hours so far (the showback figure, exact here)
        u = 8 * (min(t, NOW + 3600) - (NOW - HOUR)) / HOUR
        return u + sum(8 * (t - sim.started[j]) / HOUR for j in (6, 9) if j in sim.started)

    def step(t):
        sim._finish(t)
        return step_with(sim, t, Budget("e", "h100", 170.0, used_at(t), resets_at=NOW + 30 * 86400))

    assert preempted(step(NOW)) == [5]
    sim.submit(make_job(9, "e", gpus=8, runtime=10 * HOUR, queue="r", submitted=NOW + 700))
    assert reasons(step(NOW + 710)).get(9) == OVER  # job 5 still uses its grace period
    plan = step(NOW + 3600)  # job 5 has stopped
    assert admitted(plan) == [6], reasons(plan)
    assert 9 not in sim.started


def test_no_job_is_admitted_onto_the_budget_a_stopping_jobs_grace_period_still_uses():
    """The same gap in one pass: team e's job 5 was told to stop 100 s ago and has an hour
    of grace (8 GPUs: 7.8 GPU-hours still to use). Job 6 (80 GPU-hours) is admitted with
    used 8 + 80 = 88 = the limit, so e ends at 95.8 of 88 if job 6 runs to its max run
    time: the budget was overrun. It waits `budget_exhausted` now."""
    c = Cluster().node("n0", block="b0", rack="r0").node("n1", block="b0", rack="r0")
    c.team("e", nominal=16)
    c.run(
        5,
        "e",
        on={"n0": 8},
        started=NOW - HOUR,
        runtime=10 * HOUR,
        stopping=True,
        grace=3600.0,
        stop_requested=NOW - 100,
    )
    c.job(6, "e", gpus=8, runtime=10 * HOUR)
    budget = Budget("e", "h100", limit=88.0, used=8.0, resets_at=NOW + 30 * 86400)
    plan = schedule(replace(c.snapshot(), budgets=(budget,)))
    assert reasons(plan).get(6) == "budget_exhausted"


def test_the_budget_sentence_does_not_depend_on_the_order_of_running_jobs():
    """Team b runs three 1-GPU jobs with 36 s, 36 s and 468 s of max run time left (0.01,
    0.01 and 0.13 GPU-hours). Summed in snapshot order, 0.01 + 0.01 + 0.13 is 0.15 and
    prints "0.1"; in the reverse order it is 0.15000000000000002 and prints "0.2". The
    plan's sentence changed with the order of the snapshot's tuples (an adversarial
    helper's determinism check). The committed GPU-hours are now summed exactly
    (math.fsum), in any order the same."""
    c = Cluster().node("n0", block="b0", rack="r0")
    c.team("b", nominal=8)
    for i, left in ((1, 36.0), (2, 36.0), (3, 468.0)):
        c.run(i, "b", on={"n0": 1}, started=NOW - 100, runtime=100 + left)
    c.job(9, "b", gpus=1, runtime=49.9 * HOUR)  # 49.9 + 0.15 crosses 50
    budget = Budget("b", "h100", limit=50.0, used=0.0, resets_at=NOW + 30 * 86400)
    snap = replace(c.snapshot(), budgets=(budget,))
    flipped = replace(snap, running=snap.running[::-1])
    one, two = verdict(schedule(snap), 9), verdict(schedule(flipped), 9)
    assert one.reason_code == two.reason_code == "budget_exhausted"
    assert one.message == two.message


def test_a_reclaims_look_ahead_keeps_no_place_for_a_gang_its_teams_budget_refuses():
    """Team a's 1x8 job reclaims one node of borrower b's 1-GPU jobs. Team e waits with a
    priority-1 1-GPU job (1 GPU-hour) and then a 2x8 gang (16 GPU-hours); e's budget has
    16.5 GPU-hours left: each job alone fits, both together do not. The look-ahead kept
    block b0 (n0, n1, the only two-node block) for the gang and sent a's job to n2, whose
    jobs lost twice the work of n1's; the same pass then told the gang budget_exhausted,
    since e's 1-GPU job took the budget first (an adversarial helper's case). The pass's
    demand now charges a team's jobs ahead in its queue to its budget (Pass._demand):
    a's job takes n1, the cheapest node, as it does without the gang."""
    c = Cluster()
    c.node("n0", block="b0", rack="r0").node("n1", block="b0", rack="r0")
    c.node("n2", block="b1", rack="r1")
    c.node("n3", gpus=1, block="b2", rack="r2")
    c.team("a", nominal=8, cohort="c").team("e", nominal=17, cohort="c")
    c.team("b", nominal=0, cohort="c")
    ids = iter(range(10, 100))
    on_n1 = []
    for node, started in (("n0", NOW - 3000), ("n1", NOW - 600), ("n2", NOW - 1200)):
        for _ in range(8):
            r = c.run(next(ids), "b", on={node: 1}, started=started, runtime=100 * HOUR)
            if node == "n1":
                on_n1.append(r.id)
    c.job(1, "a", gpus=8, runtime=HOUR)
    c.job(2, "e", gpus=1, priority=1, runtime=HOUR)
    c.job(3, "e", workers=2, gpus=8, runtime=HOUR)
    snap = replace(
        c.snapshot(),
        budgets=(Budget("e", "h100", limit=16.5, used=0.0, resets_at=NOW + 86400),),
    )
    plan = schedule(snap)
    assert reasons(plan)[3] == "budget_exhausted"  # the gang cannot start in this pass
    # so job 1 is not moved off the cheapest node (n1: 4,800 GPU-seconds lost, n2 9,600)
    assert sorted(preempted(plan)) == on_n1

    # A job ahead that can never run (16 GPUs on one node of 8) is not charged: the gang
    # is kept its block (a's job goes to n2) and reclaims it, as without that job.
    never = replace(c.pending[1], gpus_per_worker=16)
    plan = schedule(replace(snap, pending=(c.pending[0], never, c.pending[2])))
    alone = schedule(replace(snap, pending=(c.pending[0], c.pending[2])))
    assert reasons(plan) == {**reasons(alone), 2: "never_fits"}
    assert reasons(plan)[3] == "waiting_for_preemption"
    assert preempted(plan) == preempted(alone) and set(on_n1) <= set(preempted(plan))


def test_a_job_the_pass_preempts_commits_only_its_grace_period_from_then_on():
    """Team e (nominal 17, budget 160.5 GPU-hours, nothing used) runs job 5 (8 GPUs, 10 h
    left, priority 0) on n0; n1 is another team's. e's priority-1 job 6 (8 GPUs x 10 h)
    passes the budget with job 5's 80 committed (160) and preempts it. e's 1-GPU job 9
    fits the free GPU of n2 and its quota. Job 5 committed its 10 h for the rest of the
    pass, so job 9 was told budget_exhausted (80 + 80 + 1 = 161) and started in the next
    pass with nothing else changed (a review). Once preempted, job 5 commits its 30 s of
    grace: job 9 starts now."""
    c = Cluster().node("n0").node("n1").node("n2", gpus=1)
    c.team("e", nominal=17).team("x", nominal=8)
    c.run(5, "e", on={"n0": 8}, started=NOW - HOUR, runtime=11 * HOUR)
    c.run(7, "x", on={"n1": 8}, runtime=100 * HOUR, preemptible=False)
    c.job(6, "e", gpus=8, priority=1, runtime=10 * HOUR)
    c.job(9, "e", gpus=1, runtime=HOUR, queue="r")
    plan = schedule(with_budgets(c, budget(0.0, limit=160.5, team="e")))
    assert preempted(plan) == [5]
    assert admitted(plan) == [9], reasons(plan)


@pytest.mark.parametrize("held", ["gpus", "quota"])
def test_a_job_given_a_start_time_holds_its_budget_against_its_teams_later_jobs(held):
    """Team a's 2x8 gang waits for GPUs ("gpus": reserved from +1 h, when e's job ends)
    or for its team's quota ("quota": a's nominal 16 holds it until a's 8-GPU job ends at
    +1 h). a's later 8-GPU, 50-minute job ends before then, so the reservation or the hold
    lets it start. Both fit a's budget of 18 GPU-hours alone (16 and 6.7), not together:
    admitted, it took the budget the gang needed, and the gang, told it was reserved from
    +1 h, was `budget_exhausted` from the next pass until the month reset (an adversarial
    tester's case). The job given a start time commits its GPU-hours (Budgets.promise)."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=16 if held == "quota" else 32).team("e", nominal=8)
    if held == "gpus":
        c.run(10, "e", on={"n0": 8}, runtime=HOUR, started=NOW)
        c.run(11, "e", on={"n2": 8}, runtime=10 * HOUR, started=NOW)
    else:
        c.run(10, "a", on={"n0": 8}, runtime=HOUR, started=NOW)
    c.job(1, "a", workers=2, gpus=8, runtime=HOUR, submitted=NOW - 100)
    c.job(2, "a", gpus=8, runtime=50 * 60, submitted=NOW - 50)
    sim = Sim(c)

    def step(t):
        sim._finish(t)
        used = 8 * (min(t, NOW + HOUR) - NOW) / HOUR if held == "quota" else 0.0  # job 10's
        used += sum(r.gpus * (t - r.started_at) / HOUR for j, r in sim.running.items() if j < 10)
        limit = 18.0 + (8.0 if held == "quota" else 0.0)
        return step_with(sim, t, Budget("a", "h100", limit, used, resets_at=RESETS))

    plan = step(NOW)
    if held == "gpus":
        assert "reserved for it from" in verdict(plan, 1).message, verdict(plan, 1).message
    assert reasons(plan).get(2) == OVER, verdict(plan, 2).message
    message = verdict(plan, 2).message
    assert "its jobs waiting for stopping jobs or for a reservation" in message, message
    assert "16 once they start" in message, message
    for k in range(1, 70):
        step(NOW + 60 * k)
    assert sim.started.get(1, math.inf) <= NOW + HOUR + 60, reasons(plan)


@pytest.mark.parametrize(
    ("runtime", "resets", "admits"),
    [(20 * 60, 1800, True), (20 * 60, 2 * HOUR, False), (4 * HOUR, 1800, False)],
    ids=["ends before the reset", "no reset before the gang", "runs past the reset"],
)
def test_a_reservation_past_the_reset_holds_the_next_periods_budget(runtime, resets, admits):
    """Team a (budget 18 GPU-hours, 2 used): its 2x8 gang (16 GPU-hours) is reserved from
    +1 h on n0 and n1; its 4-GPU job of `runtime` fits on n2 beside it. With the budget
    resetting at +30 min the gang spends the next period's: counted in this one, a
    20-minute job (1.3 GPU-hours, over by the reset) was `budget_exhausted` until the
    reset; counted in neither, a 4-hour job (16 GPU-hours) took the next period's, and
    the gang, told +1 h, started at +4 h (two reviews' cases). It is counted against the
    jobs that may run past the reset (Budgets.after_reset)."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=32).team("e", nominal=16)
    c.run(10, "e", on={"n0": 8}, runtime=HOUR, started=NOW)
    c.run(11, "e", on={"n1": 4}, runtime=HOUR, started=NOW)
    c.run(12, "e", on={"n2": 4}, runtime=10 * HOUR, started=NOW)
    c.job(1, "a", workers=2, gpus=8, runtime=HOUR, submitted=NOW - 100)
    c.job(2, "a", gpus=4, runtime=runtime, submitted=NOW - 50)
    plan = schedule(with_budgets(c, budget(2.0, limit=18.0, team="a", resets_at=NOW + resets)))
    assert "reserved for it from" in verdict(plan, 1).message, verdict(plan, 1).message
    assert (2 in admitted(plan)) is admits, verdict(plan, 2).message
    if not admits:
        assert verdict(plan, 2).reason_code == OVER

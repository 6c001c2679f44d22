"""A job array's `%N` limit: at most N of its tasks hold GPUs at once (`array_limit`)."""

from dataclasses import replace

import pytest

from scheduler import REASONS, schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, preempted, reasons, verdict

LIMIT = "array_limit"


def task(c: Cluster, id, array=7, limit=2, **kw):
    """A pending task of array `array` with limit `limit` (None: no limit)."""
    job = c.job(id, **kw)
    c.pending[-1] = replace(job, array_id=array, array_limit=limit)
    return c.pending[-1]


def running_task(c: Cluster, id, array=7, **kw):
    job = c.run(id, **kw)
    c.running[-1] = replace(job, array_id=array)
    return c.running[-1]


def room_for_all():
    """Enough GPUs for all four tasks: only the limit (2) holds two back."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    for i in (1, 2, 3, 4):
        task(c, i)
    return c, {1: "admitted", 2: "admitted", 3: LIMIT, 4: LIMIT}


def running_ones_count():
    """One task already runs: one more may start."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1})
    for i in (2, 3, 4):
        task(c, i)
    return c, {2: "admitted", 3: LIMIT, 4: LIMIT}


def stopping_ones_count():
    """A task still stopping holds its GPUs, so it counts too."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1}, stopping=True)
    running_task(c, 2, on={"n0": 1})
    task(c, 3)
    return c, {3: LIMIT}


def no_limit_no_hold():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    for i in (1, 2, 3):
        task(c, i, limit=None)
    return c, {1: "admitted", 2: "admitted", 3: "admitted"}


def arrays_are_counted_apart():
    """Each array has its own limit; a plain job is not held by either."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    task(c, 1, array=7, limit=1)
    task(c, 2, array=7, limit=1)
    task(c, 3, array=8, limit=1)
    task(c, 4, array=8, limit=1)
    c.job(5)
    return c, {1: "admitted", 2: LIMIT, 3: "admitted", 4: LIMIT, 5: "admitted"}


def lowest_index_first():
    """The tasks considered are the first in queue order; higher priority goes first."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    task(c, 1, limit=1)
    task(c, 2, limit=1, priority=5)
    return c, {1: LIMIT, 2: "admitted"}


def quota_still_applies():
    """Within its limit a task may still wait for quota: the limit is a ceiling only."""
    c = Cluster().node("n0")
    c.team("a", nominal=1, borrowing_limit=0)
    task(c, 1, limit=2)
    task(c, 2, limit=2)
    task(c, 3, limit=2)
    return c, {1: "admitted", 2: "quota", 3: LIMIT}


def never_fits_outranks_it():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 2})
    task(c, 2, gpus=16)
    return c, {2: "never_fits"}


SCENARIOS = [
    room_for_all,
    running_ones_count,
    stopping_ones_count,
    no_limit_no_hold,
    arrays_are_counted_apart,
    lowest_index_first,
    quota_still_applies,
    never_fits_outranks_it,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("policy", ["fairshare", "fifo"])
def test_the_limit_caps_the_tasks_holding_gpus(scenario, policy):
    c, expect = scenario()
    plan = schedule(c.snapshot(policy=policy))
    got = reasons(plan) | {i: "admitted" for i in admitted(plan)}
    assert got == expect


def test_the_verdict_says_which_array_and_its_limit():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1})
    running_task(c, 2, on={"n0": 1})
    task(c, 3, gpus=2)
    plan = schedule(c.snapshot())
    v = verdict(plan, 3)
    assert (v.reason_code, v.position) == (LIMIT, 1)
    assert v.message == (
        "needs 2 h100 GPUs; array 7 already has 2 tasks running, its limit (%2); "
        "it starts when one of them ends"
    )
    assert v.estimated_start == NOW + 3000  # when the first running task ends, not now
    assert plan.stats["array_limit"] == 1
    assert plan.preemptions == () and plan.stats["reservations"] == 0


def test_without_explanations_the_verdict_is_the_fixed_summary():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1}, array=7)
    task(c, 2, limit=1)
    v = verdict(schedule(c.snapshot(explain=False)), 2)
    assert (v.reason_code, v.message) == (LIMIT, REASONS[LIMIT])


def test_a_held_task_blocks_nothing_under_strict_fifo():
    """Set aside before ordering: a task over its limit does not stop the flavor."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1})
    task(c, 2, limit=1)
    c.job(3)
    plan = schedule(c.snapshot(policy="fifo"))
    assert admitted(plan) == [3]


def test_held_tasks_start_one_slot_after_another():
    """Limit 1, one task running to NOW+3000: the next waits for it, the one after that
    for the next (each an hour), whatever GPUs are free."""
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    running_task(c, 1, on={"n0": 1})  # started NOW-600, runs an hour
    task(c, 2, limit=1)
    task(c, 3, limit=1)
    plan = schedule(c.snapshot())
    assert verdict(plan, 2).estimated_start == NOW + 3000
    assert verdict(plan, 3).estimated_start == NOW + 3000 + HOUR


@pytest.mark.parametrize("earlier", ["backing_off", "old_attempt_stopping", "priority"])
def test_a_task_that_preempted_keeps_its_arrays_slot(earlier):
    """An adversarial helper's case: array 7 (%1); task 2 reclaims borrower b's node n0
    while task 1 is set aside (in its requeue backoff, its previous attempt still stopping,
    or behind task 2 until its priority is raised). When task 1 came back ahead of task 2
    in queue order, the limit set task 2 aside: its claim went with it, task 1 started on
    n1 (free once a's job 11 ended), and b's job 10 was readmitted on the GPUs it had been
    stopped for, its work lost for nothing. The slot is the preemptor's."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=16, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 8}, runtime=100 * HOUR)
    c.run(11, "a", on={"n1": 8}, runtime=100 * HOUR)
    one = task(c, 1, team="a", gpus=8, runtime=100 * HOUR, limit=1)
    task(c, 2, team="a", gpus=8, runtime=100 * HOUR, limit=1)
    if earlier == "backing_off":
        c.pending[0] = replace(one, restart_count=1, eligible_at=NOW + 10)
    elif earlier == "old_attempt_stopping":
        c.pending[0] = replace(one, restart_count=1, previous_attempt_stopping=True)
    else:  # task 1 queued behind task 2 at first (a lower priority)
        c.pending[0] = replace(one, priority=-1)
    sim = Sim(c)
    first = sim.step(NOW)
    assert [(p.job_id, p.preemptor_id) for p in first.preemptions] == [(10, 2)]
    sim.running.pop(11)  # a's job 11 is cancelled: n1 comes free
    sim.nodes["n1"]["free"].extend(f"n1/{g}" for g in range(8))
    sim.pending[1] = replace(sim.pending[1], previous_attempt_stopping=False, priority=0)
    second = sim.step(NOW + 15)  # task 1 is back, ahead of task 2 in queue order
    assert verdict(second, 2).reason_code != LIMIT
    said = verdict(second, 1)
    assert said.reason_code == LIMIT  # the array's one slot is task 2's
    assert (
        "array 7 has 0 tasks running and 1 waiting for the jobs it preempted, its limit (%1) "
        "together"
    ) in said.message, said.message
    assert said.estimated_start >= NOW + 30 + 100 * HOUR  # after task 2's run
    for t in range(30, 300, 15):
        sim.step(NOW + t)
    assert 2 in sim.started and sim.started[2] <= NOW + 30  # when its victim stopped
    assert {w.node for w in sim.running[2].placement} == {"n0"}  # on its victim's GPUs
    assert sum(1 for r in sim.running.values() if r.array_id == 7) <= 1  # the limit holds


def test_a_preemptor_whose_claim_is_gone_keeps_no_slot():
    """A review's case: task 2 reclaims b's job 10 on n0 while task 1 backs off; n0 is
    then cordoned, and once job 10 has stopped (requeued, still naming task 2) task 2 has
    no target and waits for GPUs like any job. Its victim's link alone kept it the
    array's one slot, and task 1, which fits n2's free GPUs, was held pass after pass."""

    class Cordoned(Sim):
        def _nodes(self):
            return tuple(n for n in super()._nodes() if n.name != "n0" or self.now < NOW + 30)

    c = Cluster().node("n0").node("n1").node("n2", gpus=2)
    c.team("a", nominal=16, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 8}, started=NOW - 100, runtime=100 * HOUR)
    c.run(11, "a", on={"n1": 8}, started=NOW - 100, runtime=100 * HOUR, preemptible=False)
    one = task(c, 1, team="a", gpus=1, runtime=HOUR, limit=1)
    c.pending[0] = replace(one, restart_count=1, eligible_at=NOW + 10)
    task(c, 2, team="a", gpus=8, runtime=HOUR, limit=1)
    sim = Cordoned(c)
    for t in range(0, 600, 30):
        sim.now = NOW + t
        sim.step(NOW + t)
    assert 10 in sim.preempted
    assert 1 in sim.started and sim.started[1] <= NOW + 60


def test_a_claimant_admitted_in_the_pass_is_counted_once():
    """A review's case: array 7 (%2); tasks 3 and 4 reclaim b's jobs (600 s and 30 s of
    grace) while task 1 backs off. At +30 task 4 is admitted and task 3 still waits: task
    1 was told "1 task running and -1 ahead of it in the queue and 2 waiting for the jobs
    they preempted", the admitted claimant counted as both."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=24, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 8}, started=NOW - 100, runtime=100 * HOUR, grace=30.0)
    c.run(11, "b", on={"n1": 8}, started=NOW - 100, runtime=100 * HOUR, grace=600.0)
    c.run(12, "b", on={"n2": 8}, started=NOW - 100, runtime=100 * HOUR, preemptible=False)
    for i in (1, 3, 4):
        task(c, i, team="a", gpus=8, runtime=100 * HOUR)
    c.pending[0] = replace(c.pending[0], restart_count=1, eligible_at=NOW + 20)
    sim = Sim(c)
    assert sorted(preempted(sim.step(NOW))) == [10, 11]
    second = sim.step(NOW + 30)
    assert admitted(second) == [4]
    said = verdict(second, 1)
    assert said.reason_code == LIMIT
    assert (
        "array 7 has 1 task running and 1 waiting for the jobs it preempted, its limit (%2) "
        "together"
    ) in said.message, said.message


def test_a_kept_target_without_victims_keeps_no_slot():
    """A review's case: array 7 (%1); task 2 waits with a kept target for b's cancelled
    job 10 (it stops at +600) while task 1 backs off until +10. Its kept target alone
    kept the slot: idle until +600, while task 1 fitted n1's free GPUs from +30 and
    started only when task 2 ended. No victim's work is at stake: queue order holds."""

    class Cancelled(Sim):
        def _finish(self, now):
            super()._finish(now)
            self.pending.pop(10, None)  # a cancelled job does not come back

    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=16).team("b", nominal=16)
    c.run(10, "b", on={"n0": 8}, started=NOW - 100, runtime=100 * HOUR, stopping=True,
          stop_requested=NOW, grace=600.0)  # fmt: skip
    c.run(11, "b", on={"n1": 6}, started=NOW - 100, runtime=100 * HOUR, preemptible=False)
    one = task(c, 1, team="a", gpus=2, runtime=HOUR, limit=1)
    c.pending[0] = replace(one, restart_count=1, eligible_at=NOW + 10)
    task(c, 2, team="a", gpus=8, runtime=HOUR, limit=1)
    sim = Cancelled(c)
    sim.stop_at[10] = NOW + 600
    for t in range(0, 120, 30):
        sim.step(NOW + t)
    assert sim.started.get(1) == NOW + 30

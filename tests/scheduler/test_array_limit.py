"""A job array's `%N` limit: at most N of its tasks hold GPUs at once (`array_limit`)."""

from dataclasses import replace

import pytest

from scheduler import REASONS, schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, admitted, reasons, verdict

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

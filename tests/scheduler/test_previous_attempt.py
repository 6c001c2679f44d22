"""A requeued job whose previous attempt still stops waits (`previous_attempt`), set aside."""

from dataclasses import replace

import pytest

from scheduler import REASONS, schedule
from tests.scheduler.helpers import NOW, Cluster, admitted, make_job, reasons, verdict
from tests.scheduler.test_backoff import LATER
from tests.scheduler.test_backoff import SCENARIOS as BACKOFF_SCENARIOS

PREVIOUS = "previous_attempt"


def as_previous_attempt(scenario):
    """A scenario of test_backoff with its job in backoff requeued instead while its
    previous attempt still stops (eligible, but set aside the same way)."""
    c, config, expect, started = scenario()
    assert any(j.eligible_at > NOW for j in c.pending) or scenario.__name__.startswith("is_")
    c.pending = [
        replace(j, eligible_at=0.0, previous_attempt_stopping=True) if j.eligible_at > NOW else j
        for j in c.pending
    ]
    return c, config, {k: PREVIOUS if v == "backoff" else v for k, v in expect.items()}, started


def backoff_outranks_it():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=1, restarts=1, eligible_at=LATER, old_attempt=True)
    return c, {}, {1: "backoff"}, []


@pytest.mark.parametrize("scenario", BACKOFF_SCENARIOS, ids=lambda s: s.__name__)
def test_set_aside_as_a_job_in_its_backoff(scenario):
    """Only never_fits and no_nodes outrank it; it blocks, reserves, holds and preempts
    nothing, and costs no candidate slot."""
    c, config, expect, started = as_previous_attempt(scenario)
    plan = schedule(c.snapshot(**config))
    assert reasons(plan) == expect
    assert admitted(plan) == started
    assert plan.preemptions == ()
    assert plan.stats["reservations"] == 0


def test_backoff_outranks_it():
    c, config, expect, started = backoff_outranks_it()
    plan = schedule(c.snapshot(**config))
    assert (reasons(plan), admitted(plan)) == (expect, started)


def test_the_verdict_says_why_with_position_and_estimate():
    c = Cluster().node("n0")
    c.team("a", nominal=16)
    c.job(1, gpus=4, restarts=1, old_attempt=True)
    c.job(2, gpus=8, runtime=100)
    plan = schedule(c.snapshot())
    one = verdict(plan, 1)
    assert (one.reason_code, one.position) == ("previous_attempt", 1)
    assert one.message == (
        "needs 4 h100 GPUs; requeued, it waits for the workers of its previous attempt to stop "
        "before it is considered again"
    )
    assert one.estimated_start == NOW + 100  # after job 2, admitted now, ends
    assert admitted(plan) == [2]
    stats = plan.stats
    assert (stats["pending"], stats["previous_attempt"], stats["considered"]) == (2, 1, 2)


def test_without_explanations_the_verdict_is_the_fixed_summary():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.pending.append(make_job(1, gpus=8, restarts=1, old_attempt=True))
    v = verdict(schedule(c.snapshot(explain=False)), 1)
    assert (v.reason_code, v.message, v.estimated_start) == (
        "previous_attempt",
        REASONS["previous_attempt"],
        None,
    )

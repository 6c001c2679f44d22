"""A requeued job whose previous attempt still stops waits (`previous_attempt`), set aside."""

import pytest

from scheduler import REASONS, schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, admitted, make_job, reasons, verdict

LATER = NOW + 600


def waits_on_an_idle_cluster():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=4, restarts=1, old_attempt=True)
    return c, {}, {1: "previous_attempt"}, []


def never_fits_outranks_it():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.job(1, gpus=16, restarts=1, old_attempt=True)
    return c, {}, {1: "never_fits"}, []


def no_nodes_outranks_it():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=1, flavor="a100", restarts=1, old_attempt=True)
    return c, {}, {1: "no_nodes"}, []


def backoff_outranks_it():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=1, restarts=1, eligible_at=LATER, old_attempt=True)
    return c, {}, {1: "backoff"}, []


def blocks_nothing_under_strict_fifo():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=8, restarts=1, old_attempt=True)  # first in submit order
    c.job(2, gpus=8)
    return c, {"policy": "fifo"}, {1: "previous_attempt"}, [2]


def gets_no_reservation():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.run(10, on={"n0": 4}, started=NOW, runtime=HOUR)
    c.job(1, gpus=8, restarts=1, old_attempt=True)
    c.job(2, gpus=4, runtime=10 * HOUR)
    return c, {"policy": "fifo-backfill"}, {1: "previous_attempt"}, [2]


def preempts_nothing():
    c = Cluster().node("n0")
    c.team("a", nominal=8, cohort="k").team("b", nominal=0, cohort="k")
    c.run(10, "b", on={"n0": 8})  # b borrows all of a's quota
    c.job(1, "a", gpus=8, restarts=1, old_attempt=True)
    return c, {}, {1: "previous_attempt"}, []


def is_admitted_once_its_workers_stopped():
    c = Cluster().node("n0")
    c.team("a", nominal=8)
    c.job(1, gpus=4, restarts=1)
    return c, {}, {}, [1]


SCENARIOS = [
    waits_on_an_idle_cluster,
    never_fits_outranks_it,
    no_nodes_outranks_it,
    backoff_outranks_it,
    blocks_nothing_under_strict_fifo,
    gets_no_reservation,
    preempts_nothing,
    is_admitted_once_its_workers_stopped,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_previous_attempt_scenarios(scenario):
    c, config, expect, started = scenario()
    plan = schedule(c.snapshot(**config))
    assert reasons(plan) == expect
    assert admitted(plan) == started
    assert plan.preemptions == ()
    assert plan.stats["reservations"] == 0


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

"""Fair share: the team with the lowest weighted dominant share goes next."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Quota, accrue, decay, schedule
from scheduler.fairshare import LN2, historical_term, priority, weighted_share
from tests.scheduler.helpers import NOW, Cluster, admitted, examples

HALF_LIFE = 7 * 24 * 3600.0


def test_decay_halves_per_half_life():
    assert decay(100.0, HALF_LIFE, HALF_LIFE) == pytest.approx(50.0)
    assert decay(100.0, 3 * HALF_LIFE, HALF_LIFE) == pytest.approx(12.5)
    assert decay(100.0, 0.0, HALF_LIFE) == 100.0
    assert decay(100.0, -5.0, HALF_LIFE) == 100.0  # clock skew: no growth
    assert decay(100.0, 1e9, 0.0) == 100.0  # half-life 0 disables decay, as in Slurm


@settings(max_examples=examples(100))
@given(st.floats(0, 1e6), st.floats(0, 64), st.floats(0, 1e6), st.floats(0, 1e6))
def test_accrue_in_two_steps_equals_one(value, gpus, t1, t2):
    once = accrue(value, gpus, t1 + t2, HALF_LIFE)
    twice = accrue(accrue(value, gpus, t1, HALF_LIFE), gpus, t2, HALF_LIFE)
    assert twice == pytest.approx(once, rel=1e-9, abs=1e-6)


def test_steady_use_of_nominal_scores_one():
    forever = accrue(0.0, 8, 200 * HALF_LIFE, HALF_LIFE)
    assert forever == pytest.approx(8 * HALF_LIFE / LN2)
    assert historical_term(forever, 8, HALF_LIFE) == pytest.approx(1.0)
    assert accrue(10.0, 2, 5.0, 0.0) == 20.0  # no decay: plain GPU-seconds


def test_weighted_share():
    assert weighted_share([0.5, 0.25], 2.0) == 0.25
    assert weighted_share([], 1.0) == 0.0
    assert weighted_share([0.1], 0.0) == math.inf


def contest(*teams, free=4, jobs=None):
    """Teams compete for `free` GPUs on one node; each has 4-GPU jobs a..."""
    c = Cluster().node("n0", gpus=8).node("busy", gpus=64)
    if free < 8:
        c.run(99, "x", on={"n0": 8 - free})
    for name, kw in teams:
        c.team(name, **kw)
    return c


def fill_busy(c):
    """Team x (no quota, not competing) holds what the scenario left of node `busy`."""
    left = len(c.nodes["busy"]["free"])
    if left:
        c.run(98, "x", on={"busy": left})


def lower_current_share_first():
    c = contest(("a", {"nominal": 8}), ("b", {"nominal": 8}))
    c.run(10, "a", on={"busy": 4})
    c.job(1, "a", gpus=4)  # older, but a uses 4/8
    c.job(2, "b", gpus=4)
    return c, [2]


def weight_divides_share():
    c = contest(("a", {"nominal": 8, "weight": 4.0}), ("b", {"nominal": 8}))
    c.run(10, "a", on={"busy": 4})  # 0.5 / 4
    c.run(11, "b", on={"busy": 2})  # 0.25 / 1
    c.job(1, "b", gpus=4)
    c.job(2, "a", gpus=4)
    return c, [2]


def history_counts():
    c = contest(
        ("a", {"nominal": 8, "decayed": {"h100": 8 * HALF_LIFE / LN2}}), ("b", {"nominal": 8})
    )
    c.run(11, "b", on={"busy": 4})  # b: 0.5 now; a: 0 now but 1.0 from history
    c.job(1, "a", gpus=4)
    c.job(2, "b", gpus=4)
    return c, [2]


def dominant_flavor_decides():
    quotas = {"h100": Quota(8), "a100": Quota(8)}
    c = contest(("a", {"nominal": quotas}), ("b", {"nominal": quotas}))
    c.node("a100-0", flavor="a100")
    c.run(10, "a", on={"a100-0": 8}, flavor="a100")  # a: 1.0 of a100
    c.run(11, "b", on={"busy": 4})  # b: 0.5 of h100
    c.job(1, "a", gpus=4)
    c.job(2, "b", gpus=4)
    return c, [2]


def shares_recomputed_after_each_admission():
    c = contest(("a", {"nominal": 8}), ("b", {"nominal": 8}), free=8)
    for i in range(1, 5):
        c.job(i, "a", gpus=2)  # all older than b's
    for i in range(5, 9):
        c.job(i, "b", gpus=2)
    return c, [1, 5, 2, 6]


def zero_nominal_uses_cohort_nominal():
    c = contest(
        ("a", {"nominal": 0, "cohort": "c"}),
        ("b", {"nominal": 4, "cohort": "c"}),
        ("l", {"nominal": 12, "cohort": "c"}),
    )
    c.run(10, "a", on={"busy": 4})  # 4 / 16 (the cohort's nominal) = 0.25
    c.run(11, "b", on={"busy": 2})  # 2 / 4 = 0.5; both next jobs borrow
    c.job(1, "b", gpus=4)
    c.job(2, "a", gpus=4)
    return c, [2]


def fits_nominal_before_borrowing():
    c = contest(("a", {"nominal": 0, "cohort": "c"}), ("d", {"nominal": 12, "cohort": "c"}))
    c.run(10, "a", on={"busy": 2})  # a: 2 / 12 = 0.17, and its job would borrow
    c.run(11, "d", on={"busy": 6})  # d: 6 / 12 = 0.5, its job fits its nominal
    c.job(1, "a", gpus=4)
    c.job(2, "d", gpus=4)
    return c, [2]


def within_team_priority_then_submit_time():
    c = contest(("a", {"nominal": 8}), free=8)
    c.job(1, "a", gpus=4, priority=0)
    c.job(2, "a", gpus=4, priority=5)
    c.job(3, "a", gpus=4, priority=5)
    return c, [2, 3]


SCENARIOS = [
    lower_current_share_first,
    weight_divides_share,
    history_counts,
    dominant_flavor_decides,
    shares_recomputed_after_each_admission,
    zero_nominal_uses_cohort_nominal,
    fits_nominal_before_borrowing,
    within_team_priority_then_submit_time,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_fair_share_order(scenario):
    c, want = scenario()
    fill_busy(c)
    plan = schedule(c.snapshot(half_life=HALF_LIFE))
    assert admitted(plan) == want


def test_fifo_ignores_shares():
    c, _ = lower_current_share_first()
    fill_busy(c)
    assert admitted(schedule(c.snapshot(policy="fifo-backfill"))) == [1]
    assert NOW  # the scenarios use the fixed clock


DAY = 24 * 3600.0


def test_priority_adds_the_weighted_age_factor_to_the_fair_share_factor():
    assert priority(0.0, 0.0, 1.0, DAY) == 1.0  # an idle team's fresh job
    assert priority(1.0, 0.0, 1.0, DAY) == pytest.approx(0.5)  # at its share: 2^-1
    assert priority(1.0, DAY / 2, 1.0, DAY) == pytest.approx(1.0)
    assert priority(1.0, 10 * DAY, 1.0, DAY) == pytest.approx(1.5)  # full at max age
    assert priority(1.0, DAY, 0.0, DAY) == pytest.approx(0.5)  # weight 0: off
    assert priority(math.inf, 10 * DAY, 1.0, DAY) == -math.inf  # weight 0 team: last


def test_age_factor_lets_a_long_waiting_job_pass_a_team_below_its_share():
    # a uses 4 of 8 (fair-share factor 2^-0.5 = 0.71), b nothing (1.0): b's fresh job goes
    # first unless a's has waited long enough to make up the 0.29 difference.
    def pick(waited, **age):
        c = contest(("a", {"nominal": 8}), ("b", {"nominal": 8}))
        c.run(10, "a", on={"busy": 4})
        c.job(1, "a", gpus=4, submitted=NOW - waited)
        c.job(2, "b", gpus=4, submitted=NOW - 60)
        fill_busy(c)
        return admitted(schedule(c.snapshot(half_life=HALF_LIFE, **age)))

    assert pick(DAY, age_weight=0.0) == [2]
    assert pick(DAY, age_weight=1.0, max_age=2 * DAY) == [1]  # 0.71 + 0.5 > 1.0 + 0.0003
    assert pick(DAY / 4, age_weight=1.0, max_age=2 * DAY) == [2]  # 0.71 + 0.125 < 1.0

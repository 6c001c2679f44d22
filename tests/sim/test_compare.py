"""What-if arithmetic without Django: changing one setting, comparing two runs per team."""

from __future__ import annotations

import pytest

from scheduler import Quota, Team
from scheduler.sim.compare import apply_change, compare
from tests.sim.helpers import job, run


def teams():
    return (
        Team("a", 1.0, "c", {"gpu": Quota(8, None, 4)}),
        Team("b", 1.0, "c", {"gpu": Quota(8)}),
    )


def test_a_nominal_change_keeps_the_lending_limit_within_nominal():
    changed = {t.name: t for t in apply_change(teams(), "a", "nominal", 2, "gpu")}
    assert changed["a"].quotas["gpu"] == Quota(2, None, 2)
    assert changed["b"] == teams()[1]


def test_borrowing_limit_and_weight_changes():
    limited = {t.name: t for t in apply_change(teams(), "b", "borrowing_limit", 3, "gpu")}
    assert limited["b"].quotas["gpu"].borrowing_limit == 3
    unlimited = {t.name: t for t in apply_change(teams(), "b", "borrowing_limit", None, "gpu")}
    assert unlimited["b"].quotas["gpu"].borrowing_limit is None
    heavier = {t.name: t for t in apply_change(teams(), "a", "weight", 2.5)}
    assert heavier["a"].weight == 2.5 and heavier["a"].quotas == teams()[0].quotas


@pytest.mark.parametrize(
    "args",
    [
        ("a", "nominal", -1, "gpu"),
        ("a", "weight", 0, None),
        ("a", "nominal", 4, None),
        ("z", "weight", 1, None),
        ("a", "color", 1, None),
    ],
)
def test_bad_changes_are_refused(args):
    with pytest.raises(ValueError):
        apply_change(teams(), *args)


def test_a_borrowing_limit_on_a_flooding_team_shortens_the_others_waits():
    # Without preemption (fifo-backfill), b borrows a's idle quota for an hour
    # and a's jobs wait; with b's borrowing limit at 0 they start at once.
    jobs = [job(i, "b", at=0, duration=3600, gpus=8) for i in (1, 2)]
    jobs += [job(i, "a", at=60, duration=600, gpus=8) for i in (3, 4)]
    base = (Team("a", 1.0, "c", {"gpu": Quota(8)}), Team("b", 1.0, "c", {"gpu": Quota(8)}))
    changed = apply_change(base, "b", "borrowing_limit", 0, "gpu")
    _, before = run(jobs, nodes=2, teams=base, policy="fifo-backfill")
    _, after = run(jobs, nodes=2, teams=changed, policy="fifo-backfill")
    rows = {r["team"]: r for r in compare(before, after)}
    a, b = rows["a"]["mean_wait_s"], rows["b"]["mean_wait_s"]
    assert a["before"] == 3540 and a["after"] == 300  # its second job now waits only for its first
    assert a["delta"] == -3240
    assert b["after"] > b["before"]
    assert rows["a"]["jobs"] == 2
    assert [r["team"] for r in compare(before, after, teams=["a"])] == ["a"]

"""Adversarial reclaim and preemption scenarios (issue 13's guarantees, cases the
first tables did not cover): preemptors honoured in an order that differs from
the pass that made them, quota lent beyond the cluster's GPUs, multi-node
victims, heterogeneous nodes, several flavors, three-team cohorts.

Each scenario is a small cluster on the fixed clock; the multi-pass ones apply
every plan (tests.scheduler.helpers.Sim) and let grace periods elapse.
"""

from __future__ import annotations

from scheduler import schedule
from tests.scheduler.helpers import HOUR, Cluster, admitted, verdict

LONG = 100 * HOUR


# -- 2. one pass never lends and reclaims the same capacity -----------------------


def test_idle_quota_beyond_the_gpus_is_not_lent_onto_the_gpus_a_team_waits_for():
    """The cohort's quota (a 8, d 16) exceeds its GPUs: n1 runs team x, outside the
    cohort. b borrows d's idle quota; its new 8-GPU job would take n0, the only free
    node, which a's within-nominal job waits for in this pass: lent to b, a would
    reclaim b's older job 10 at once (one job admitted, another preempted, for nothing)."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c", decayed={"h100": 8 * 7 * 24 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("d", nominal=16, cohort="c")
    c.team("x", nominal=8)
    c.run(10, "b", on={"n2": 8}, runtime=LONG)
    c.run(11, "x", on={"n1": 8}, runtime=LONG)
    c.job(20, "b", gpus=8)
    c.job(1, "a", workers=2, gpus=8, priority=5)  # a's first job would borrow: b goes first
    c.job(2, "a", gpus=8)  # within a's nominal quota
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    assert admitted(plan) == [2]
    v = verdict(plan, 20)
    assert v.reason_code == "cohort_busy"
    assert "kept for teams within their nominal quota" in v.message

"""The policy registry and the FIFO reference policies."""

import pytest

from scheduler import POLICIES, get_policy, schedule
from tests.scheduler.helpers import Cluster, admitted, reasons


def busy():
    """One 8-GPU node, 4 GPUs busy for an hour; a 8-GPU job 1 blocked at the head."""
    c = Cluster().node("n0")
    c.team("a", nominal=64).team("b", nominal=2)
    c.run(10, on={"n0": 4})
    c.job(1, gpus=8)
    return c


def test_builtin_policies_are_registered():
    assert {"fifo", "fifo-backfill", "fairshare"} <= set(POLICIES)
    assert get_policy("fairshare").preemption
    assert not get_policy("fifo").preemption


def test_unknown_policy_fails_loudly():
    with pytest.raises(ValueError, match="unknown scheduling policy 'lottery'"):
        schedule(busy().snapshot(policy="lottery"))


def test_fifo_blocks_the_flavor_behind_its_head():
    c = busy()
    c.job(2, gpus=1, runtime=60)  # would fit and end long before
    c.job(3, gpus=1, flavor="a100")  # no a100 nodes: never blocks anything
    plan = schedule(c.snapshot(policy="fifo"))
    assert admitted(plan) == []
    assert reasons(plan) == {1: "no_capacity", 2: "fifo_blocked", 3: "no_nodes"}


def test_fifo_blocks_even_behind_a_quota_blocked_head():
    c = Cluster().node("n0")
    c.team("a", nominal=64).team("b", nominal=2)
    c.run(10, "b", on={"n0": 1})
    c.job(1, "b", gpus=2)
    c.job(2, "a", gpus=1)
    assert reasons(schedule(c.snapshot(policy="fifo"))) == {1: "quota", 2: "fifo_blocked"}
    assert admitted(schedule(c.snapshot(policy="fifo-backfill"))) == [2]


def test_fifo_skips_jobs_that_can_never_run():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.job(1, gpus=16)
    c.job(2, gpus=1)
    plan = schedule(c.snapshot(policy="fifo"))
    assert reasons(plan) == {1: "never_fits"}
    assert admitted(plan) == [2]


def test_fifo_is_submit_order_not_priority():
    c = busy()
    c.job(2, gpus=4, priority=100)
    assert reasons(schedule(c.snapshot(policy="fifo")))[2] == "fifo_blocked"
    assert admitted(schedule(c.snapshot(policy="fairshare"))) == [2]


def test_fifo_backfill_lets_a_short_job_pass():
    c = busy()
    c.job(2, gpus=4, runtime=60)
    plan = schedule(c.snapshot(policy="fifo-backfill"))
    assert admitted(plan) == [2]
    assert reasons(plan) == {1: "no_capacity"}

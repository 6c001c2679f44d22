"""scheduler.capacity: the largest gang a flavor's nodes can host, as the pass judges it."""

from __future__ import annotations

import pytest

from scheduler import schedule
from scheduler.capacity import largest_gang, why_too_big
from tests.scheduler.helpers import Cluster, admitted, make_node


@pytest.mark.parametrize(
    ("nodes", "per_worker", "expected"),
    [
        # (name, GPUs, block) -> (workers, domain, nodes taking a worker, largest node)
        ([("a", 8, "b1"), ("b", 8, "b1"), ("c", 8, "b2")], 8, (2, "b1", 2, 8)),
        ([("a", 8, "b1"), ("b", 8, "b2"), ("c", 8, "b2")], 8, (2, "b2", 2, 8)),
        ([("a", 8, "b1"), ("b", 4, "b1"), ("c", 8, "b2")], 4, (3, "b1", 2, 8)),
        ([("a", 8, "b1"), ("b", 4, "b1")], 8, (1, "b1", 1, 8)),
        ([("a", 4, "b1")], 8, (0, "b1", 0, 4)),
    ],
)
def test_the_best_domain_sets_the_limit(nodes, per_worker, expected):
    limit = largest_gang([make_node(n, g, block=b) for n, g, b in nodes], per_worker, "block")
    assert (limit.workers, limit.domain, limit.nodes, limit.largest_node) == expected
    assert limit.kind == "block"


def test_without_block_labels_racks_bound_the_gang():
    nodes = [make_node("a", rack="r1", block=""), make_node("b", rack="r2", block="")]
    limit = largest_gang(nodes, 8, "block")
    assert (limit.kind, limit.workers, limit.domain) == ("rack", 1, "r1")
    assert largest_gang([], 8, "block") is None


def test_the_refusal_names_the_limit_and_why():
    limit = largest_gang([make_node("a", block="b1"), make_node("b", block="b1")], 8, "block")
    assert why_too_big(limit, 2, "h100") is None
    why = why_too_big(limit, 3, "h100")
    assert why.startswith("The largest gang of 8-GPU workers the h100 nodes can host is 2 workers")
    assert "inside one block" in why and "block b1" in why and "on 2 nodes" in why


@pytest.mark.parametrize("per_worker", [2, 4, 8])
def test_the_pass_admits_the_limit_and_calls_one_more_never_fits(per_worker):
    c = Cluster().team("a", nominal=1000)
    c.node("a", block="b1").node("b", gpus=4, block="b1").node("c", block="b2")
    limit = largest_gang(c.snapshot().nodes, per_worker, "block")
    c.job(1, workers=limit.workers, gpus=per_worker)
    c.job(2, workers=limit.workers + 1, gpus=per_worker)

    plan = schedule(c.snapshot())

    assert admitted(plan) == [1]
    assert {v.job_id: v.reason_code for v in plan.verdicts} == {2: "never_fits"}

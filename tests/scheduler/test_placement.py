"""Gang placement: all or nothing, best-fit on one node, else fewest nodes in one domain."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import schedule
from scheduler.index import FreeIndex
from scheduler.placement import DOMAIN, NODE, choose
from tests.scheduler.helpers import Cluster, admitted, examples, nodes_of, reasons


def roomy_team(c):
    return c.team("a", nominal=1000)


def best_fit_single_node():
    c = roomy_team(Cluster().node("n0").node("n1").node("n2"))
    c.run(10, on={"n1": 4})
    c.run(11, on={"n2": 6})
    c.job(1, gpus=2)  # n2 has exactly 2 left
    c.job(2, gpus=3)  # n1 has 4: the fewest that still fit
    return c, {1: ["n2"], 2: ["n1"]}


def whole_gang_on_one_node_when_it_fits():
    c = roomy_team(Cluster().node("n0").node("n1"))
    c.run(10, on={"n1": 4})
    c.job(1, workers=2, gpus=2)
    return c, {1: ["n1", "n1"]}


def fewest_nodes_in_one_block():
    c = roomy_team(Cluster())
    c.node("n0", block="b0").node("n1", block="b0")
    for i in range(2, 6):
        c.node(f"n{i}", block="b1")
    for i in range(2, 6):
        c.run(10 + i, on={f"n{i}": 4})
    c.job(1, workers=4, gpus=4)  # b0: 2 nodes; b1: 4 nodes
    return c, {1: ["n0", "n0", "n1", "n1"]}


def least_fragmentation_between_equal_blocks():
    c = roomy_team(Cluster())
    c.node("n0", block="b0").node("n1", block="b0").node("n2", block="b0")
    c.node("n3", block="b1").node("n4", block="b1")
    c.job(1, workers=2, gpus=8)  # both take 2 nodes; b1 has fewer free GPUs left over
    return c, {1: ["n3", "n4"]}


def last_node_is_best_fit():
    c = roomy_team(Cluster())
    c.node("n0").node("n1").node("n2")
    c.run(10, on={"n1": 6})  # n1 has 2 free, n2 has 8
    c.job(1, workers=5, gpus=2)  # n0 (4 workers) then the smallest node for 1 more: n1
    return c, {1: ["n0", "n0", "n0", "n0", "n1"]}


def falls_back_to_racks_without_block_labels():
    c = roomy_team(Cluster())
    c.node("n0", block="", rack="r0").node("n1", block="", rack="r1").node(
        "n2", block="", rack="r1"
    )
    c.job(1, workers=2, gpus=8)
    return c, {1: ["n1", "n2"]}


def worker_never_spans_nodes():
    c = roomy_team(Cluster().node("n0").node("n1").node("n2"))
    for i in range(3):
        c.run(10 + i, on={f"n{i}": 4})
    c.job(1, workers=3, gpus=3)  # one worker per node: 4 // 3 = 1
    return c, {1: ["n0", "n1", "n2"]}


PLACEMENTS = [
    best_fit_single_node,
    whole_gang_on_one_node_when_it_fits,
    fewest_nodes_in_one_block,
    least_fragmentation_between_equal_blocks,
    last_node_is_best_fit,
    falls_back_to_racks_without_block_labels,
    worker_never_spans_nodes,
]


@pytest.mark.parametrize("scenario", PLACEMENTS, ids=lambda s: s.__name__)
def test_placement_scenarios(scenario):
    c, expect = scenario()
    plan = schedule(c.snapshot())
    for job_id, nodes in expect.items():
        assert job_id in admitted(plan), reasons(plan)
        assert nodes_of(plan, job_id) == nodes


def blocked_by_topology():
    c = roomy_team(Cluster().node("n0", block="b0").node("n1", block="b1").node("n2", block="b1"))
    c.run(10, on={"n2": 8})
    c.job(1, workers=2, gpus=8)  # 16 free, one free node per block
    return c, "topology"


def racks_when_asked_for_racks():
    c = roomy_team(Cluster().node("n0", rack="r0").node("n1", rack="r1").node("n2", rack="r1"))
    c.run(10, on={"n2": 8})
    c.job(1, workers=2, gpus=8)
    return c, "topology"


def fragmented_free_gpus():
    c = roomy_team(Cluster().nodes_(4))
    for i in range(4):
        c.run(10 + i, on={f"n{i}": 6})
    c.job(1, gpus=8)  # 8 free, 2 per node
    return c, "fragmented"


def worker_slots_too_small():
    c = roomy_team(Cluster().node("n0").node("n1"))
    c.run(10, on={"n0": 4})
    c.run(11, on={"n1": 6})
    c.job(1, workers=2, gpus=3)  # 6 free but only n0 holds a 3-GPU worker
    return c, "fragmented"


def not_enough_free():
    c = roomy_team(Cluster().node("n0"))
    c.run(10, on={"n0": 4})
    c.job(1, gpus=8)
    return c, "no_capacity"


def worker_bigger_than_any_node():
    c = roomy_team(Cluster().node("n0"))
    c.job(1, gpus=16)
    return c, "never_fits"


def gang_bigger_than_any_block():
    c = roomy_team(Cluster().nodes_(4, per_block=2))
    c.job(1, workers=3, gpus=8)
    return c, "never_fits"


def no_nodes_of_its_flavor():
    c = roomy_team(Cluster().node("n0"))
    c.job(1, gpus=1, flavor="a100")
    return c, "no_nodes"


WAITS = [
    blocked_by_topology,
    fragmented_free_gpus,
    worker_slots_too_small,
    not_enough_free,
    worker_bigger_than_any_node,
    gang_bigger_than_any_block,
    no_nodes_of_its_flavor,
]


@pytest.mark.parametrize("scenario", WAITS, ids=lambda s: s.__name__)
def test_wait_scenarios(scenario):
    c, code = scenario()
    plan = schedule(c.snapshot(backfill=False))
    assert reasons(plan) == {1: code}


def test_rack_topology_key():
    c, code = racks_when_asked_for_racks()
    assert reasons(schedule(c.snapshot(topology_key="rack"))) == {1: code}
    # The same nodes all share block "b1": with blocks the gang fits.
    assert admitted(schedule(c.snapshot(topology_key="block"))) == [1]


def test_admission_uses_exactly_the_free_gpus_it_needs():
    c = roomy_team(Cluster().node("n0").node("n1"))
    c.run(10, on={"n0": 2})
    c.job(1, workers=2, gpus=6)
    (adm,) = schedule(c.snapshot()).admissions
    assert [w.rank for w in adm.placement] == [0, 1]
    assert sorted(w.gpus for w in adm.placement) == [
        ("n0/2", "n0/3", "n0/4", "n0/5", "n0/6", "n0/7"),
        ("n1/0", "n1/1", "n1/2", "n1/3", "n1/4", "n1/5"),
    ]


# -- the index against brute force ------------------------------------------


def brute_best_node(free, need):
    fits = [(c, i) for i, c in enumerate(free) if c >= need]
    return min(fits)[1] if fits else -1


def brute_domain_slots(free, dom, per_worker):
    slots = {}
    for c, d in zip(free, dom, strict=True):
        slots[d] = slots.get(d, 0) + c // per_worker
    return slots


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(-8, 8)), max_size=40),
)
def test_index_matches_brute_force(nodes, moves):
    free = [c for c, _ in nodes]
    dom = [d for _, d in nodes]
    index = FreeIndex(free, dom, 4, 8)
    for i, k in moves:
        i %= len(free)
        if k < 0 and free[i] >= -k:
            index.take(i, -k)
            free[i] += k
        elif 0 < k <= 8 - free[i]:
            index.give(i, k)
            free[i] += k
        assert index.free == free and index.total == sum(free)
        for need in range(1, 9):
            assert index.best_node(need) == brute_best_node(free, need)
            assert [s[need] for s in index.dslots] == [
                brute_domain_slots(free, dom, need).get(d, 0) for d in range(4)
            ]
        assert index.most_free() == max(free)


def test_choose_prefers_one_node_then_one_domain():
    index = FreeIndex([8, 8, 4, 4], [0, 0, 1, 1], 2, 8)
    assert choose(index, 1, 4) == (NODE, 2)
    assert choose(index, 2, 4) == (NODE, 0)  # 8 GPUs: one node
    assert choose(index, 2, 8) == (DOMAIN, 0)
    assert choose(index, 3, 8) is None
    assert choose(index, 2, 16) is None

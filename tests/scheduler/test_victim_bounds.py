"""The victim search's lower bounds prune targets, never change the choice.

On a fragmented cluster (every node holding small borrowed jobs) the placement-aware
victim search walked every node for a one-node target and every node of every block
for a gang (0.1-0.2 s per preemptor on 1,000 nodes; docs/benchmarks.md).
`_Search.bound` and `_Search.domain_bound` now bound what any victims on a node or in
a block can cost, and the search stops at the first bound dearer than the targets it
keeps. The property: with the bounds switched to the trivial one (every target
searched, as before), every plan is the same.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import preemption, schedule
from scheduler.preemption import _lost_freeing
from tests.scheduler.helpers import HOUR, NOW, Cluster, examples, preempted, verdict

LONG = 100 * HOUR
NOTHING = (False, -math.inf, 0.0, 0), ()  # below every cost and rank


def _trivial(search, *args):
    """A bound that prunes nothing: every target is searched."""
    return NOTHING


@st.composite
def fragmented(draw):
    """A cohort where borrowers hold small jobs spread over every node (some over two
    nodes), the lender's own lower-priority jobs among them, and the lender's gangs
    within its nominal quota that need victims on several nodes; node sizes mixed,
    many equal ages (ties)."""
    count = draw(st.integers(14, 40))  # more candidates than the exact search takes
    per_block = draw(st.sampled_from([4, 8, 40]))
    caps = [draw(st.sampled_from([4, 8, 8])) for _ in range(count)]
    c = Cluster()
    for i, cap in enumerate(caps):
        b = f"b{i // per_block}"
        c.node(f"n{i}", gpus=cap, rack=b.replace("b", "r"), block=b)
    total = sum(caps)
    c.team("a", nominal=total // 2, cohort="c").team("b", nominal=total // 4, cohort="c")
    c.team("d", nominal=total - total // 2 - total // 4, cohort="c")
    left = {f"n{i}": cap - draw(st.integers(0, 1)) for i, cap in enumerate(caps)}
    jid = 1000
    for i in range(count):
        name = f"n{i}"
        while left[name] > 0:
            k = min(left[name], draw(st.sampled_from([1, 1, 2, 4])))
            on = {name: k}
            other = f"n{(i + 1) % count}"
            if draw(st.integers(0, 5)) == 0 and left[other] >= k and other != name:
                on[other] = k  # a gang of two workers over two nodes
                left[other] -= k
            c.run(
                jid,
                draw(st.sampled_from(["b", "b", "d", "a"])),
                on=on,
                per_worker=k,
                started=NOW - draw(st.sampled_from([0, 300, 300, 600, 3600, 7200])),
                checkpointed=draw(st.sampled_from([None, None, NOW - 100])),
                priority=draw(st.integers(0, 1)),
                runtime=LONG,
                preemptible=draw(st.integers(0, 19)) > 0,
            )
            jid += 1
            left[name] -= k
    shapes = [(1, 8), (2, 8), (1, 4), (3, 4), (4, 2), (2, 1)]
    for j in range(draw(st.integers(1, 4))):
        workers, per = draw(st.sampled_from(shapes))
        c.job(
            j + 1, "a", workers=workers, gpus=per, priority=draw(st.integers(0, 2)),
            runtime=LONG, submitted=NOW - 60 * j,
        )  # fmt: skip
    return c.snapshot()


def _plan_key(plan):
    return (plan.admissions, plan.preemptions, plan.verdicts, plan.reservations)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(fragmented())
def test_the_bounds_never_change_a_plan(snap):
    bounded = schedule(snap)
    with_trivial = {"bound": _trivial, "domain_bound": _trivial}
    saved = {name: getattr(preemption._Search, name) for name in with_trivial}
    try:
        for name, fn in with_trivial.items():
            setattr(preemption._Search, name, fn)
        searched = schedule(snap)
    finally:
        for name, fn in saved.items():
            setattr(preemption._Search, name, fn)
    assert _plan_key(bounded) == _plan_key(searched)


def test_a_node_fragmented_everywhere_still_gets_its_cheapest_target():
    """40 nodes, each with eight 1-GPU jobs of a borrower; one node's jobs started last.
    The lender's 8-GPU job preempts exactly those (the least work lost), having walked
    far fewer nodes than 40 (the bound of every other node is dearer)."""
    c = Cluster().nodes_(40, gpus=8)
    c.team("a", nominal=160, cohort="c").team("b", nominal=160, cohort="c")
    jid = 100
    for i in range(40):
        for _ in range(8):
            age = 60 if i == 17 else 3600 + 60 * i
            c.run(jid, "b", on={f"n{i}": 1}, started=NOW - age, runtime=LONG)
            jid += 1
    c.job(1, "a", gpus=8, runtime=LONG)
    walked = []
    walk = preemption._Search.walk

    def counting(self, node, *args):
        walked.append(node)
        return walk(self, node, *args)

    preemption._Search.walk = counting
    try:
        plan = schedule(c.snapshot())
    finally:
        preemption._Search.walk = walk
    assert sorted(preempted(plan)) == list(range(100 + 17 * 8, 100 + 18 * 8))
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    assert len(walked) < 10


def test_the_work_lost_bound_is_a_fractional_cover():
    per = [(10.0, 1), (20.0, 2), (50.0, 4)]  # (work lost per GPU, GPUs here), least first
    assert _lost_freeing(per, 0) == 0.0
    assert math.isclose(_lost_freeing(per, 1), 10.0)
    assert math.isclose(_lost_freeing(per, 2), 30.0)
    assert math.isclose(_lost_freeing(per, 4), 10.0 + 40.0 + 50.0)  # half of the last job
    assert _lost_freeing(per, 3) <= 10.0 + 40.0  # never above the exact sum (float shave)

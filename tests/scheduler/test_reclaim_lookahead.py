"""Two teams within their nominal quota reclaim in the same pass (issue 13, defect 1:
"victims are chosen for a concrete target placement, so that after they stop the gang
fits"). Each preemptor used to take its cheapest target regardless of the jobs after it
in the pass: a 1x8 job took the one node a later 2x8 gang of another team needed, and
the gang then had no victim set for as long as the borrower's jobs ran (a fifth
tester's case). A reclaim's target now leaves later within-nominal jobs of its cohort a
place they can reclaim when another target does (scheduler.preemption.choose,
_spoiled); when none does, it keeps its own.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler import preemption, schedule
from scheduler.model import Budget
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    make_job,
    preempted,
    reasons,
    verdict,
)

GRACE = 30.0


def _three_nodes(
    young: str = "n0", stopping: bool = False, ages: dict | None = None, lent: int = 0
) -> Cluster:
    """d (nominal 8), g (nominal 16) and borrower b (nominal `lent`) in cohort c; n0 and
    n1 in block b0, n2 in block b1; b runs 24 preemptible 1-GPU jobs, those on `young`
    started a minute ago (the cheapest victims), the others an hour ago (or as old as
    `ages` says, node -> seconds); with `stopping`, the last GPU of each node holds a
    job of b's already stopping with an hour's grace."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0")
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=8, block="b1", rack="r1")
    c.team("d", nominal=8, cohort="c").team("g", nominal=16, cohort="c")
    c.team("b", nominal=lent, cohort="c")
    i = 100
    for node in ("n0", "n1", "n2"):
        age = (ages or {}).get(node, 60 if node == young else HOUR)
        for _ in range(7 if stopping else 8):
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
        if stopping:
            c.run(i, "b", on={node: 1}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
                  grace=HOUR, stop_requested=NOW)  # fmt: skip
            i += 1
    return c


def _run(c: Cluster, passes: int = 6) -> Sim:
    sim = Sim(c, preemption=True)
    for step in range(passes):  # passes a grace period apart
        sim.step(NOW + GRACE * step)
    return sim


def test_a_single_node_reclaim_leaves_a_later_gang_its_block():
    c = _three_nodes()
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    by = {}
    for p in plan.preemptions:
        by.setdefault(p.preemptor_id, set()).add(p.job_id)
    assert by[1] == set(range(116, 124))  # n2's jobs: the block b0 is left to the gang
    assert by[2] == set(range(100, 116))  # n0 and n1
    assert {r.job_id: sorted(n for n, _ in r.nodes) for r in plan.reservations} == {
        1: ["n2"],
        2: ["n0", "n1"],
    }
    sim = _run(c)
    assert sim.started[1] <= NOW + 2 * GRACE
    assert sim.started[2] <= NOW + 2 * GRACE


def test_the_gang_first_is_as_it_was():
    c = _three_nodes()
    c.job(2, "g", workers=2, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(1, "d", workers=1, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    sim = _run(c)
    assert sim.started[1] <= NOW + 2 * GRACE and sim.started[2] <= NOW + 2 * GRACE


def test_alone_it_takes_the_cheapest_target():
    """No later job within nominal: the cheapest node, as before."""
    c = _three_nodes()
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    assert sorted(preempted(plan)) == list(range(100, 108))  # n0's young jobs


def test_when_no_target_spares_the_gang_the_first_keeps_its_own():
    """Only block b0 (two nodes; the quotas promise more than the cluster has): the 1x8
    job and the 2x8 gang cannot both have a place; the job considered first reclaims as
    it would alone."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0")
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.team("d", nominal=8, cohort="c").team("g", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c")
    for i, node in enumerate(("n0",) * 8 + ("n1",) * 8):
        age = 60 if node == "n0" else HOUR
        c.run(100 + i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    assert sorted(n for r in plan.reservations if r.job_id == 1 for n, _ in r.nodes) == ["n0"]
    assert sorted(p.job_id for p in plan.preemptions) == list(range(100, 108))


def test_a_later_whole_node_job_keeps_the_one_node_it_can_reclaim_whole():
    """Single workers too: d's 1x4 job would reclaim 4 young 1-GPU jobs on n0, the only
    node that g's 1x8 job can reclaim whole (n1 holds 4 GPUs of lender c's jobs within
    its nominal quota); n1's 4 borrowed GPUs hold d's job as well."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0")
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.team("d", nominal=4, cohort="c").team("g", nominal=8, cohort="c")
    c.team("c", nominal=4, cohort="c").team("b", nominal=0, cohort="c")
    for i in range(8):
        c.run(100 + i, "b", on={"n0": 1}, started=NOW - 60, runtime=100 * HOUR)
    for i in range(4):
        c.run(110 + i, "b", on={"n1": 1}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(120, "c", on={"n1": 4}, started=NOW - HOUR, runtime=100 * HOUR)
    c.job(1, "d", workers=1, gpus=4, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=1, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    victims = {p.job_id: p.preemptor_id for p in plan.preemptions}
    assert {j for j, by in victims.items() if by == 1} == {110, 111, 112, 113}
    assert {j for j, by in victims.items() if by == 2} == set(range(100, 108))
    sim = _run(c)
    assert sim.started[1] <= NOW + 2 * GRACE and sim.started[2] <= NOW + 2 * GRACE
    assert verdict(schedule(c.snapshot()), 2).reason_code == "waiting_for_preemption"


# -- property: two within-nominal jobs of one pass both reclaim when both can be placed ----


def _jointly_placeable(domains: list[list[str]], shapes: list[tuple[int, int]]) -> bool:
    """Whether the shapes (workers, GPUs each) fit the empty 8-GPU nodes together: each
    gang's workers in one domain (a single worker anywhere); brute force."""
    free = {n: 8 for nodes in domains for n in nodes}
    return _place(free, domains, shapes, 0)


def _place(free: dict, domains: list[list[str]], shapes: list, i: int) -> bool:
    if i == len(shapes):
        return True
    w, g = shapes[i]
    groups = domains if w > 1 else [[n for nodes in domains for n in nodes]]
    return any(_workers(free, domains, shapes, i, nodes, w, g, 0) for nodes in groups)


def _workers(free, domains, shapes, i, nodes, left, g, at) -> bool:
    """Place `left` more workers of shape i on nodes[at:], then the next shapes."""
    if left == 0:
        return _place(free, domains, shapes, i + 1)
    for j in range(at, len(nodes)):
        n = nodes[j]
        if free[n] >= g:
            free[n] -= g
            found = _workers(free, domains, shapes, i, nodes, left - 1, g, j)
            free[n] += g
            if found:
                return True
    return False


def _filled(draw, most: int) -> tuple[Cluster, list[list[str]]]:
    """Borrower b's preemptible jobs of mixed sizes and ages fill 3 to `most` 8-GPU nodes
    in 1-2 blocks; return the cluster and its blocks' nodes."""
    blocks = draw(st.integers(1, 2))
    count = draw(st.integers(3, most))
    c = Cluster()
    domains: list[list[str]] = [[] for _ in range(blocks)]
    for i in range(count):
        b = draw(st.integers(0, blocks - 1))
        c.node(f"n{i}", gpus=8, block=f"b{b}", rack=f"r{b}")
        domains[b].append(f"n{i}")
    domains = [d for d in domains if d]
    ids = iter(range(100, 1000))
    for i in range(count):
        left = 8
        while left:
            k = min(left, draw(st.sampled_from([1, 2, 4])))
            age = draw(st.integers(60, 5 * 3600))
            c.run(next(ids), "b", on={f"n{i}": k}, started=NOW - age, runtime=100 * HOUR)
            left -= k
    return c, domains


@st.composite
def two_reclaims(draw):
    """Borrower b fills 3-5 nodes in 1-2 blocks with preemptible jobs of mixed sizes and
    ages; d and g, within their nominal quota (their job's size), each submit one job in
    the same pass."""
    c, domains = _filled(draw, most=5)
    shapes = [draw(st.sampled_from([(1, 4), (1, 8), (2, 4), (2, 8)])) for _ in range(2)]
    assume(_jointly_placeable(domains, shapes))
    c.team("d", nominal=shapes[0][0] * shapes[0][1], cohort="c")
    c.team("g", nominal=shapes[1][0] * shapes[1][1], cohort="c")
    c.team("b", nominal=0, cohort="c")
    first = draw(st.booleans())
    for job_id, team, (w, g) in ((1, "d", shapes[0]), (2, "g", shapes[1])):
        at = NOW if (job_id == 1) == first else NOW + 1
        c.job(job_id, team, workers=w, gpus=g, submitted=at, runtime=100 * HOUR)
    return c


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_reclaims())
def test_both_reclaims_start_within_a_grace_period_when_both_can_be_placed(c):
    _all_start_within_two_grace_periods(c, {1, 2})


def _all_start_within_two_grace_periods(c: Cluster, jobs: set[int]) -> None:
    sim = Sim(c, preemption=True)
    plans = [sim.step(NOW + GRACE * step) for step in range(4)]
    assert set(sim.started) >= jobs, [reasons(plan) for plan in plans]
    assert max(sim.started[j] for j in jobs) <= NOW + 2 * GRACE


def test_the_second_search_leaves_the_avoided_nodes_stops_alone():
    """A review's case: each node also holds one GPU of a job already stopping with an
    hour's grace. The second search hid n0's free GPUs, and the earliest-stop placement
    of its target (on n2, beside a late stop) took n0's late spare GPU from a free count
    of 0: the pass raised instead of returning a plan."""
    c = _three_nodes(stopping=True)
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    targets = {r.job_id: sorted(n for n, _ in r.nodes) for r in plan.reservations}
    assert targets == {1: ["n2"], 2: ["n0", "n1"]}


def _four_nodes(with_borrower: bool) -> Cluster:
    """d and e (1x8, nominal 8 each) and g (2x8, nominal 16) reclaim from b's 1-GPU jobs
    on two blocks of two nodes; y, within nominal once its stopping job has stopped, may
    have a 1-GPU job ordered first, whose quota question fills Pass.reclaimable's cache
    for d, e and g before any preemption."""
    c = Cluster()
    for name, block in (("n0", "b0"), ("n1", "b0"), ("n2", "b1"), ("n3", "b1")):
        c.node(name, gpus=8, block=block, rack=block)
    c.team("d", nominal=8, cohort="c").team("e", nominal=8, cohort="c")
    c.team("g", nominal=16, cohort="c").team("b", nominal=0, cohort="c")
    c.team("h", nominal=4, cohort="c").team("x", nominal=0, cohort="c")
    i = 100
    for node, age in (("n0", 60), ("n1", HOUR), ("n2", 120), ("n3", HOUR)):
        for _ in range(8):
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.node("n4", gpus=1, block="b2", rack="r2")
    c.team("y", nominal=1, cohort="c")
    c.run(50, "y", on={"n4": 1}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
          grace=HOUR, stop_requested=NOW)  # fmt: skip
    if with_borrower:
        c.job(9, "y", workers=1, gpus=1, submitted=NOW - 10 * 24 * HOUR, runtime=100 * HOUR)
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "e", workers=1, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    c.job(3, "g", workers=2, gpus=8, submitted=NOW + 2, runtime=100 * HOUR)
    return c


def test_what_a_later_job_may_reclaim_is_asked_as_the_pass_stands():
    """A review's case: with y's job considered first, the look-ahead read the cached
    figure, which still counted n0's jobs (d's victims) as g's to reclaim, so e took n2
    and g's gang had no block left; without y's job all three reclaimed."""
    for with_borrower in (False, True):
        plan = schedule(_four_nodes(with_borrower).snapshot(age_weight=1.0))
        targets = {r.job_id: sorted(n for n, _ in r.nodes) for r in plan.reservations}
        assert {j: t for j, t in targets.items() if j in (1, 2, 3)} == {
            1: ["n0"],
            2: ["n1"],
            3: ["n2", "n3"],
        }, (with_borrower, targets)


def test_a_later_job_over_its_budget_keeps_no_place():
    """A review's case: g's gang is over its GPU-hour budget, so it takes nothing in this
    pass (no reservation, no preemption); the look-ahead still kept it a block, and d
    preempted n2's hour-old jobs instead of n0's minute-old ones."""
    c = _three_nodes()
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    snap = replace(c.snapshot(), budgets=(Budget("g", "h100", limit=10.0, used=10.0),))
    plan = schedule(snap)
    assert reasons(plan)[2] == "budget_exhausted"
    assert sorted(preempted(plan)) == list(range(100, 108))  # n0's, its cheapest


def test_a_place_that_jobs_ending_first_make_counts():
    """g's gang has block b1 too: n2's 4-GPU job reaches its max runtime in 10 s and
    n2's and n3's other GPUs hold b's hour-old jobs. d's 1x8 job takes n0 (its youngest
    victims) and the gang b1; counted without the ending GPUs, b1 held one worker and d
    was sent to dearer victims (a review's concern)."""
    c = Cluster()
    for name, block in (("n0", "b0"), ("n1", "b0"), ("n2", "b1"), ("n3", "b1")):
        c.node(name, gpus=8, block=block, rack=block)
    c.team("d", nominal=8, cohort="c").team("g", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c")
    i = 100
    for node, count, age in (("n0", 8, 60), ("n1", 8, HOUR), ("n2", 4, HOUR), ("n3", 8, HOUR)):
        for _ in range(count):
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.run(90, "b", on={"n2": 4}, started=NOW - HOUR + 10, runtime=HOUR)  # ends in 10 s
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    targets = {r.job_id: sorted(n for n, _ in r.nodes) for r in plan.reservations}
    assert targets == {1: ["n0"], 2: ["n2", "n3"]}, targets
    sim = _run(c)
    assert max(sim.started[1], sim.started[2]) <= NOW + 2 * GRACE


# -- a place the later job could not take anyway is not kept (a sixth tester's cases) ----


def test_a_place_the_later_gang_cannot_reclaim_after_any_target_is_not_kept():
    """Blocks as in _three_nodes (n1's jobs two minutes old), but b's nominal quota is 8:
    it borrows 16, and once d's eight victims stop only 8, so g may take only one node's
    jobs and its 2x8 gang can reclaim block b0 after no target of d's. The look-ahead
    sent d to n2's hour-old jobs (28,800 GPU-s lost instead of 480) for nothing; d keeps
    its cheapest target."""
    c = _three_nodes(ages={"n1": 120}, lent=8)
    c.job(1, "d", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot())
    assert verdict(plan, 2).reason_code != "waiting_for_preemption"
    assert sorted(preempted(plan)) == list(range(100, 108))  # n0's minute-old jobs


def test_no_hours_wait_for_a_place_nobody_can_use():
    """Racks: t2's 1x8 job and t1's 2x4 gang (whole on one node); borrower b (nominal 4)
    holds nA with two minute-old 4-GPU jobs, nB with an hour-old one and a job stopping
    for an hour. Once t2's victims stop b borrows 4, and t1 may take only one of nA's
    jobs: the gang cannot reclaim after any target. t2 was sent to nB and waited an
    hour for the stopping job; it reclaims nA and starts within two passes."""
    c = Cluster()
    c.node("nA", gpus=8, block="b0", rack="r0")
    c.node("nB", gpus=8, block="b0", rack="r1")
    c.team("t2", nominal=8, cohort="c").team("t1", nominal=8, cohort="c")
    c.team("b", nominal=4, cohort="c")
    c.run(100, "b", on={"nA": 4}, started=NOW - 60, runtime=100 * HOUR)
    c.run(101, "b", on={"nA": 4}, started=NOW - 60, runtime=100 * HOUR)
    c.run(102, "b", on={"nB": 4}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(103, "b", on={"nB": 4}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
          grace=HOUR, stop_requested=NOW)  # fmt: skip
    c.job(3, "t2", workers=1, gpus=8, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "t1", workers=2, gpus=4, submitted=NOW + 1, runtime=100 * HOUR)
    plan = schedule(c.snapshot(topology_key="rack"))
    assert sorted(preempted(plan)) == [100, 101]
    sim = Sim(c, preemption=True, topology_key="rack")
    for step in range(6):
        sim.step(NOW + GRACE * step)
    assert sim.started[3] <= NOW + 2 * GRACE and 2 not in sim.started


def test_a_preemptor_honoured_at_the_start_of_the_pass_is_no_demand():
    """A sixth tester's case: a preemptor whose stored target was gone searched again
    while the pass honoured reservations, and the look-ahead built the pass's demand
    before the honoured preemptors were in its order; g's 2x8 preemptor, kept on n0+n1,
    then counted as a job still waiting for the rest of the pass, and borrower e's
    1-GPU job was refused the idle quota kept "for" it beside free GPUs."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0").node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=8, block="b1", rack="r1")
    c.node("n3", gpus=8, block="b2", rack="r2").node("n4", gpus=8, block="b2", rack="r2")
    c.node("nX", gpus=8, block="b3", rack="r3")
    c.team("g", nominal=32, cohort="c").team("d", nominal=8, cohort="c")
    c.team("b", nominal=0, cohort="c").team("e", nominal=0, cohort="c")
    c.team("L", nominal=32, cohort="c")
    for jid, node in ((200, "n0"), (201, "n1"), (202, "nX")):
        c.run(jid, "b", on={node: 8}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
              grace=300, stop_requested=NOW - 60)  # fmt: skip
    for i in range(8):
        c.run(100 + i, "b", on={"n2": 1}, started=NOW - 60, runtime=100 * HOUR)
    for i in range(7):
        c.run(110 + i, "b", on={"n3": 1}, started=NOW - HOUR, runtime=100 * HOUR)
        c.run(120 + i, "b", on={"n4": 1}, started=NOW - HOUR, runtime=100 * HOUR)
    links = {200: 1, 201: 1, 202: 2}
    c.running = [replace(r, preempted_by=links[r.id]) if r.id in links else r for r in c.running]
    c.pending += [
        replace(make_job(1, "g", workers=2, gpus=8, submitted=NOW - 100, runtime=100 * HOUR),
                reserved_on=(("n0", 8), ("n1", 8))),
        replace(make_job(2, "d", workers=1, gpus=8, submitted=NOW - 90, runtime=100 * HOUR),
                reserved_on=(("nX", 8),)),
    ]  # fmt: skip
    c.job(3, "e", workers=1, gpus=1, submitted=NOW - 5000, runtime=HOUR)
    snap = c.snapshot()
    plan = schedule(replace(snap, nodes=tuple(n for n in snap.nodes if n.name != "nX")))
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    assert 3 in admitted(plan), verdict(plan, 3).message


# -- a review's cases: places spoiled elsewhere, and demand never counted ----------------


def _spread() -> Cluster:
    """d (1x8), g (2x8, block bA), h and k (1x12, on the 12-GPU nodes c0, c1) are within
    their nominal quota; b1's 1-GPU jobs fill block bA, n2 holds a 4-GPU job each of b2
    and b3, and c0, c1 a 12-GPU job of b2 and of b3, each of which borrows 4."""
    c = Cluster()
    c.node("a0", gpus=8, block="bA", rack="rA").node("a1", gpus=8, block="bA", rack="rA")
    c.node("n2", gpus=8, block="bB", rack="rB")
    c.node("c0", gpus=12, block="bC", rack="rC").node("c1", gpus=12, block="bD", rack="rD")
    c.team("d", nominal=8, cohort="c").team("g", nominal=16, cohort="c")
    c.team("h", nominal=12, cohort="c").team("k", nominal=12, cohort="c")
    c.team("b1", nominal=0, cohort="c").team("b2", nominal=12, cohort="c")
    c.team("b3", nominal=12, cohort="c")
    i = 100
    for node, age in (("a0", 60), ("a1", HOUR)):
        for _ in range(8):
            c.run(i, "b1", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.run(200, "b2", on={"n2": 4}, started=NOW - 120, runtime=100 * HOUR)
    c.run(201, "b2", on={"c0": 12}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(300, "b3", on={"n2": 4}, started=NOW - 120, runtime=100 * HOUR)
    c.run(301, "b3", on={"c1": 12}, started=NOW - HOUR, runtime=100 * HOUR)
    for job_id, team, workers, gpus in (
        (1, "d", 1, 8),
        (2, "g", 2, 8),
        (3, "h", 1, 12),
        (4, "k", 1, 12),
    ):
        c.job(job_id, team, workers=workers, gpus=gpus, submitted=NOW + job_id, runtime=100 * HOUR)
    return c


def test_a_target_that_spoils_places_elsewhere_is_not_taken_as_sparing_all(monkeypatch):
    """A review's case: d's cheapest node a0 spoils g's block; the second search took n2,
    judged to spoil nothing because only the target's own domain was asked, but once
    n2's jobs stop b2 and b3 borrow nothing, and h and k lost their places: two waited to
    spare one. Another target is now taken only if what it spoils anywhere is less than
    what the first does; and the pass serves no fewer of the four jobs than taking the
    cheapest target would (the look-ahead is per shape, not a joint placement: here it
    serves g instead of k)."""
    assert [t for j, t in _targets(schedule(_spread().snapshot())).items() if j == 1] != [["n2"]]

    def served(tries: int) -> set[int]:
        monkeypatch.setattr(preemption, "LOOKAHEAD_TRIES", tries)
        sim = _run(_spread())
        return {j for j in (1, 2, 3, 4) if sim.started.get(j, math.inf) <= NOW + 2 * GRACE}

    assert len(served(3)) >= len(served(0)) == 3


def test_demand_subtracts_only_the_jobs_it_counted():
    """A review's case: g's preemptor 1 was admitted on its kept target while the pass
    honoured reservations, charging 80 of g's 100 GPU-hours; another preemptor's search
    then built the demand, leaving job 1 out as over budget, and honouring subtracted its
    8 GPUs all the same: g's 2x8 gang counted as 8, was skipped as one that would borrow,
    and lost its block to the later reclaim."""

    def targets(budget: bool) -> dict:
        c = Cluster()
        c.node("a0", gpus=8, block="bA", rack="rA").node("a1", gpus=8, block="bA", rack="rA")
        c.node("n2", gpus=8, block="bB", rack="rB")
        c.node("nF", gpus=8, block="bF", rack="rF")
        c.node("nX", gpus=8, block="bX", rack="rX")
        c.team("g", nominal=24, cohort="c").team("x", nominal=8, cohort="c")
        c.team("b", nominal=0, cohort="c").team("L", nominal=16, cohort="c")
        i = 100
        for node, age in (("a0", 60), ("a1", HOUR), ("n2", HOUR)):
            for _ in range(8):
                c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
                i += 1
        c.run(202, "b", on={"nX": 8}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
              grace=300, stop_requested=NOW - 60)  # fmt: skip
        c.running = [replace(r, preempted_by=3) if r.id == 202 else r for r in c.running]
        c.pending += [
            replace(make_job(1, "g", workers=1, gpus=8, submitted=NOW - 100, runtime=10 * HOUR),
                    reserved_on=(("nF", 8),)),
            replace(make_job(3, "x", workers=1, gpus=8, submitted=NOW - 90, runtime=100 * HOUR),
                    reserved_on=(("nX", 8),)),
        ]  # fmt: skip
        c.job(2, "g", workers=2, gpus=8, submitted=NOW, runtime=HOUR)
        snap = c.snapshot()
        snap = replace(snap, nodes=tuple(n for n in snap.nodes if n.name != "nX"))
        if budget:
            snap = replace(snap, budgets=(Budget("g", "h100", limit=100.0, used=0.0),))
        plan = schedule(snap)
        assert 1 in admitted(plan)
        return _targets(plan)

    assert targets(budget=False) == targets(budget=True) == {2: ["a0", "a1"], 3: ["n2"]}


def _targets(plan) -> dict[int, list[str]]:
    return {r.job_id: sorted(n for n, _ in r.nodes) for r in plan.reservations}


# -- each alone is not all together: the later jobs are placed jointly (_pack) -----------


def _halves(
    nodes: int, young: tuple[str, ...], younger: tuple[str, ...] = (), lent: int = 0
) -> Cluster:
    """`nodes` 8-GPU nodes n0.. in one block, each holding two 4-GPU jobs of borrower b
    (nominal `lent`): on the `young` nodes one of them started two minutes ago (the
    cheapest victims of a 2x4 job: two half nodes), the rest an hour ago; the `younger`
    nodes hold eight 1-GPU jobs of b started a minute ago instead."""
    c = Cluster()
    i = 100
    for k in range(nodes):
        node = f"n{k}"
        c.node(node, gpus=8, block="b0", rack="r0")
        if node in younger:
            for _ in range(8):
                c.run(i, "b", on={node: 1}, started=NOW - 60, runtime=100 * HOUR)
                i += 1
            continue
        for age in (120 if node in young else HOUR, HOUR):
            c.run(i, "b", on={node: 4}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.team("b", nominal=lent, cohort="c")
    return c


def test_a_target_that_leaves_each_later_job_a_place_but_not_all_is_searched_again():
    """A random search's case (bench/lookahead_scan.py, three jobs): d's 2x4 job took the
    two youngest half nodes n1 and n2; alone, e's 1x8 job and g's 2x8 gang each still had
    a place (n0 or n3, and both), together not, and the gang waited for the borrower's
    100-hour jobs, when d's job fitted one node. Each later job alone keeps its place, so
    only placing them together shows it."""
    c = _halves(4, young=("n1", "n2"))
    c.team("d", nominal=8, cohort="c").team("e", nominal=8, cohort="c")
    c.team("g", nominal=16, cohort="c")
    c.job(1, "d", workers=2, gpus=4, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "e", workers=1, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    c.job(3, "g", workers=2, gpus=8, submitted=NOW + 2, runtime=100 * HOUR)
    targets = _targets(schedule(c.snapshot()))
    assert len(targets[1]) == 1  # one node: n1 or n2 (each as cheap)
    sim = _run(c)
    assert all(sim.started.get(j, math.inf) <= NOW + 2 * GRACE for j in (1, 2, 3)), sim.started


def test_the_search_again_starts_away_from_where_the_later_jobs_go():
    """A random search's case: d's 2x4 job reclaimed n1 whole (its eight 1-GPU jobs the
    youngest); e's 2x4 job then took the young halves of n0 and n2 and spoiled g's 1x8
    job, and a search away from those two nodes found nothing (n1 was taken). Searched
    first away from where g's job goes when placed before it (n0), e's job takes n2."""
    c = _halves(3, young=("n0", "n2"), younger=("n1",))
    c.team("d", nominal=8, cohort="c").team("e", nominal=8, cohort="c")
    c.team("g", nominal=8, cohort="c")
    c.job(1, "d", workers=2, gpus=4, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "e", workers=2, gpus=4, submitted=NOW + 1, runtime=100 * HOUR)
    c.job(3, "g", workers=1, gpus=8, submitted=NOW + 2, runtime=100 * HOUR)
    targets = _targets(schedule(c.snapshot()))
    assert targets[1] == ["n1"] and len(targets[2]) == 1 and targets[3] != targets[2]
    sim = _run(c)
    assert all(sim.started.get(j, math.inf) <= NOW + 2 * GRACE for j in (1, 2, 3)), sim.started


def test_alone_the_cheapest_spread_target_is_kept():
    """Without later jobs the 2x4 job keeps its cheapest target, the two young halves."""
    c = _halves(4, young=("n1", "n2"), lent=24)
    c.team("d", nominal=8, cohort="c")
    c.job(1, "d", workers=2, gpus=4, submitted=NOW, runtime=100 * HOUR)
    assert _targets(schedule(c.snapshot())) == {1: ["n1", "n2"]}


@st.composite
def several_reclaims(draw):
    """As two_reclaims, with three teams within nominal quota, each submitting one job."""
    c, domains = _filled(draw, most=6)
    shapes = [draw(st.sampled_from([(1, 4), (1, 8), (2, 4), (2, 8)])) for _ in range(3)]
    assume(_jointly_placeable(domains, shapes))
    order = draw(st.permutations([0, 1, 2]))
    for k, i in enumerate(order):
        w, g = shapes[i]
        c.team(f"t{i}", nominal=w * g, cohort="c")
        c.job(i + 1, f"t{i}", workers=w, gpus=g, submitted=NOW + k, runtime=100 * HOUR)
    c.team("b", nominal=0, cohort="c")
    return c


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(several_reclaims())
def test_three_reclaims_start_within_a_grace_period_when_all_can_be_placed(c):
    _all_start_within_two_grace_periods(c, {1, 2, 3})


# -- a later job's place is kept GPU by GPU, not node by node ------------------------------


def _two_node_block(size: int) -> Cluster:
    """A tester's case: a block of two `size`-GPU nodes full of b's 1-GPU jobs, half of
    each node's a minute old (the cheapest victims), half an hour; d's 2 x size/2 gang,
    then g's 1 x size job, both within nominal quota."""
    c = Cluster()
    c.node("n0", gpus=size, block="b0", rack="r0").node("n1", gpus=size, block="b0", rack="r0")
    c.team("d", nominal=size, cohort="c").team("g", nominal=size, cohort="c")
    c.team("b", nominal=0, cohort="c")
    i = 100
    for node in ("n0", "n1"):
        for k in range(size):
            age = 60 if k < size // 2 else HOUR
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.job(1, "d", workers=2, gpus=size // 2, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=1, gpus=size, submitted=NOW + 1, runtime=100 * HOUR)
    return c


@pytest.mark.parametrize("size", [8, 16])
def test_on_a_two_node_block_the_gang_leaves_the_later_job_a_whole_node(size):
    """d's cheapest target, the young halves of both nodes, spoils g's whole-node job; the
    search again away from every node it spoiled (both) found nothing and kept it, and g
    waited for the borrower's 100-hour jobs. Searched away from the node g's job takes
    when placed first, d's gang takes the other one whole."""
    sim = _run(_two_node_block(size))
    assert sim.started.get(1, math.inf) <= NOW + 2 * GRACE, sim.started
    assert sim.started.get(2, math.inf) <= NOW + 2 * GRACE, sim.started


def test_a_gang_may_share_a_node_with_a_later_gangs_place():
    """A tester's case: n0 (16 GPUs: 5 of a non-preemptible job of b's, 11 of young 1-GPU
    jobs), n1 (8, the youngest) and n2 (8: 2 non-preemptible, 6 an hour old), one block;
    t1's 4x2 gang, then t0's 2x8 gang, both within nominal. Together they fit: t0 on n0
    and n1, t1 three workers on n2 and one beside t0's on n0. t1's cheapest target, n1,
    spoils t0's gang; away from n1 it took 4 workers on n0, spoiling it again; away from
    both, n2 holds 3 workers. A search that keeps a node whole cannot find the place: the
    GPUs the later gang takes are kept out of reach, and the rest of the node is not."""
    c = Cluster()
    for name, gpus in (("n0", 16), ("n1", 8), ("n2", 8)):
        c.node(name, gpus=gpus, block="b0", rack="r0")
    c.team("t1", nominal=8, cohort="c").team("t0", nominal=16, cohort="c")
    c.team("L", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(100, "b", on={"n0": 5}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    c.run(101, "b", on={"n2": 2}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    i = 110
    for node, count, age in (("n0", 11, 600), ("n1", 8, 60), ("n2", 6, HOUR)):
        for _ in range(count):
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
            i += 1
    c.job(1, "t1", workers=4, gpus=2, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "t0", workers=2, gpus=8, submitted=NOW + 1, runtime=100 * HOUR)
    sim = _run(c)
    assert sim.started.get(1, math.inf) <= NOW + 2 * GRACE, sim.started
    assert sim.started.get(2, math.inf) <= NOW + 2 * GRACE, sim.started


# -- a review of the joint look-ahead: the borrowers' borrowing runs out, and cost counts --


def _reviewed_three() -> Cluster:
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0").node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=4, block="b1", rack="r1").node("n3", gpus=4, block="b2", rack="r2")
    c.team("p", nominal=4, cohort="c").team("g", nominal=16, cohort="c")
    c.team("s", nominal=4, cohort="c").team("b", nominal=1, cohort="c")
    c.run(100, "b", on={"n0": 4}, started=NOW - 30, runtime=100 * HOUR)
    c.run(101, "b", on={"n0": 4}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(102, "b", on={"n1": 8}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(103, "b", on={"n2": 1}, started=NOW - 600, runtime=100 * HOUR)
    c.run(104, "b", on={"n3": 4}, started=NOW - 5 * HOUR, runtime=100 * HOUR)
    c.job(1, "p", workers=1, gpus=4, submitted=NOW - 30, runtime=100 * HOUR)
    c.job(2, "g", workers=2, gpus=8, submitted=NOW - 20, runtime=100 * HOUR)
    c.job(3, "s", workers=1, gpus=4, submitted=NOW - 10, runtime=100 * HOUR)
    return c


def test_three_within_nominal_jobs_that_fit_together_all_start():
    """The joint look-ahead's first second search (away from the GPUs the later jobs take when
    packed first: preemption.choose, `tried = packed or avoid`) sends a reclaim to another
    target that costs a later within-nominal job its only place; that job then waits for the
    borrower's 100-hour jobs, where before this change all three jobs started at once.

    Cohort c: borrower b (nominal 1) runs, all preemptible, for 100 h:
      block b0: n0 (8 GPUs): job 100, 4 GPUs, 30 s old; job 101, 4 GPUs, 1 h old
                n1 (8 GPUs): job 102, 8 GPUs, 1 h old
      block b1: n2 (4 GPUs): job 103, 1 GPU, 10 min old (3 GPUs free)
      block b2: n3 (4 GPUs): job 104, 4 GPUs, 5 h old
    b uses 21 GPUs and borrows 20. Within nominal quota, in one pass: p's 1x4 job 1, g's 2x8
    gang 2, then s's 1x4 job 3.

    Job 1's cheapest target (job 100 on n0) spoils the gang's only place, so it is searched
    again (rule 3, "Later jobs within nominal quota keep their place"). At 9226018 the search
    went away from n0 and took n2 (victim 103); the gang reclaimed n0+n1 and job 3 reclaimed
    n3 (104): all three started at the next pass. Now the search starts away from where the
    later jobs are packed first (_pack: the gang on n0+n1, s's 1x4 on n2, best fit, tie broken
    by node index), so job 1 takes n3 (victim 104). Its place on n2 was kept for job 3 only in
    the packing: once jobs 1 and 2 have reclaimed 20 GPUs, b no longer borrows, job 3 may not
    reclaim 103, and it waits `cohort_busy`/`no_capacity` for b's 100-hour jobs. _pack counts
    each later team's reclaimable GPUs on its own (Future.nodes per team), not that the
    borrower's borrowing runs out as they are reclaimed, and in the spoiled branch `better` only
    asks about shapes spoiled alone, never whether the packing's gain is real.

    What a user sees: s's job, within its nominal quota, that fitted (and started, before the
    change) beside the other two, is told it waits for GPUs reserved from +100 h.
    docs/scheduling.md ("Tests": "two within-nominal jobs of one pass that can be placed
    together ... both start within two grace periods ..., and so do three"; rule 3's look-ahead
    is there to keep later within-nominal jobs their place, not take it).
    """
    sim = Sim(_reviewed_three(), preemption=True)
    for k in range(6):
        sim.step(NOW + GRACE * k)
    late = {j: sim.started.get(j, math.inf) - NOW for j in (1, 2, 3)}
    assert all(t <= 2 * GRACE for t in late.values()), (
        f"start offsets {late}: job 1 was sent from n2 to n3 to keep n2 for job 3, which "
        "could then reclaim nothing"
    )


def _reviewed_four() -> Cluster:
    c = Cluster()
    for name, gpus, block in (
        ("n0", 8, "b1"),
        ("n1", 16, "b1"),
        ("n2", 8, "b0"),
        ("n3", 8, "b0"),
        ("n4", 8, "b0"),
    ):
        c.node(name, gpus=gpus, block=block, rack=block.replace("b", "r"))
    for team, nominal in (("t1", 12), ("t2", 8), ("t3", 20), ("b", 8), ("x", 4)):
        c.team(team, nominal=nominal, cohort="c")
    for i, team, node, k, age, pre in (
        (100, "x", "n0", 4, 120, True),
        (101, "b", "n0", 4, 120, False),
        (102, "x", "n1", 8, 120, True),
        (103, "x", "n1", 4, 1800, False),
        (105, "b", "n2", 1, 1800, True),
        (106, "b", "n3", 4, 5 * HOUR, True),
        (107, "x", "n3", 4, 60, True),
        (109, "x", "n4", 7, 1800, True),
    ):
        c.run(i, team, on={node: k}, started=NOW - age, runtime=100 * HOUR, preemptible=pre)
    for i, team, w, g, sub in (
        (2, "t1", 2, 4, 1),
        (3, "t2", 4, 2, 46),
        (4, "t3", 2, 8, 40),
        (5, "t3", 1, 4, 35),
    ):
        c.job(i, team, workers=w, gpus=g, submitted=NOW + sub, runtime=100 * HOUR)
    return c


def test_four_within_nominal_jobs_that_fit_together_all_start():
    """The joint look-ahead's second search, started away from where the later jobs are
    packed (preemption.choose: `tried = packed or avoid`), accepts the first target that
    spoils no shape *alone* (the spoiled branch's `better`); that dearer target moves the
    GPUs a later preemptor and a later admission take, and a within-nominal 2x8 gang that
    got its place at 9226018 waits for the borrowers' 100-hour jobs.

    Cohort c (all jobs 100 h; borrowers b nominal 8 and x nominal 4):
      block b1: n0 (8): x's job 100 (4 GPUs, 2 min old), b's non-preemptible 101 (4)
                n1 (16): x's job 102 (8, 2 min old), x's non-preemptible 103 (4); 4 free
      block b0: n2 (8): b's job 105 (1 GPU, 30 min old); 7 free
                n3 (8): b's job 106 (4, 5 h old), x's job 107 (4, 1 min old)
                n4 (8): x's job 109 (7, 30 min old); 1 free
    Within nominal, one pass: t1's 2x4 job 2, t3's 1x4 job 5, t3's 2x8 gang 4, t2's 4x2 job 3.

    At 9226018: job 2's cheapest target (n2's free GPUs and 107 on n3) spoils the gang's place
    in b0, so it is searched away from n3 and takes n0+n1 (victim 100 and n1's free GPUs);
    job 5 fits n2, job 3 reclaims n1 (102), the gang reclaims n3+n4: all four start at the
    next pass. Now job 2's second search starts away from the packed places (n0 and n1 are
    partly kept for the packed 4x2 job) and takes job 102's 8 GPUs on n1 (a dearer victim),
    which spoils no shape alone; n1's free GPUs then go to job 5 (admitted there instead of
    n2), job 3 takes n2 and 2 GPUs of n3 (victim 107), the gang's block, as its own look-ahead
    finds nothing better, and the gang waits `cohort_busy` ("reclaim cannot make room for it")
    for the borrowers' 100-hour jobs.

    docs/scheduling.md ("Tests": within-nominal jobs of one pass that can be placed together
    "both start within two grace periods ..., and so do three"; rule 3: a reclaim keeps later
    within-nominal jobs of its cohort their place): the look-ahead itself moved a preemptor
    to a dearer target and cost a jointly placeable gang its start.
    """
    sim = Sim(_reviewed_four(), preemption=True)
    for k in range(6):
        sim.step(NOW + GRACE * k)
    late = {j: sim.started.get(j, math.inf) - NOW for j in (2, 3, 4, 5)}
    assert all(t <= 2 * GRACE for t in late.values()), late


# -- a final review: the packing's view of a choice with its own team's victims --------


def _own_victim() -> Cluster:
    c = Cluster()
    for n in ("n0", "n1", "n2"):
        c.node(n, gpus=8, block="b0", rack="r0")
    runs = [
        (100, "b2", "n0", 1, -17278, True), (101, "b2", "n0", 4, -893, False),
        (102, "b2", "n0", 2, -8117, False), (103, "b2", "n0", 1, -13154, True),
        (104, "b1", "n1", 3, -10704, False), (105, "d", "n1", 3, -3298, True),
        (106, "b1", "n1", 1, -8148, True), (107, "d", "n1", 1, -14296, True),
        (108, "b2", "n2", 2, -15497, True), (109, "b2", "n2", 4, -17017, True),
        (110, "d", "n2", 1, -3329, True), (111, "d", "n2", 1, -11356, True),
    ]  # fmt: skip
    for i, team, node, k, age, pre in runs:
        c.run(i, team, on={node: k}, started=NOW + age, runtime=100 * HOUR, preemptible=pre)
    c.team("d", nominal=14, cohort="c", weight=100.0).team("l", nominal=0, cohort="c")
    c.team("g", nominal=8, cohort="c").team("k", nominal=2, cohort="c")
    c.team("b1", nominal=0, cohort="c").team("b2", nominal=0, cohort="c")
    c.job(1, "d", workers=1, gpus=2, priority=5, submitted=NOW, runtime=100 * HOUR)
    c.job(2, "g", workers=1, gpus=4, submitted=NOW + 1, runtime=100 * HOUR)
    c.job(3, "g", workers=2, gpus=2, submitted=NOW + 2, runtime=100 * HOUR)
    c.job(4, "k", workers=2, gpus=2, submitted=NOW + 3, runtime=100 * HOUR)
    return c


def test_room_counts_the_gpus_an_own_team_victim_frees(monkeypatch):
    """Review of 0145467 (preemption._Future.space: the packing's view per choice derived from
    a base view).

    _Future.space documents `room` as "node -> GPUs free or held by those jobs" (the jobs of
    teams still borrowing), with "its victims' GPUs free" once the choice is made. The
    derivation subtracts every victim's GPUs from `room` ("counted free below") and then adds
    the change in free GPUs. That is right for a victim whose GPUs were in the base `room`
    (a borrower's job, counted in `on`), but a victim of a team that does not borrow -- a
    reclaim may also take its own team's lower-priority jobs (choose's `lower`) -- was never
    in `room`: its GPUs are subtracted and added back, so they never appear. Result: room[n]
    < free[n] on that node, and _pack (which only looks at `room` for where a later job fits)
    cannot see GPUs that the choice leaves free.

    Cluster (a random case of a brute-force comparison, 3 of 400 random cohorts mismatched,
    all with own-team victims): d's 1x2 preemptor reclaims with its own 3-GPU job 105 on n1
    as victim; on n1 it frees 3 GPUs and takes 2, so n1 has 1 GPU free plus b1's 1 borrowed
    GPU: room should be 2, space() says -1 (less than the node's own free GPUs).

    Scope: in 1,500 random cohorts the final plans did not change when room was corrected
    (the look-ahead's decisions happened not to depend on it), so this is an internal
    inconsistency of the packing's view found by the requested brute-force check, not (yet)
    a wrong plan.
    """
    seen = []
    pack = preemption._pack

    def spy(future, later, choice=None):
        if choice is not None:
            seen.append((choice, future.space(choice)))
        return pack(future, later, choice)

    monkeypatch.setattr(preemption, "_pack", spy)
    schedule(_own_victim().snapshot(preemption=True))
    own = [(c, s) for c, s in seen if any(r.book.name == "d" for r in c.victims)]
    assert own, "no look-ahead packing of a choice with an own-team victim was reached"
    for choice, (free, _borrows, _on, room, _where) in own:
        short = {n: (k, room.get(n, 0)) for n, k in free.items() if room.get(n, 0) < k}
        assert not short, (
            f"victims {[(r.job.id, r.book.name, r.nodes) for r in choice.victims]}, target "
            f"{choice.gpus_on}: node -> (free, room) where room omits free GPUs: {short}"
        )


def _hopeless_later() -> Cluster:
    """Cohort c: a (nominal 4, lending limit 0: all its quota its own), e (nominal 8, idle,
    ordered after a) and b (nominal 0) borrowing 16 GPUs: eight minute-old 1-GPU jobs on
    n0, four hour-old 1-GPU jobs and a non-preemptible 4-GPU job on n1. e's 1x8 job fits
    only n0's GPUs, but it needs the cohort's idle quota (8), and b's non-preemptible job
    borrows 4 of it for 100 hours: no reclaim can admit it (a helper's case)."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=4, lending_limit=0, cohort="c")
    c.team("e", nominal=8, cohort="c", decayed={"h100": 100 * HOUR})
    c.team("b", nominal=0, cohort="c")
    for i in range(8):
        c.run(10 + i, "b", on={"n0": 1}, started=NOW - 60, runtime=100 * HOUR)
    for i in range(4):
        c.run(20 + i, "b", on={"n1": 1}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(30, "b", on={"n1": 4}, preemptible=False, runtime=100 * HOUR)
    c.job(1, "a", gpus=4, runtime=100 * HOUR)
    c.job(2, "e", gpus=8, runtime=100 * HOUR)
    return c


def test_no_place_is_kept_for_a_later_job_the_cohorts_quota_cannot_admit():
    """The look-ahead asked whether e's job would have GPUs, never quota: it sent a's
    1x4 job to n1's hour-old jobs (14,400 GPU-s lost instead of 240) to keep n0 whole
    for a job no reclaim could admit. Now a later job's place counts only up to the
    most quota its team could have once every GPU a reclaim may take is back."""
    c = _hopeless_later()
    plan = schedule(c.snapshot())
    assert len(preempted(plan)) == 4 and set(preempted(plan)) <= set(range(10, 18))
    assert verdict(plan, 2).reason_code == "cohort_busy"
    sim = Sim(c)
    for step in range(6):
        sim.step(NOW + GRACE * step)
    assert sim.started[1] <= NOW + 2 * GRACE and 2 not in sim.started


def test_a_later_job_the_quota_admits_once_reclaimed_keeps_its_place():
    """The same, with b's 4-GPU job preemptible: reclaim can give e the cohort's quota,
    so a's job leaves n0 whole and both start."""
    c = _hopeless_later()
    c.running = [replace(r, preemptible=True) if r.id == 30 else r for r in c.running]
    plan = schedule(c.snapshot())
    assert set(preempted(plan)) >= set(range(20, 24))
    sim = Sim(c)
    for step in range(6):
        sim.step(NOW + GRACE * step)
    assert sim.started[1] <= NOW + 2 * GRACE and sim.started[2] <= NOW + 2 * GRACE


def _greedy_short() -> Cluster:
    """Cohort c: a (nominal 4, lending limit 0), e (nominal 8, idle, ordered after a), cc
    (nominal 0) borrowing 12 (eight minute-old 1-GPU jobs on n0, four hour-old ones on
    n1), b (nominal 6) using 11 (4 GPUs on n2, 3 newest on n3, 2 + 2 on n4) and q
    (nominal 0) borrowing 3 non-preemptible on n1; x, outside the cohort, fills the rest
    (a review's case)."""
    c = Cluster().nodes_(5)
    c.team("a", nominal=4, lending_limit=0, cohort="c")
    c.team("e", nominal=8, cohort="c", decayed={"h100": 100 * HOUR})
    c.team("cc", nominal=0, cohort="c").team("b", nominal=6, cohort="c")
    c.team("q", nominal=0, cohort="c").team("x", nominal=64)
    for i in range(8):
        c.run(10 + i, "cc", on={"n0": 1}, started=NOW - 60, runtime=100 * HOUR)
    for i in range(4):
        c.run(20 + i, "cc", on={"n1": 1}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(30, "q", on={"n1": 3}, preemptible=False, runtime=100 * HOUR)
    runs = [(40, "n2", 4, 2 * HOUR), (41, "n3", 3, 100), (42, "n4", 2, 3 * HOUR),
            (43, "n4", 2, 3 * HOUR + 1)]  # fmt: skip
    for i, node, g, age in runs:
        c.run(i, "b", on={node: g}, started=NOW - age, runtime=100 * HOUR)
    for i, node, g in ((50, "n2", 4), (51, "n3", 5), (52, "n4", 4)):
        c.run(i, "x", on={node: g}, preemptible=False, runtime=100 * HOUR)
    c.job(1, "a", gpus=4, runtime=100 * HOUR)
    c.job(2, "e", gpus=8, runtime=100 * HOUR)
    return c


def test_the_quota_a_later_job_could_reach_counts_every_allowed_set():
    """b borrows 5: its newest job (3 GPUs) first and its 4-GPU job make 7 GPUs back, but
    {4, 2, 2} is allowed too (2 + 2 < 5) and gives back the 8 e's 1x8 job needs. Counted
    as the first set, e's job lost its place: a's job took n0's young jobs, the only node
    e's job could use, and e waited for 100-hour jobs. Both now start after one grace
    period."""
    alone = _greedy_short()
    alone.pending = [j for j in alone.pending if j.id == 2]
    assert {40, 42, 43} <= set(preempted(schedule(alone.snapshot())))
    sim = Sim(_greedy_short())
    for step in range(4):
        sim.step(NOW + GRACE * step)
    assert sim.started.get(1) == NOW + GRACE and sim.started.get(2) == NOW + GRACE

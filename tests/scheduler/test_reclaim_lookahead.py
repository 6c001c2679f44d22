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

from scheduler import schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, preempted, verdict

GRACE = 30.0


def _three_nodes(young: str = "n0") -> Cluster:
    """d (nominal 8), g (nominal 16) and borrower b (nominal 0) in cohort c; n0 and n1 in
    block b0, n2 in block b1; b runs 24 preemptible 1-GPU jobs, those on `young` started
    a minute ago (the cheapest victims), the others an hour ago."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0")
    c.node("n1", gpus=8, block="b0", rack="r0")
    c.node("n2", gpus=8, block="b1", rack="r1")
    c.team("d", nominal=8, cohort="c").team("g", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c")
    i = 100
    for node in ("n0", "n1", "n2"):
        age = 60 if node == young else HOUR
        for _ in range(8):
            c.run(i, "b", on={node: 1}, started=NOW - age, runtime=100 * HOUR)
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

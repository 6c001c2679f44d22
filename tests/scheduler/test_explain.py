"""Explain: every waiting job gets a reason, a sentence with numbers, a position, an estimate."""

import pytest

from scheduler import REASONS, schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, admitted, reasons, verdict


def test_the_example_sentence():
    # "needs 16 h100 GPUs in one block; team uses 24 of 32 nominal; 2 jobs ahead;
    #  would start if 8 GPUs freed"
    c = Cluster().nodes_(4)
    c.team("a", nominal=32, cohort="k").team("b", nominal=64, cohort="k")
    c.run(10, "a", on={"n0": 8, "n1": 8, "n2": 8}, per_worker=8, started=NOW - 600, runtime=1200)
    c.run(11, "b", on={"n3": 2}, started=NOW, runtime=300)
    c.job(1, "a", workers=2, gpus=8, priority=5)
    c.job(2, "a", workers=2, gpus=4, priority=5)
    c.job(3, "a", workers=2, gpus=4, runtime=10**5)
    plan = schedule(c.snapshot(preemption=False))
    one = verdict(plan, 1)
    assert one.reason_code == "no_capacity"
    assert one.message.startswith(
        "needs 16 h100 GPUs (2 workers x 8) in one block; 6 are free; would start if 10 more were freed; team a uses 24 of 32 nominal"
    )
    assert one.estimated_start == NOW + 600  # job 10 ends: then 32 are free
    v = verdict(plan, 3)
    assert v.position == 3
    assert v.message.startswith("needs 8 h100 GPUs (2 workers x 4);")
    assert "team a uses 24 of 32 nominal; 2 jobs ahead in queue a/q" in v.message


def test_positions_count_waiting_jobs_of_the_same_queue():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 8})
    c.job(1, gpus=1, queue="x")
    c.job(2, gpus=1, queue="y")
    c.job(3, gpus=1, queue="x", priority=9)
    c.job(4, gpus=1, queue="x")
    plan = schedule(c.snapshot())
    assert {v.job_id: v.position for v in plan.verdicts} == {3: 1, 1: 2, 4: 3, 2: 1}


def test_estimates_follow_the_shadow_projection():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 8}, started=NOW, runtime=100)
    c.job(1, gpus=8, runtime=50)
    c.job(2, gpus=4, runtime=50)
    c.job(3, gpus=4, runtime=50)
    c.job(4, gpus=16)
    plan = schedule(c.snapshot())
    starts = {v.job_id: v.estimated_start for v in plan.verdicts}
    assert starts == {1: NOW + 100, 2: NOW + 150, 3: NOW + 150, 4: None}


def test_a_gang_is_not_told_it_starts_while_its_gpus_are_free_only_in_pieces():
    # 4 GPUs free on each of three nodes. Job 1 takes the flavor's reservation: n0, whole
    # when job 10 ends at +1 h. By count job 2 (8 GPUs too) could start then as well, but
    # no node is whole for it before job 11 ends at +2 h.
    c = Cluster().nodes_(3)
    c.team("a", nominal=64)
    for i, hours in enumerate((1, 2, 3)):
        c.run(10 + i, on={f"n{i}": 4}, started=NOW, runtime=hours * HOUR)
    c.job(1, gpus=8, runtime=4 * HOUR)
    c.job(2, gpus=8, runtime=4 * HOUR)
    plan = schedule(c.snapshot(preemption=False))
    starts = {v.job_id: v.estimated_start for v in plan.verdicts}
    assert reasons(plan) == {1: "fragmented", 2: "fragmented"}
    assert starts == {1: NOW + HOUR, 2: NOW + 2 * HOUR}


def test_unhealthy_gpus_make_a_job_unestimable():
    c = Cluster().node("n0", unhealthy=2)
    c.team("a", nominal=64)
    c.job(1, gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "no_capacity" and v.estimated_start is None


def test_explain_off_keeps_codes_and_positions_but_skips_the_work():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 8}, started=NOW, runtime=100)
    for i in range(1, 4):
        c.job(i, gpus=4)
    on, off = schedule(c.snapshot()), schedule(c.snapshot(explain=False))
    assert [(v.job_id, v.reason_code, v.position) for v in on.verdicts] == [
        (v.job_id, v.reason_code, v.position) for v in off.verdicts
    ]
    assert all(
        v.estimated_start is None and v.message == REASONS[v.reason_code] for v in off.verdicts
    )
    assert all(v.estimated_start is not None for v in on.verdicts)


def test_jobs_ahead_in_the_queue_took_the_gpus():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.job(1, gpus=6)
    c.job(2, gpus=4)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [1]
    assert verdict(plan, 2).reason_code == "priority"
    assert "1 job(s) ahead of it in its queue took 6 GPUs" in verdict(plan, 2).message


def test_one_gpu_is_one_gpu_in_the_sentences():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.job(1, gpus=7)
    c.job(2, gpus=1)
    c.job(3, gpus=1)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [1, 2]
    message = verdict(plan, 3).message
    assert message.startswith("needs 1 h100 GPU;"), message
    assert "took 8 GPUs" in message and "1 GPUs" not in message


def test_jobs_beyond_the_candidate_limit_are_not_reached():
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    for i in range(1, 5):
        c.job(i, gpus=1)
    plan = schedule(c.snapshot(max_backfill_candidates=2))
    assert admitted(plan) == [1, 2]
    assert reasons(plan) == {3: "priority", 4: "priority"}
    assert "not reached" in verdict(plan, 3).message


# One scenario per reason code: the vocabulary is all reachable. The cluster:
# n0, n1 (block b0) and n2 (block b1), 2 GPUs free on each; team a (no cohort)
# holds 6 on n0 until +500 and 6 on n1 until +900; team d borrows 6 of b's
# quota on n2; team c may hold 2.
def never_fits(c):
    c.job(1, gpus=64)


def no_nodes(c):
    c.job(1, gpus=1, flavor="a100")


def fifo_blocked(c):
    c.job(1, gpus=8)
    c.job(2, gpus=1)
    return {"policy": "fifo"}


def waiting_for_preemption(c):
    c.job(1, "b", gpus=6)


def quota(c):
    c.run(20, "c", on={"n2": 2})
    c.job(1, "c", gpus=1)


def cohort_busy(c):
    c.job(1, "b", gpus=6)
    return {"preemption": False}


def reserved(c):
    c.job(1, workers=2, gpus=8)  # reserved on n0 and n1 from +900
    c.job(2, workers=2, gpus=2, runtime=10**6)  # would need a GPU of n0 or n1


def priority(c):
    for i in range(1, 5):
        c.job(i, gpus=2)


def topology(c):
    c.job(1, workers=3, gpus=2)


def fragmented(c):
    c.job(1, gpus=3)


def no_capacity(c):
    c.job(1, gpus=7)


@pytest.mark.parametrize(
    "scenario",
    [
        never_fits,
        no_nodes,
        fifo_blocked,
        waiting_for_preemption,
        quota,
        cohort_busy,
        reserved,
        priority,
        topology,
        fragmented,
        no_capacity,
    ],
    ids=lambda s: s.__name__,
)
def test_every_reason_code_is_reachable_with_a_message(scenario):
    c = Cluster().node("n0", block="b0").node("n1", block="b0").node("n2", block="b1")
    c.team("a", nominal=64).team("b", nominal=8, cohort="k").team("d", nominal=0, cohort="k").team(
        "c", nominal=2
    )
    c.run(10, "a", on={"n0": 6}, started=NOW, runtime=500)
    c.run(11, "a", on={"n1": 6}, started=NOW, runtime=900)
    c.run(12, "d", on={"n2": 6}, started=NOW, runtime=900)
    config = scenario(c) or {}
    plan = schedule(c.snapshot(**config))
    code = scenario.__name__
    assert code in REASONS
    assert code in reasons(plan).values(), plan.verdicts
    v = next(v for v in plan.verdicts if v.reason_code == code)
    assert v.message.startswith("needs ") and v.message != REASONS[code]


def test_one_gpu_short_of_quota_reads_in_the_singular():
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="k").team("b", nominal=8, cohort="k")
    c.run(10, "a", on={"n0": 8}, preemptible=False)
    c.run(11, "b", on={"n1": 7}, preemptible=False)
    c.job(1, "b", gpus=2)  # b may borrow a's idle quota: none is idle, 1 GPU short
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "cohort_busy"
    assert v.message.endswith("would start when 1 GPU of the cohort is freed"), v.message

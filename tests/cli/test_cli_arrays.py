"""`berth` with job arrays: submit with Slurm's spec, queue collapsed like squeue, one id
cancels and waits for the whole array."""

from __future__ import annotations

import json

import pytest

from berthcli import exitcodes
from portal.core.models import Job
from portal.core.scheduling import run_pass
from tests.cli.test_cli import JOB, finish

ONE_GPU = [*JOB[:2], "-G", "1", *JOB[4:]]


def submit_array(berth, spec: str, *extra) -> int:
    result = berth(
        "submit", "--parsable", "--array", spec, "-J", "shard-{index}", *ONE_GPU, *extra,
        "--", "python", "eval.py", "--shard", "{index}",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out.strip().endswith("_")
    return int(result.out.strip()[:-1])


def test_submit_array_with_a_limit(berth, logged_in, personas):
    logged_in(personas.member_a)
    array = submit_array(berth, "0-99:10%2")
    tasks = Job.objects.filter(array_id=array).order_by("array_index")
    assert [t.array_index for t in tasks] == list(range(0, 100, 10))
    assert tasks[3].name == "shard-30" and tasks[3].command[-1] == "30"
    assert tasks[3].env["SLURM_ARRAY_TASK_ID"] == "30"
    bad = berth("submit", "--array", "5-1", *ONE_GPU, "--", "run")
    assert bad.code == exitcodes.REFUSED
    assert "array: The range 5-1 ends before it starts." in bad.err


def test_queue_collapses_an_arrays_pending_tasks_like_squeue(berth, logged_in, personas):
    logged_in(personas.member_a)
    array = submit_array(berth, "0-9%3")
    plain = int(berth("submit", "--parsable", *JOB, "--", "python", "t.py").out)
    run_pass()

    lines = berth("queue").out.splitlines()[1:]

    ids = [line.split()[0] for line in lines]
    assert ids[:3] == [f"{array}_0", f"{array}_1", f"{array}_2"]  # running: one row each
    assert f"{array}_[3-9%3]" in ids and str(plain) in ids
    assert len(lines) == 5
    collapsed = next(line for line in lines if line.startswith(f"{array}_["))
    assert collapsed.split()[3] == "shard-{index}" and "array_limit" in collapsed
    expanded = berth("queue", "--expand").out.splitlines()[1:]
    assert len(expanded) == 11 and f"{array}_9" in [line.split()[0] for line in expanded]
    only = berth("queue", "--array", array).out.splitlines()[1:]
    assert len(only) == 10


def test_one_id_cancels_the_whole_array(berth, logged_in, personas):
    logged_in(personas.member_a)
    array = submit_array(berth, "0-4")
    result = berth("cancel", f"{array}_")
    assert result.code == 0, result.err
    assert result.out.strip() == f"Cancelled array {array}_"
    assert set(Job.objects.filter(array_id=array).values_list("state", flat=True)) == {"cancelled"}
    assert berth("cancel", f"{array}_").code == 0  # a retry finds it cancelled: success


def test_a_task_is_addressed_by_array_and_index(berth, logged_in, personas):
    logged_in(personas.member_a)
    array = submit_array(berth, "3-5")
    task = Job.objects.get(array_id=array, array_index=4)
    status = berth("status", f"{array}_4")
    assert status.code == 0 and status.out.startswith(f"Job {task.pk}  shard-4")
    assert f"Array task:  {array}_4 (berth status {array}_)" in status.out
    summary = berth("status", f"{array}_").out
    assert f"Array {array}_" in summary and "3 pending" in summary
    assert berth("cancel", f"{array}_4").code == 0
    assert Job.objects.get(pk=task.pk).state == "cancelled"
    assert berth("status", f"{array}_9").code == exitcodes.NOT_FOUND
    assert berth("status", "12_x").code == exitcodes.USAGE


@pytest.mark.parametrize(
    ("ends", "code"),
    [
        (["succeeded", "succeeded"], exitcodes.OK),
        (["succeeded", "failed"], exitcodes.JOB_FAILED),
        (["cancelled", "succeeded"], exitcodes.JOB_CANCELLED),
    ],
)
def test_wait_for_an_array_exits_0_only_if_every_task_succeeded(
    berth, logged_in, personas, waits, ends, code
):
    logged_in(personas.member_a)
    array = submit_array(berth, "0-1")
    first, second = Job.objects.filter(array_id=array).order_by("array_index")
    waits.then += [lambda: finish(first.pk, ends[0]), lambda: finish(second.pk, ends[1])]

    result = berth("wait", f"{array}_", "--interval", "5", "--json")

    assert result.code == code, result.err
    assert waits == [5.0, 5.0]
    assert json.loads(result.out)["counts"][ends[1]] >= 1
    assert result.err.splitlines()[0] == f"array {array}_: pending (2 pending)"

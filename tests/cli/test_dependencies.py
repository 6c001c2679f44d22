"""`berth submit --dependency`, and what `berth queue`, `status`, `why` and `wait`
say of a job held for its dependencies, against a live test server."""

from __future__ import annotations

from berthcli import exitcodes
from portal.core.models import Job
from tests.cli.test_cli import JOB, finish, start, submit


def test_a_pipeline_from_the_command_line(berth, logged_in, personas, waits):
    logged_in(personas.member_a)
    train = submit(berth, "-J", "train")
    evaluate = submit(berth, "-J", "eval", "--dependency", f"afterok:{train}")
    report = submit(berth, "-J", "report", "-d", f"afterany:{train}:{evaluate},singleton")
    assert Job.objects.get(pk=report).dependency == f"afterany:{train}:{evaluate},singleton"

    queue = berth("queue")
    assert queue.code == 0, queue.err
    row = next(line for line in queue.out.splitlines() if line.startswith(str(evaluate)))
    assert f"dependency(afterok:{train})" in row

    why = berth("why", evaluate)
    assert why.out.splitlines()[0] == (
        f"Job {evaluate} (eval, 1 × 8 h100-80gb (8 GPUs)) is pending: Waits for job {train} (train) to "
        "succeed (it is pending). (reason: dependency)"
    )
    assert "What would change it: The jobs it depends on" in why.out
    assert f"Dependency:  afterok:{train}" in berth("status", evaluate).out

    # train fails: eval can never run, and `berth wait` on it ends at once with "cancelled"
    start(train)
    finish(train, "failed", exit_code=3)
    waited = berth("wait", evaluate, "--interval", "1", "--timeout", "30")
    assert waited.code == exitcodes.JOB_CANCELLED, waited.err
    why = berth("why", evaluate).out
    assert f"Dependency afterok:{train} can never be met: job {train} (train) failed." in why


def test_a_bad_dependency_prints_the_field_error(berth, logged_in, personas):
    logged_in(personas.member_a)
    result = berth("submit", *JOB, "--dependency", "afterok:99999", "--", "true")
    assert result.code == exitcodes.REFUSED, result.err
    assert "dependency" in result.err and "has no job 99999" in result.err

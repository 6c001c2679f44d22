"""The `berth` CLI as CI pipelines and people use it, against a live portal."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from berthcli import exitcodes
from berthcli.output import parse_time
from portal.core.actions.budgets import set_budget
from portal.core.actions.jobs import transition
from portal.core.budgets import month_bounds
from portal.core.models import ApiToken, Job, ReclaimBackoff, Usage, Worker
from tests.factories import PASSWORD

ROOT = Path(__file__).resolve().parents[2]
JOB = ["--flavor", "h100-80gb", "-G", "8", "--image", "pytorch:2.4", "--time", "1h"]


def submit(berth, *extra) -> int:
    result = berth("submit", "--parsable", *JOB, *extra, "--", "python", "train.py")
    assert result.code == 0, result.err
    return int(result.out)


def start(job_id: int) -> None:
    """Stand in for the scheduler admitting the job and the agent starting it."""
    with transaction.atomic():
        transition([job_id], from_states=["pending"], to_state="running", kind="started")


def finish(job_id: int, state: str, **fields) -> None:
    """Stand in for the agent reporting the job's end."""
    with transaction.atomic():
        transition(
            [job_id],
            from_states=[s for s in Job.State.values if s not in Job.TERMINAL_STATES],
            to_state=state,
            kind=state,
            finished_at=timezone.now(),
            **fields,
        )


# --- login and configuration -----------------------------------------------------


def test_login_stores_a_private_token_that_later_commands_use(berth, live_server, cluster, home):
    result = berth(
        "--url", live_server.url, "login", "--username", "member_a", "--password-stdin",
        stdin=PASSWORD + "\n",
    )  # fmt: skip

    assert result.code == 0, result.err
    assert "Logged in" in result.out and str(home) in result.out
    assert stat.S_IMODE(home.stat().st_mode) == 0o600
    saved = json.loads(home.read_text())
    assert saved["url"] == live_server.url and saved["token"].startswith("bat_")
    token = ApiToken.objects.get()
    assert token.expires_at is not None  # 90 days by default

    whoami = berth("whoami")
    assert whoami.code == 0 and whoami.out.startswith("member_a — alpha (member)")


def test_login_with_a_wrong_password_fails_with_the_auth_code(berth, live_server, cluster, home):
    result = berth(
        "--url", live_server.url, "login", "-u", "member_a", "--password-stdin", stdin="nope\n"
    )
    assert result.code == exitcodes.NOT_AUTHENTICATED
    assert "berth: error:" in result.err
    assert "berth login" not in result.err  # the advice for a stale token, not a wrong password
    assert not home.exists()


def test_a_locked_out_login_says_so_at_once(
    berth, live_server, cluster, home, waits, login_throttle
):
    """The lockout lasts the rest of its window: no retrying (and resending the password)."""
    login = ("--url", live_server.url, "login", "-u", "member_a", "--password-stdin")
    for _ in range(login_throttle - 1):
        assert berth(*login, stdin="nope\n").code == exitcodes.NOT_AUTHENTICATED
    assert "Too many failed logins" in berth(*login, stdin="nope\n").err  # the last guess
    result = berth(*login, stdin=PASSWORD)  # the right password, while locked out
    assert result.code == exitcodes.UNAVAILABLE
    assert "Too many failed logins" in result.err
    assert "retrying" not in result.err and waits == []
    assert not home.exists()


def test_login_takes_url_after_the_command_as_the_docs_write_it(berth, live_server, cluster):
    result = berth(
        "login", "--url", live_server.url, "-u", "member_a", "--password-stdin", stdin=PASSWORD
    )
    assert result.code == 0, result.err
    assert berth("whoami").out.startswith("member_a — alpha (member)")
    # A --url before the command still counts, and one after it wins for that command.
    assert berth("--url", "http://127.0.0.1:9", "whoami", "--url", live_server.url).code == 0


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (["-u", "member_a"], "", "no terminal to ask for the password"),
        ([], PASSWORD, "no terminal to ask for the password"),
        (["--password-stdin"], PASSWORD, "--password-stdin needs --username"),
        (["-u", "member_a", "--password-stdin"], "", "no password on stdin"),
    ],
)
def test_login_without_a_terminal_says_what_to_give(berth, live_server, home, args, stdin, says):
    result = berth("login", "--url", live_server.url, *args, stdin=stdin)
    assert result.code == exitcodes.USAGE
    assert result.err.startswith("berth: error: ") and says in result.err
    assert "Traceback" not in result.err and not home.exists()


def test_logout_revokes_the_token(berth, live_server, cluster, home):
    berth("--url", live_server.url, "login", "-u", "lead_a", "--password-stdin", stdin=PASSWORD)
    assert berth("logout").code == 0
    assert ApiToken.objects.get().revoked_at is not None
    assert berth("whoami").code == exitcodes.NOT_AUTHENTICATED


def test_without_credentials_commands_say_how_to_log_in(berth):
    result = berth("queue")
    assert result.code == exitcodes.NOT_AUTHENTICATED
    assert "berth login" in result.err


def test_a_revoked_token_exits_with_the_auth_code(berth, logged_in, personas):
    logged_in(personas.member_a)
    ApiToken.objects.update(revoked_at=timezone.now())
    result = berth("queue")
    assert result.code == exitcodes.NOT_AUTHENTICATED and "berth login" in result.err


# --- submit ---------------------------------------------------------------------------


def test_submit_prints_the_job_id(berth, logged_in, personas):
    logged_in(personas.member_a)

    result = berth(
        "submit", "-J", "llm", "-N", "2", *JOB, "-e", "LR=3e-4", "--", "torchrun", "t.py"
    )

    assert result.code == 0, result.err
    job = Job.objects.get()
    assert result.out == f"Submitted job {job.pk}\n"
    assert (job.name, job.workers, job.gpus_per_worker) == ("llm", 2, 8)
    assert (job.command, job.env, job.max_runtime_seconds) == (
        ["torchrun", "t.py"],
        {"LR": "3e-4"},
        3600,
    )
    assert job.idempotency_key.startswith("berth-cli-")  # retries of this call are safe


def test_submit_parsable_and_json(berth, logged_in, personas):
    logged_in(personas.member_a)
    job_id = submit(berth)
    assert Job.objects.filter(pk=job_id).exists()

    result = berth("submit", "--json", *JOB, "--", "python", "x.py")
    body = json.loads(result.out)
    assert body["team"] == "alpha" and body["command"] == ["python", "x.py"]


def test_submit_from_a_yaml_file_with_flags_overriding_it(berth, logged_in, personas, tmp_path):
    logged_in(personas.member_a)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: finetune\nflavor: a100-40gb\nimage: pytorch:2.4\ngpus_per_worker: 4\n"
        "time: 2h\ncommand: python finetune.py --lr 0.1\nenv:\n  DATA: /data\n"
    )

    result = berth("submit", "-f", spec, "--priority", "5", "--parsable")

    assert result.code == 0, result.err
    job = Job.objects.get(pk=int(result.out))
    assert (job.name, job.flavor.name, job.priority) == ("finetune", "a100-40gb", 5)
    assert job.command == ["python", "finetune.py", "--lr", "0.1"]
    assert (job.max_runtime_seconds, job.env) == (7200, {"DATA": "/data"})


def test_a_file_of_many_jobs_is_one_all_or_none_bulk_submission(
    berth, logged_in, personas, tmp_path
):
    logged_in(personas.member_a)
    spec = tmp_path / "sweep.json"
    jobs = [
        {"name": f"lr{i}", "flavor": "h100-80gb", "image": "x", "command": ["run"]}
        for i in range(3)
    ]
    spec.write_text(json.dumps({"team": "alpha", "jobs": jobs}))

    result = berth("submit", "-f", spec, "--parsable")

    assert result.code == 0, result.err
    assert [int(i) for i in result.out.split()] == list(
        Job.objects.order_by("pk").values_list("pk", flat=True)
    )

    jobs[1]["workers"] = 0
    spec.write_text(json.dumps({"jobs": jobs}))
    refused = berth("submit", "-f", spec)
    assert refused.code == exitcodes.REFUSED
    assert "jobs[1].workers" in refused.err and Job.objects.count() == 3


def test_array_submits_indexed_tasks(berth, logged_in, personas):
    logged_in(personas.member_a)
    result = berth("submit", "--array", "0-3", "-J", "sweep", *JOB, "--", "python", "t.py")
    assert result.code == 0, result.err
    assert "Submitted array " in result.out and ": 4 tasks [0-3]" in result.out
    assert sorted((j.name, j.env["BERTH_ARRAY_INDEX"]) for j in Job.objects.all()) == [
        (f"sweep-{i}", str(i)) for i in range(4)
    ]  # named NAME-INDEX, as --array always named them, unless the name says {index}


def test_refusals_print_the_servers_field_errors(berth, logged_in, personas):
    logged_in(personas.member_a)

    result = berth("submit", "--flavor", "tpu", "-G", "8", "--image", "x", "--", "run")

    assert result.code == exitcodes.REFUSED
    assert result.err.splitlines() == [
        "berth: error: Invalid request",
        "  flavor: Unknown GPU flavor 'tpu' (flavors: a100-40gb, h100-80gb).",
    ]  # each message once
    assert not Job.objects.exists()


def test_a_gang_the_flavor_can_never_host_is_refused_at_submission(berth, logged_in, personas):
    logged_in(personas.member_a)

    result = berth("submit", "-N", "3", *JOB, "--", "torchrun", "t.py")  # 3 x 8; blocks hold 2

    assert result.code == exitcodes.REFUSED
    assert "  workers: The largest gang of 8-GPU workers the h100-80gb nodes can host is 2" in (
        result.err
    )
    assert result.err.count("The largest gang") == 1
    assert not Job.objects.exists()


def test_a_bad_job_file_is_a_usage_error(berth, logged_in, personas, tmp_path):
    logged_in(personas.member_a)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: [unclosed\n")
    assert berth("submit", "-f", spec).code == exitcodes.USAGE
    assert berth("submit", "--time", "60", *JOB[:-2], "--", "run").code == exitcodes.USAGE


def test_the_same_idempotency_key_submits_once(berth, logged_in, personas):
    logged_in(personas.member_a)
    first = berth("submit", "--parsable", "--idempotency-key", "pipeline-881", *JOB, "--", "run")
    again = berth("submit", "--parsable", "--idempotency-key", "pipeline-881", *JOB, "--", "run")

    assert first.out == again.out and Job.objects.count() == 1
    assert "already submitted" in again.err
    changed = berth("submit", "--idempotency-key", "pipeline-881", "-N", "2", *JOB, "--", "run")
    assert changed.code == exitcodes.REFUSED and "Idempotency-Key" in changed.err


def test_a_full_queue_is_retried_after_retry_after(berth, logged_in, personas, cluster, waits):
    logged_in(personas.member_a)
    cluster.queue_a.max_pending_jobs = 1
    cluster.queue_a.save()
    blocker = submit(berth)
    # While the CLI waits, someone cancels the job that filled the queue.
    waits.then.append(lambda: Job.objects.filter(pk=blocker).update(state="cancelled"))

    result = berth("submit", "--parsable", *JOB, "--", "run")

    assert result.code == 0, result.err
    assert waits[0] >= 30  # the server's Retry-After, not a short backoff
    assert "429 (queue_full)" in result.err


def test_retries_are_bounded(berth, logged_in, personas, cluster, waits, monkeypatch):
    logged_in(personas.member_a)
    monkeypatch.setenv("BERTH_RETRIES", "2")
    cluster.queue_a.max_pending_jobs = 0
    cluster.queue_a.save()

    result = berth("submit", *JOB, "--", "run")

    assert result.code == exitcodes.UNAVAILABLE
    assert len(waits) == 2 and "queue" in result.err


def test_an_unreachable_portal_is_retried_then_reported(berth, monkeypatch, waits):
    monkeypatch.setenv("BERTH_URL", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("BERTH_TOKEN", "bat_x")
    monkeypatch.setenv("BERTH_RETRIES", "3")

    result = berth("queue")

    assert result.code == exitcodes.UNAVAILABLE
    assert len(waits) == 3 and waits == sorted(waits)  # growing backoff
    assert "cannot reach" in result.err


# --- look ----------------------------------------------------------------------------


def test_status_shows_state_reason_position_and_gpus(berth, logged_in, personas, cluster):
    logged_in(personas.member_a)
    job_id = submit(berth)
    Job.objects.filter(pk=job_id).update(
        reason_code="quota", reason="Team uses 16 of 16 h100-80gb GPUs.", queue_position=2
    )

    result = berth("status", job_id)

    assert result.code == 0
    assert "State:       pending (quota)" in result.out
    assert "Position:    2nd in its queue" in result.out
    assert "submitted" in result.out
    assert "Command:     python train.py\n" in result.out
    assert json.loads(berth("status", "--json", job_id).out)["position"] == 2


def test_status_shows_the_command_as_typed_and_times_as_ages(berth, logged_in, personas):
    logged_in(personas.member_a)
    job_id = submit(berth, "-J", "q")
    Job.objects.filter(pk=job_id).update(
        command=["python", "-c", "print('hi')", "--name", "big run"],
        submitted_at=timezone.now() - timezone.timedelta(seconds=20),
        reason_code="reserved",
        reason="it would delay job 3, which needs the team's quota from 2099-01-02T03:04:05Z",
    )

    out = berth("status", job_id).out

    assert "Command:     python -c \"print('hi')\" --name 'big run'\n" in out
    assert re.search(
        r"Submitted:   2\ds ago \((\d{4}-\d\d-\d\d )?\d\d:\d\d UTC\) by member_a", out
    ), out
    assert "quota from 2099-01-02 03:04 UTC (in " in out  # not the raw instant


def test_status_shows_when_a_job_told_to_stop_is_killed(berth, logged_in, personas, cluster):
    """A preempted job whose worker still runs: its signal now, a kill after its grace
    period (Job.stops_by); nothing once the worker has exited, nor for a job never told."""
    logged_in(personas.member_a)
    job_id = submit(berth)
    told = timezone.now() - timezone.timedelta(seconds=20)
    Job.objects.filter(pk=job_id).update(
        state=Job.State.PREEMPTING,
        stop_requested_at=told,
        grace_period_seconds=600,
        checkpoint_signal="SIGUSR1",
    )
    worker = Worker.objects.create(
        job_id=job_id, attempt=0, rank=0, node=cluster.nodes[0], state=Worker.State.STOPPING
    )

    out = berth("status", job_id).out

    assert re.search(
        # (instants on another day carry their date: run ten minutes before midnight,
        # the kill is "by about 2026-12-07 00:02 UTC")
        r"Stop:        asked 2\ds ago \((\d{4}-\d\d-\d\d )?\d\d:\d\d UTC\): SIGUSR1, then a "
        r"kill after its grace period, by about (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC "
        r"\(in 9m\d\ds\)",
        out,
    ), out
    shown = json.loads(berth("status", "--json", job_id).out)
    assert parse_time(shown["stops_by"]) == told + timezone.timedelta(seconds=600)
    Worker.objects.filter(pk=worker.pk).update(state=Worker.State.EXITED)
    assert "Stop:" not in berth("status", job_id).out  # its worker has stopped
    assert json.loads(berth("status", "--json", job_id).out)["stops_by"] is None
    assert "Stop:" not in berth("status", submit(berth)).out  # never told to stop


def test_why_words_an_ended_job_and_keeps_utc_upper_case(berth, logged_in, personas):
    logged_in(personas.member_a)
    pending, done = submit(berth), submit(berth)
    Job.objects.filter(pk=pending).update(
        estimated_start_at=timezone.now() + timezone.timedelta(minutes=20), reason_code="quota"
    )
    finish(done, "succeeded", exit_code=0)

    assert "Estimated start in 19m" in berth("why", pending).out
    assert " UTC)." in berth("why", pending).out
    ended = berth("why", done).out.splitlines()[0]
    assert " succeeded at " in ended and ended.endswith(" with exit code 0.")
    assert " is succeeded" not in ended and " UTC (" in ended


def test_queue_all_shows_no_start_for_a_job_cancelled_while_pending(berth, logged_in, personas):
    logged_in(personas.member_a)
    job_id = submit(berth)
    assert berth("cancel", job_id).code == 0

    (row,) = berth("queue", "--all").out.splitlines()[1:]

    assert row.split()[5] == "cancelled" and row.split()[-1] == "-"


def test_queue_lists_active_jobs_like_squeue(berth, logged_in, personas, cluster):
    logged_in(personas.lead_a)
    mine, done = submit(berth, "-J", "mine"), submit(berth, "-J", "done")
    finish(done, "succeeded", exit_code=0)
    Job.objects.filter(pk=mine).update(reason_code="no_capacity", queue_position=1)

    result = berth("queue")

    lines = result.out.splitlines()
    assert lines[0].split() == [
        "JOBID",
        "TEAM",
        "QUEUE",
        "NAME",
        "USER",
        "STATE",
        "GPUS",
        "POS",
        "REASON",
        "START",
    ]
    assert lines[1].split()[:9] == [
        str(mine),
        "alpha",
        "default",
        "mine",
        "lead_a",
        "pending",
        "8",
        "1",
        "no_capacity",
    ]
    assert len(lines) == 2  # the finished job is not listed
    assert len(json.loads(berth("queue", "--all", "--json").out)) == 2
    assert json.loads(berth("queue", "--state", "succeeded", "--json").out)[0]["id"] == done


def test_queue_me_shows_only_my_jobs(berth, logged_in, personas, cluster):
    from tests.api.conftest import submit as submit_as

    submit_as(cluster.team_a, personas.lead_a)
    logged_in(personas.member_a)
    mine = submit(berth)
    assert [j["id"] for j in json.loads(berth("queue", "--me", "--json").out)] == [mine]


def test_why_explains_in_plain_words(berth, logged_in, personas):
    logged_in(personas.member_a)
    job_id = submit(berth)
    Job.objects.filter(pk=job_id).update(
        reason_code="no_capacity",
        reason="Needs 8 h100-80gb GPUs; 3 are free.",
        queue_position=3,
        estimated_start_at=timezone.now() + timezone.timedelta(minutes=20),
    )

    result = berth("why", job_id)

    assert result.code == 0
    assert "Needs 8 h100-80gb GPUs; 3 are free. (reason: no_capacity)" in result.out
    assert "3rd in alpha/default" in result.out and "in 19m" in result.out
    assert "What would change it:" in result.out


def test_share_shows_quota_usage_and_fair_share(berth, logged_in, personas):
    logged_in(personas.viewer_a)
    result = berth("share")
    assert result.code == 0, result.err
    assert "alpha  h100-80gb  16" in result.out
    assert "Fair share" in result.out and "beta" in result.out
    assert "GPU-hour budgets" not in result.out  # none set


def test_share_shows_the_gpu_hour_budgets(berth, logged_in, personas, cluster):
    set_budget(cluster.team_a, cluster.h100, acting_user=personas.admin, limit_gpu_hours=5000,
               soft_gpu_hours=4000)  # fmt: skip
    start, _ = month_bounds(timezone.now())
    Usage.objects.create(team=cluster.team_a, flavor=cluster.h100, hour=start,
                         gpu_seconds=4100 * 3600)  # fmt: skip
    logged_in(personas.viewer_a)
    result = berth("share")
    assert result.code == 0, result.err
    lines = result.out.split("GPU-hour budgets", 1)[1].splitlines()
    assert lines[1].split() == ["TEAM", "FLAVOR", "PERIOD", "USED", "SOFT", "LIMIT", "USED%",
                                "FORECAST", "STATE"]  # fmt: skip
    assert lines[2].split()[:7] == ["alpha", "h100-80gb", "month", "4,100", "4,000", "5,000", "82%"]
    assert lines[2].split()[-1] == "warn"


def test_share_shows_a_reclaim_backoff_while_it_cools_down(
    berth, logged_in, personas, cluster, settings
):
    """With BERTH_RECLAIM_BACKOFF on, `berth share` says until when a team may not borrow
    a flavor again (the team detail's `reclaim_backoff`); a cooldown that is over is not
    listed, and with the rule off nothing is."""
    now = timezone.now()
    ReclaimBackoff.objects.create(team=cluster.team_a, flavor=cluster.h100, reclaims=3,
                                  last_reclaim_at=now - timezone.timedelta(seconds=60))  # fmt: skip
    ReclaimBackoff.objects.create(team=cluster.team_a, flavor=cluster.a100, reclaims=1,
                                  last_reclaim_at=now - timezone.timedelta(seconds=200))  # fmt: skip
    logged_in(personas.viewer_a)
    assert "Reclaim backoff" not in berth("share").out  # the rule is off
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}
    result = berth("share")
    assert result.code == 0, result.err
    lines = result.out.split("Reclaim backoff", 1)[1].splitlines()
    assert lines[1].split() == ["TEAM", "FLAVOR", "IN_A_ROW", "MAY_BORROW_FROM"]
    row = lines[2].split()
    assert row[:3] == ["alpha", "h100-80gb", "3"] and "(in 2m" in lines[2]  # 240 s, from 60 s ago
    assert len(lines) == 3 or "a100" not in lines[3]  # its 60 s cooldown is over


def test_logs_print_each_ranks_tail(berth, logged_in, personas, cluster):
    logged_in(personas.member_a)
    job_id = submit(berth, "-N", "2")
    for rank in range(2):
        Worker.objects.create(job_id=job_id, attempt=0, rank=rank, node=cluster.nodes[0],
                              log_tail=f"rank {rank} step 10\n")  # fmt: skip

    result = berth("logs", job_id)

    assert result.code == 0
    assert "==> rank 0 on h100-0" in result.out and "rank 1 step 10" in result.out
    assert berth("logs", job_id, "--rank", "1").out == "rank 1 step 10\n"


# --- act -------------------------------------------------------------------------------


def test_cancel_several_jobs(berth, logged_in, personas):
    logged_in(personas.member_a)
    first, second = submit(berth), submit(berth)

    result = berth("cancel", first, second)

    assert result.code == 0
    assert result.out.splitlines() == [f"Cancelled job {first}", f"Cancelled job {second}"]
    assert set(Job.objects.values_list("state", flat=True)) == {"cancelled"}
    assert berth("cancel", first).code == 0  # already cancelled: nothing left to do


def test_cancel_of_another_teams_job_is_not_found(berth, logged_in, personas, cluster):
    from tests.api.conftest import submit as submit_as

    theirs = submit_as(cluster.team_b, personas.lead_b)
    logged_in(personas.lead_a)

    result = berth("cancel", theirs.pk)

    assert result.code == exitcodes.NOT_FOUND
    assert Job.objects.get(pk=theirs.pk).state == "pending"
    assert berth("status", theirs.pk).code == exitcodes.NOT_FOUND


def test_viewer_cannot_cancel(berth, logged_in, personas, cluster):
    from tests.api.conftest import submit as submit_as

    job = submit_as(cluster.team_a, personas.member_a)
    logged_in(personas.viewer_a)
    result = berth("cancel", job.pk)
    assert result.code == exitcodes.REFUSED and "leads" in result.err


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("succeeded", exitcodes.OK),
        ("failed", exitcodes.JOB_FAILED),
        ("cancelled", exitcodes.JOB_CANCELLED),
    ],
)
def test_wait_exit_code_says_how_the_job_ended(berth, logged_in, personas, waits, state, code):
    logged_in(personas.member_a)
    job_id = submit(berth)
    Job.objects.filter(pk=job_id).update(reason_code="no_capacity", queue_position=1)
    # The job runs after the first poll and ends after the second.
    waits.then += [
        lambda: start(job_id),
        lambda: finish(job_id, state, exit_code=0 if state == "succeeded" else 3),
    ]

    result = berth("wait", job_id, "--interval", "2", "--timeout", "60")

    assert result.code == code, result.err
    assert waits == [2.0, 2.0]
    progress = result.err.splitlines()
    assert progress[0].startswith(f"job {job_id}: pending (no_capacity, 1st in queue)")
    assert progress[1].startswith(f"job {job_id}: running")
    assert progress[-1].startswith(f"job {job_id} {state}")


def test_wait_fails_for_a_job_the_cluster_can_no_longer_host(
    berth, logged_in, personas, waits, settings
):
    from portal.core.models import Node
    from portal.core.scheduling import run_pass

    settings.BERTH = settings.BERTH | {"NEVER_FITS_FAIL_AFTER_S": 0.0}
    logged_in(personas.member_a)
    job_id = submit(berth, "-N", "2")  # fits a block of two 8-GPU nodes...
    Node.objects.filter(hostname__in=["h100-1", "h100-3"]).delete()  # ...until they go
    waits.then += [run_pass, run_pass]  # noted as never_fits, then failed

    result = berth("wait", job_id, "--interval", "5", "--timeout", "1h")

    assert result.code == exitcodes.JOB_FAILED, result.err
    assert result.err.splitlines()[-1].startswith(f"job {job_id} failed after waiting 10s: ")
    assert result.err.splitlines()[-1].endswith("could not host it for 0 s (never_fits).")
    why = berth("why", job_id).out
    assert "Last event: failed: The cluster could not host it: needs 16 h100-80gb GPUs" in why
    assert "Reason: Failed: the cluster could not host it for 0 s (never_fits)." in why


def test_wait_gives_up_after_the_timeout(berth, logged_in, personas, waits):
    logged_in(personas.member_a)
    job_id = submit(berth)

    result = berth("wait", job_id, "--timeout", "12s", "--interval", "5")

    assert result.code == exitcodes.WAIT_TIMEOUT
    assert waits == [5.0, 5.0, 2.0]  # never sleeps past the timeout
    assert "still pending after 12s" in result.err


# --- packaging ---------------------------------------------------------------------


def test_the_installed_berth_command_submits_and_reads(live_server, cluster, personas, home):
    """A real subprocess through the console script, as a CI step runs it."""
    script = Path(sys.executable).with_name("berth")
    if not script.exists():
        pytest.skip("the berth console script is not installed (make install)")
    from portal.core.actions.tokens import create_api_token

    _, secret = create_api_token(personas.member_a, name="ci")
    env = os.environ | {
        "BERTH_URL": live_server.url,
        "BERTH_TOKEN": secret,
        "BERTH_CONFIG": str(home),
        "PYTHONPATH": str(ROOT),
    }

    def berth(*args):
        return subprocess.run(
            [str(script), *args], env=env, capture_output=True, text=True, timeout=60
        )

    submitted = berth("submit", "--parsable", *JOB, "--", "python", "train.py")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    status = berth("status", "--json", str(job_id))
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "pending"
    assert berth("status", "999999").returncode == exitcodes.NOT_FOUND


def test_the_cli_does_not_import_django():
    code = (
        "import sys, berthcli.main, berthcli.commands\n"
        "print(','.join(sorted(n for n in sys.modules if n.split('.')[0] in "
        "('django', 'portal', 'rest_framework', 'scheduler'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={"PATH": ""}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_a_message_with_an_impossible_date_is_shown_as_written(berth, logged_in, personas):
    """A cancel reason is the user's own text; one that looks like an instant but is none
    (month 13) must not crash `berth status` or `berth why` for the whole team."""
    from portal.core.actions.jobs import cancel_job

    logged_in(personas.member_a)
    job_id = submit(berth)
    cancel_job(
        Job.objects.get(pk=job_id), actor=personas.member_a, reason="from 2026-13-45T00:00:00Z"
    )

    for command in ("status", "why"):
        result = berth(command, job_id)
        assert result.code == 0, result.err
        assert "from 2026-13-45T00:00:00Z" in result.out


def test_an_unknown_command_names_the_one_meant(capsys):
    """What users of Slurm or kubectl type first, and typos, get the command that does it;
    a word like none gets the list alone. Exit 2 (usage) either way."""
    from berthcli.main import main

    for typed, meant in (("jobs", "queue"), ("scancel", "cancel"), ("sumbit", "submit")):
        assert main([typed]) == 2
        err = capsys.readouterr().err
        assert f"invalid choice: '{typed}'" in err
        assert err.rstrip().endswith(f"Did you mean: berth {meant}?"), err
    assert main(["frobnicate"]) == 2
    assert "Did you mean" not in capsys.readouterr().err


def test_whoami_does_not_say_all_teams_for_a_token_reaching_none(capsys):
    """`teams: []` is a scoped token whose teams were all deleted, not `null` (a review's
    case)."""
    import types

    from berthcli import commands

    me = {
        "username": "u",
        "is_staff": False,
        "teams": [],
        "token": {"prefix": "bat_x", "teams": [], "expires_at": None},
    }
    client = types.SimpleNamespace(get=lambda path: types.SimpleNamespace(body=me))
    commands.whoami(types.SimpleNamespace(json=False), lambda: client)
    out = capsys.readouterr().out
    assert "all your teams" not in out and "reaches no team" in out, out

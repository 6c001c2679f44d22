"""What agents report about workers, and what follows for their gangs.

A gang runs when all its workers of the current attempt run; it succeeds when
all exit 0; it fails as soon as one exits non-zero (the others are then told to
stop, since a failed job is no longer in any node's desired state). A worker
that vanishes (its node lost, or its agent no longer knows it) requeues the
gang, as does the end of a preemption.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from portal.core import statements
from portal.core.actions.jobs import request_scheduling_pass, requeue_or_fail, transition
from portal.core.db import IfNull, bulk_set
from portal.core.models import Job, Worker
from portal.core.statements import GangWorker

State = Job.State
WState = Worker.State
ENDED = (WState.EXITED, WState.LOST)
LIVE = tuple(s for s in WState.values if s not in ENDED)  # a worker that holds its GPUs

# Agent state → portal state. `failed_to_start` is an exit that never ran.
_REPORTED = {
    "starting": WState.STARTING,
    "running": WState.RUNNING,
    "stopping": WState.STOPPING,
    "exited": WState.EXITED,
    "failed_to_start": WState.EXITED,
}
FAILED_TO_START_EXIT = 127
START_FAILURE_CHARS = 1000

# "<job id>.<attempt>.<rank>" in ASCII digits, each within its column's range (a job id
# is a bigint, attempt and rank are positive integers).
WORKER_KEY = re.compile(r"[0-9]{1,18}\.[0-9]{1,9}\.[0-9]{1,9}")


@dataclass(frozen=True)
class WorkerReport:
    key: str
    state: str
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    log_tail: str | None = None


def is_desired(worker: Worker, job: Job) -> bool:
    """A worker should run only while its job is active in the worker's attempt."""
    return job.state in Job.RUNNING_STATES and worker.attempt == job.attempt


def apply_worker_reports(
    workers: dict[str, Worker], reports: Iterable[WorkerReport], *, now: datetime
) -> tuple[list[str], set[int]]:
    """Record the agent's view of one node's workers; return the keys to
    acknowledge and the jobs whose state the reports may have moved on other than to
    running (settle_jobs), so that what `workers` says of those jobs is stale.

    `workers` are all of the node's workers that may be reported (live ones and
    any reported key), keyed by worker key, with `job` selected; they are updated in
    place. Reports of workers that already ended change nothing but are acknowledged
    again.
    """
    reported = {r.key: r for r in reports}
    changed, ended, moved = [], [], set()
    for key, worker in workers.items():
        if worker.state in ENDED:
            continue
        report = reported.get(key)
        update = _from_report(worker, report, now) if report else _unreported(worker)
        if update:
            changed.append(worker)
            if worker.state in ENDED:
                ended.append(worker)
    if changed:
        # One UPDATE … FROM unnest() (db.bulk_set): bulk_update's CASE per row and field
        # was the heaviest Python of a heartbeat that reports exits (docs/benchmarks.md).
        # Only rows that have not ended since they were read: an eviction or an identity
        # reset that marked them lost meanwhile holds their locks until it commits, and
        # the condition is checked on what it wrote (written back as live, a worker held
        # no GPU and the next pass could place another gang on GPUs still in use).
        bulk_set(
            Worker,
            changed,
            ["state", "exit_code", "started_at", "finished_at", "log_tail"],
            where="t.state NOT IN (%s, %s)",
            params=list(ENDED),
        )
        moved = settle_jobs(
            {w.job_id for w in changed},
            ended_workers=ended,
            now=now,
            start_failures=_start_failures(workers, reported),
        )
    ack = [key for key, r in reported.items() if _REPORTED.get(r.state) == WState.EXITED]
    return ack, moved


def _start_failures(
    workers: dict[str, Worker], reported: dict[str, WorkerReport]
) -> dict[int, str]:
    """Why workers failed to start, by worker id: the agent's log tail says it (for a
    container, the engine's refusal), the last line being the runtime's own words."""
    failures = {}
    for key, report in reported.items():
        if report.state == "failed_to_start" and key in workers:
            lines = (report.log_tail or "").strip().splitlines()
            failures[workers[key].pk] = (lines[-1] if lines else "")[-START_FAILURE_CHARS:]
    return failures


def _from_report(worker: Worker, report: WorkerReport, now: datetime) -> bool:
    state = _REPORTED[report.state]
    before = (worker.state, worker.exit_code, worker.log_tail)
    worker.state = state
    if report.log_tail is not None:
        worker.log_tail = report.log_tail[-8192:]
    if state in (WState.RUNNING, WState.STOPPING) and worker.started_at is None:
        worker.started_at = report.started_at or now
    if state == WState.EXITED:
        worker.finished_at = report.finished_at or now
        worker.exit_code = (
            FAILED_TO_START_EXIT
            if report.state == "failed_to_start" and report.exit_code is None
            else report.exit_code
        )
    return before != (worker.state, worker.exit_code, worker.log_tail) or state == WState.EXITED


def _unreported(worker: Worker) -> bool:
    """A worker the agent did not mention: not started yet, or gone."""
    if worker.state == WState.ASSIGNED:
        if is_desired(worker, worker.job):
            return False  # the agent will start it
        worker.state = WState.EXITED  # never started; nothing to stop
        return True
    worker.state = WState.LOST  # it was running and the agent no longer has it
    return True


def lose_workers(workers: list[Worker], *, now: datetime, kind: str, message: str) -> None:
    """Mark workers lost (their node is gone) and settle their gangs."""
    for worker in workers:
        worker.state, worker.finished_at = WState.LOST, now
    bulk_set(Worker, workers, ["state", "finished_at"])
    settle_jobs(
        {w.job_id for w in workers},
        ended_workers=workers,
        now=now,
        lost_kind=kind,
        lost_message=message,
    )


def settle_jobs(
    job_ids: set[int],
    *,
    ended_workers: list[Worker],
    now: datetime,
    lost_kind: str = "worker_lost",
    lost_message: str = "A worker of the gang was lost.",
    start_failures: dict[int, str] | None = None,
) -> set[int]:
    """Release the GPUs of ended workers and move their jobs on (running, done, failed, requeued).
    `start_failures` says why workers (by id) failed to start, for the failed job's reason.
    Returns the jobs whose workers a reply must not tell to run on the caller's copy of
    the job: those it moved on other than to running (done, failed, requeued), and those
    it found, once locked, in a state other than admitted or running (another request
    moved them on after the caller read them: a gang failed by another node, a cancel,
    a preemption)."""
    pg = connection.vendor == "postgresql"
    if ended_workers:
        release = statements.release_allocations if pg else statements.release_allocations_orm
        release([w.pk for w in ended_workers], now)
    # Lock the gangs before reading their workers: when two nodes report the last
    # two workers of one gang at once, each would otherwise read the other's worker
    # as still running and neither would settle the job (it stayed `running` with
    # every worker exited; tests/faults/test_gang_race.py). The second waits here,
    # and READ COMMITTED lets its worker query below see the first one's commit.
    # In id order, so two heartbeats settling the same gangs cannot deadlock.
    lock = statements.lock_jobs if pg else statements.lock_jobs_orm
    jobs = {pk: state for pk, state, _ in lock(sorted(job_ids))}
    current = defaultdict(list)
    for worker in (statements.gang_workers if pg else statements.gang_workers_orm)(list(jobs)):
        current[worker.job_id].append(worker)
    decisions = _decide(jobs, current)
    _carry_out(decisions, now, lost_kind, lost_message, start_failures or {})
    if ended_workers:
        transaction.on_commit(request_scheduling_pass)
    moved = {
        entry[0] if isinstance(entry, tuple) else entry
        for kind, entries in decisions.items()
        if kind != "running"
        for entry in entries
    }
    return moved | {pk for pk, state in jobs.items() if state not in Job.RUNNING_STATES}


def _decide(jobs: dict[int, str], current: dict[int, list[GangWorker]]) -> dict[str, list]:
    """Sort jobs (id → state) into what happens to them; pure, so the rules read in one place."""
    out = defaultdict(list)
    for pk, state in jobs.items():
        gang = current.get(pk, [])
        if not gang:
            continue
        failed = [w for w in gang if w.state == WState.EXITED and w.exit_code not in (0, None)]
        lost = [w for w in gang if w.state == WState.LOST]
        ended = all(w.state in ENDED for w in gang)
        if state == State.PREEMPTING:
            if ended:
                out["preempted"].append(pk)
        elif state in Job.RUNNING_STATES:
            if failed:
                out["failed"].append((pk, failed[0]))
            elif lost:
                out["lost"].append(pk)
            elif ended and all(w.exit_code == 0 for w in gang):
                out["succeeded"].append(pk)
            elif state == State.ADMITTED and all(
                w.state in (WState.RUNNING, WState.EXITED) for w in gang
            ):
                out["running"].append(pk)
    return out


def _carry_out(
    decisions: dict[str, list],
    now: datetime,
    lost_kind: str,
    lost_message: str,
    start_failures: dict[int, str],
) -> None:
    transition(
        decisions["running"],
        from_states=[State.ADMITTED],
        to_state=State.RUNNING,
        kind="started",
        message="All workers are running.",
        started_at=now,
    )
    transition(
        decisions["succeeded"],
        from_states=Job.RUNNING_STATES,
        to_state=State.SUCCEEDED,
        kind="succeeded",
        message="All workers exited with code 0.",
        finished_at=now,
        exit_code=0,
        started_at=IfNull(now),  # it may end before a beat saw it run
    )
    for pk, worker in decisions["failed"]:
        detail = start_failures.get(worker.pk)
        what = (
            f"failed to start (exit code {worker.exit_code}): {detail}"
            if detail
            else f"exited with code {worker.exit_code}"
        )
        transition(
            [pk],
            from_states=Job.RUNNING_STATES,
            to_state=State.FAILED,
            kind="failed",
            message=f"Worker rank {worker.rank} {what}; the gang is stopped.",
            data={"rank": worker.rank, "exit_code": worker.exit_code}
            | ({"detail": detail} if detail else {}),
            finished_at=now,
            stop_requested_at=now,  # the rest of the gang stops from now
            exit_code=worker.exit_code,
            reason_code="worker_failed",
            reason=f"Worker rank {worker.rank} {what}.",
        )
    if decisions["lost"]:
        requeue_or_fail(
            decisions["lost"],
            kind=lost_kind,
            message=lost_message,
            from_states=Job.RUNNING_STATES,
        )
    if decisions["preempted"]:
        requeue_or_fail(
            decisions["preempted"],
            kind="requeued",
            message="Preemption complete: all workers stopped.",
            from_states=[State.PREEMPTING],
        )

"""Import finished jobs: a cluster's past, as if Berth had scheduled it.

The demo seeds its last 30 days this way (portal.whatif.demo). Each job gets
its timeline (submitted, admitted on its nodes, running, preempted and
requeued, finished), and the GPU-seconds it used are accounted as a scheduling
pass would have: hourly showback rows and the half-life-decayed usage behind
fair share. No worker or allocation rows: the nodes may not be registered yet,
and the GPUs of finished jobs are released anyway.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.core.actions.audit import record_event
from portal.core.models import GpuFlavor, Job, JobEvent, Queue, Team
from portal.core.scheduling.usage import (
    HOUR,
    add_decayed_usage,
    add_hourly_usage,
    split_by_hour,
)
from scheduler.fairshare import decay

State = Job.State
# Workers start this long after admission (image pulled, processes up).
START_DELAY_S = 20.0
IMAGE = "ghcr.io/example/trainer:2.4"


@dataclass
class Attempt:
    """One admission of a job: when, on which nodes, when it ended, whether it was preempted."""

    admitted: float  # seconds since the epoch, as every time here
    hosts: tuple[str, ...]
    ended: float | None = None
    preempted_at: float | None = None
    borrowed: int = 0


@dataclass
class FinishedJob:
    team: str
    queue: str
    flavor: str
    user: str
    name: str
    command: list[str]
    workers: int
    gpus_per_worker: int
    priority: int
    preemptible: bool
    max_runtime_seconds: int
    submitted_at: float
    attempts: list[Attempt]
    exit_code: int | None  # None: failed without an exit code (its restart limit)
    # Preempted once more than its restarts allow: the portal fails it (requeue_or_fail).
    restart_limited: bool = False
    # Ran into its max run time: the portal stops and fails it (nodes.stop_overdue_jobs).
    timed_out: bool = False

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def import_finished_jobs(
    jobs: list[FinishedJob], *, acting_user, now: datetime, half_life: float
) -> int:
    """Store the jobs with their timelines and usage; return how many were stored."""
    teams = {t.slug: t for t in Team.objects.all()}
    queues = {(q.team_id, q.name): q for q in Queue.objects.all()}
    flavors = {f.name: f for f in GpuFlavor.objects.all()}
    users = {u.username: u for u in get_user_model().objects.all()}
    with transaction.atomic():
        rows = [_job_row(j, teams, queues, flavors, users) for j in jobs]
        Job.objects.bulk_create(rows, batch_size=500)
        events = [e for row, j in zip(rows, jobs, strict=True) for e in _events(row, j, users)]
        JobEvent.objects.bulk_create(events, batch_size=1000)
        _account(jobs, teams, flavors, now, half_life)
        for team in {j.team for j in jobs}:
            record_event(
                actor=acting_user,
                instance=teams[team],
                action="import",
                note=f"{sum(j.team == team for j in jobs)} finished jobs imported",
            )
    return len(rows)


def _job_row(j: FinishedJob, teams, queues, flavors, users) -> Job:
    team = teams[j.team]
    last = j.attempts[-1]
    return Job(
        team=team,
        queue=queues[(team.pk, j.queue)],
        submitted_by=users.get(j.user),
        flavor=flavors[j.flavor],
        name=j.name,
        image=IMAGE,
        command=j.command,
        workers=j.workers,
        gpus_per_worker=j.gpus_per_worker,
        priority=j.priority,
        preemptible=j.preemptible,
        max_runtime_seconds=j.max_runtime_seconds,
        state=State.SUCCEEDED if j.exit_code == 0 else State.FAILED,
        reason_code=_reason(j)[0],
        reason=_reason(j)[1],
        attempt=len(j.attempts) - 1,
        restart_count=len(j.attempts) - 1,
        exit_code=j.exit_code,
        submitted_at=_at(j.submitted_at),
        admitted_at=_at(last.admitted),
        started_at=_at(min(last.admitted + START_DELAY_S, last.ended)),
        finished_at=_at(last.ended),
    )


def _reason(j: FinishedJob) -> tuple[str, str]:
    """The reason code and sentence a failed job keeps, worded as the portal words them."""
    if j.restart_limited:
        return "restart_limit", "Failed after reaching its restart limit."
    if j.timed_out:
        return "timeout", "Exceeded its max run time."
    return "", ""


def _events(job: Job, j: FinishedJob, users) -> list[JobEvent]:
    def event(at, kind, old, new, message, **data):
        return JobEvent(
            job=job, at=_at(at), kind=kind, from_state=old, to_state=new, message=message, data=data
        )

    shape = f"{j.workers}×{j.gpus_per_worker} {j.flavor} GPUs"
    out = [
        event(
            j.submitted_at,
            "submitted",
            "",
            State.PENDING,
            f"Submitted to {j.team}/{j.queue}: {shape}.",
        )
    ]
    out[0].actor = users.get(j.user)
    for a in j.attempts:
        borrowing = f", borrowing {a.borrowed} GPUs from the cohort" if a.borrowed else ""
        out.append(
            event(
                a.admitted,
                "admitted",
                State.PENDING,
                State.ADMITTED,
                f"Admitted on {', '.join(a.hosts)}{borrowing}.",
            )
        )
        started = min(a.admitted + START_DELAY_S, a.ended)
        out.append(event(started, "running", State.ADMITTED, State.RUNNING, "All workers started."))
        if a.preempted_at is not None:
            reclaimed = "reclaim" if a.borrowed else "priority"
            message = (
                "Its borrowed GPUs were reclaimed by a team under its nominal quota."
                if a.borrowed
                else "A higher-priority job of its queue needed the GPUs."
            )
            out.append(
                event(
                    a.preempted_at,
                    "preempted",
                    State.RUNNING,
                    State.PREEMPTING,
                    message,
                    reason=reclaimed,
                )
            )
        if a is not j.attempts[-1]:
            out.append(
                event(
                    a.ended,
                    "requeued",
                    State.PREEMPTING,
                    State.PENDING,
                    "Preemption complete: all workers stopped. Requeued with its original submit time.",
                )
            )
    end = j.attempts[-1].ended
    if j.restart_limited:
        out.append(
            event(
                end,
                "restart_limit",
                State.PREEMPTING,
                State.FAILED,
                "Preemption complete: all workers stopped. The job reached its restart limit "
                "and is not requeued.",
            )
        )
    elif j.timed_out:
        out.append(
            event(
                end,
                "timeout",
                State.RUNNING,
                State.FAILED,
                "Stopped: the job exceeded its max run time.",
            )
        )
    elif j.exit_code == 0:
        out.append(event(end, "succeeded", State.RUNNING, State.SUCCEEDED, "All workers exited 0."))
    else:
        out.append(
            event(
                end,
                "failed",
                State.RUNNING,
                State.FAILED,
                f"Worker rank 0 exited with code {j.exit_code}; the gang is stopped.",
            )
        )
    return out


def _account(jobs: list[FinishedJob], teams, flavors, now: datetime, half_life: float) -> None:
    """Add the jobs' GPU-seconds to the hourly rows and the decayed usage, as passes do."""
    hourly: dict[tuple[int, int, datetime], float] = defaultdict(float)
    for j in jobs:
        key = (teams[j.team].pk, flavors[j.flavor].pk)
        for a in j.attempts:
            for hour, seconds in split_by_hour(_at(a.admitted), _at(a.ended)):
                hourly[(*key, hour)] += seconds * j.gpus
    add_hourly_usage(hourly)
    _add_decayed(hourly, now, half_life)


def _add_decayed(hourly, now: datetime, half_life: float) -> None:
    """Decay each hour's use from the end of its hour to now, and add it to the running value."""
    decayed: dict[tuple[int, int], float] = defaultdict(float)
    for (team, flavor, hour), seconds in hourly.items():
        age = (now - (hour + HOUR)).total_seconds()
        decayed[(team, flavor)] += decay(seconds, max(0.0, age), half_life)
    add_decayed_usage(decayed, now, half_life)

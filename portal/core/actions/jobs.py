"""A job's life: submit, cancel, requeue, finish. Each change is a conditional
update (`UPDATE … WHERE state IN (…)`) plus a JobEvent, so two processes that
race on one job cannot both win (healthchecks' sendalerts does the same)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.core.jobspec import JobSpec
from portal.core.models import Job, JobEvent, Team

State = Job.State


class QueueFull(Exception):
    """The queue holds its maximum of pending jobs; the caller should retry later."""

    def __init__(self, queue, retry_after: int):
        super().__init__(
            f"Queue {queue.team.slug}/{queue.name} already holds its limit of "
            f"{queue.max_pending_jobs} pending jobs."
        )
        self.retry_after = retry_after


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""

    def __init__(self, job: Job):
        super().__init__(f"Idempotency-Key already used for job {job.pk} with a different request.")
        self.job = job


class InvalidTransition(Exception):
    """The job is not in a state that allows this action (e.g. cancel a finished job)."""


@dataclass
class Submitted:
    job: Job
    created: bool


def transition(
    job_ids: Iterable[int],
    *,
    from_states: Iterable[str],
    to_state: str,
    kind: str,
    message: str = "",
    actor=None,
    data: dict[str, Any] | None = None,
    per_job: dict[int, tuple[str, dict[str, Any]]] | None = None,
    **fields: Any,
) -> list[int]:
    """Move the jobs still in `from_states` to `to_state`; return the ids that moved.

    The row locks make the check and the update one step for each job; jobs that
    another process moved first are left alone and get no event. `per_job` gives
    some jobs their own event (message, data) instead of `message` / `data`.
    """
    ids = list(job_ids)
    if not ids:
        return []
    rows = dict(
        Job.objects.select_for_update()
        .filter(pk__in=ids, state__in=list(from_states))
        .values_list("pk", "state")
    )
    if rows:
        Job.objects.filter(pk__in=rows).update(state=to_state, **fields)
        own = per_job or {}
        JobEvent.objects.bulk_create(
            JobEvent(
                job_id=pk,
                kind=kind,
                from_state=old,
                to_state=to_state,
                actor=_user(actor),
                message=own[pk][0] if pk in own else message,
                data=(own[pk][1] if pk in own else data) or {},
            )
            for pk, old in rows.items()
        )
    return list(rows)


def submit_job(*, team: Team, spec: JobSpec, user, idempotency_key: str | None = None) -> Submitted:
    """Store a pending job and ask for a scheduling pass. Idempotent on the key.

    Raises QueueFull when the queue is at its pending limit and
    IdempotencyConflict when the key was used with another body.
    """
    fingerprint = spec.fingerprint()
    if idempotency_key:
        existing = _by_key(team, idempotency_key, fingerprint)
        if existing:
            return Submitted(existing, created=False)
    try:
        with transaction.atomic():
            job = _create(team, spec, user, idempotency_key, fingerprint)
    except IntegrityError:
        # A concurrent retry with the same key won the race: answer with its job.
        existing = idempotency_key and _by_key(team, idempotency_key, fingerprint)
        if not existing:
            raise
        return Submitted(existing, created=False)
    return Submitted(job, created=True)


def submit_jobs(*, team: Team, specs: list[JobSpec], user) -> list[Job]:
    """Bulk submit (array jobs): all the jobs or none."""
    with transaction.atomic():
        queues = {spec.queue.pk: spec.queue for spec in specs}
        for queue in queues.values():
            _check_room(queue, extra=sum(1 for s in specs if s.queue.pk == queue.pk))
        now = timezone.now()
        jobs = Job.objects.bulk_create(
            _new_job(team, spec, user, None, spec.fingerprint(), now) for spec in specs
        )
        JobEvent.objects.bulk_create(_submitted_event(job, user) for job in jobs)
        transaction.on_commit(request_scheduling_pass)
    return jobs


def cancel_job(job: Job, *, actor, reason: str = "") -> Job:
    """Cancel a pending or active job. Active jobs keep their GPUs until their workers stop."""
    now = timezone.now()
    message = reason or f"Cancelled by {actor}."
    with transaction.atomic():
        moved = transition(
            [job.pk],
            from_states=[State.PENDING],
            to_state=State.CANCELLED,
            kind="cancelled",
            message=message,
            actor=actor,
            finished_at=now,
            reason_code="",
            reason="",
            queue_position=None,
            estimated_start_at=None,
        ) or transition(
            [job.pk],
            from_states=Job.ACTIVE_STATES,
            to_state=State.CANCELLED,
            kind="cancelled",
            message=message,
            actor=actor,
            finished_at=now,
            stop_requested_at=now,
        )
        if not moved:
            job.refresh_from_db(fields=["state"])
            raise InvalidTransition(f"Job {job.pk} already ended ({job.state}); nothing to cancel.")
        transaction.on_commit(request_scheduling_pass)
    job.refresh_from_db()
    return job


def requeue_or_fail(
    job_ids: Iterable[int], *, kind: str, message: str, from_states=Job.ACTIVE_STATES
) -> dict[str, list[int]]:
    """Put interrupted jobs back in the queue with their original submit time,
    or fail those past their restart limit (Slurm's requeue + max restarts)."""
    ids = list(job_ids)
    jobs = Job.objects.filter(pk__in=ids, state__in=list(from_states)).values_list(
        "pk", "restart_count", "max_restarts"
    )
    over = [pk for pk, count, limit in jobs if count >= limit]
    under = [pk for pk, count, limit in jobs if count < limit]
    now = timezone.now()
    failed = transition(
        over,
        from_states=from_states,
        to_state=State.FAILED,
        kind="restart_limit",
        message=f"{message} The job reached its restart limit and is not requeued.",
        finished_at=now,
        reason_code="restart_limit",
        reason="Failed after reaching its restart limit.",
    )
    requeued = transition(
        under,
        from_states=from_states,
        to_state=State.PENDING,
        kind=kind,
        message=f"{message} Requeued with its original submit time.",
        admitted_at=None,
        started_at=None,
        stop_requested_at=None,
        reason_code="requeued",
        reason="Requeued; waiting for the next scheduling pass.",
        restart_count=F("restart_count") + 1,
        attempt=F("attempt") + 1,
    )
    return {"requeued": requeued, "failed": failed}


def request_scheduling_pass() -> None:
    """Ask for a pass soon, debounced so a burst of submits triggers one pass."""
    from portal.core.tasks import request_pass

    request_pass()


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None


def _by_key(team: Team, key: str, fingerprint: str) -> Job | None:
    job = Job.objects.filter(team=team, idempotency_key=key).first()
    if job and job.request_fingerprint != fingerprint:
        raise IdempotencyConflict(job)
    return job


def _check_room(queue, extra: int = 1) -> None:
    pending = Job.objects.filter(queue=queue, state=State.PENDING).count()
    if pending + extra > queue.max_pending_jobs:
        raise QueueFull(queue, retry_after=30)


def _create(team, spec: JobSpec, user, key, fingerprint) -> Job:
    _check_room(spec.queue)
    job = _new_job(team, spec, user, key, fingerprint, timezone.now())
    job.save()
    _submitted_event(job, user).save()
    transaction.on_commit(request_scheduling_pass)
    return job


def _new_job(team, spec: JobSpec, user, key, fingerprint, now) -> Job:
    return Job(
        team=team,
        queue=spec.queue,
        submitted_by=_user(user),
        name=spec.name,
        image=spec.image,
        command=spec.command,
        env=spec.env,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        flavor=spec.flavor,
        priority=spec.priority,
        preemptible=spec.preemptible,
        max_runtime_seconds=spec.max_runtime_seconds,
        checkpoint_signal=spec.checkpoint_signal,
        grace_period_seconds=spec.grace_period_seconds,
        idempotency_key=key,
        request_fingerprint=fingerprint,
        max_restarts=spec.queue.max_restarts,
        submitted_at=now,
        reason_code="new",
        reason="Waiting for the next scheduling pass.",
    )


def _submitted_event(job: Job, user) -> JobEvent:
    return JobEvent(
        job=job,
        at=job.submitted_at,
        kind="submitted",
        to_state=State.PENDING,
        actor=_user(user),
        message=f"Submitted to {job.team.slug}/{job.queue.name}: {job.workers}×{job.gpus_per_worker} {job.flavor.name} GPUs.",
    )

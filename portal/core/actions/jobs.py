"""A job's life: submit, cancel, requeue, finish. Each change is a conditional
update (`UPDATE … WHERE state IN (…)`) plus a JobEvent, so two processes that
race on one job cannot both win (healthchecks' sendalerts does the same)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from portal.celery import app as celery_app
from portal.core import statements, wake
from portal.core.actions import dependencies, store
from portal.core.actions.notifications import notify_job_events, store_job_notify, with_job_notify
from portal.core.db import IfNull, insert_columns, insert_rows, update_rows
from portal.core.jobspec import JobSpec
from portal.core.models import Job, JobEvent, Team
from scheduler.requeue import requeue_backoff

log = logging.getLogger(__name__)

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


@dataclass
class BulkSubmitted:
    ids: list[int]
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
    per_state: dict[str, tuple[str, dict[str, Any]]] | None = None,
    attempts: dict[int, int] | None = None,
    **fields: Any,
) -> list[int]:
    """Move the jobs still in `from_states` to `to_state`; return the ids that moved.

    The row locks make the check and the update one step for each job; jobs that
    another process moved first are left alone and get no event. `attempts` (id ->
    attempt): only jobs still at the attempt the caller decided on move (one requeued
    and admitted again meanwhile is another attempt). `per_job` gives some jobs their
    own event (message, data) instead of `message` / `data`; `per_state` does so by the
    state each job was in when locked.
    """
    ids = list(job_ids)
    if not ids:
        return []
    rows = {
        pk: state
        for pk, state, attempt in lock_jobs(ids, from_states)
        if attempts is None or attempts.get(pk) == attempt
    }
    if rows:
        update_rows(Job, list(rows), {"state": to_state, **fields})
        own = per_job or {}
        by_state = per_state or {}
        events = []
        for pk, old in rows.items():
            text, extra = own.get(pk) or by_state.get(old) or (message, data)
            events.append(
                JobEvent(
                    job_id=pk,
                    kind=kind,
                    from_state=old,
                    to_state=to_state,
                    actor=_user(actor),
                    message=text,
                    data=extra or {},
                )
            )
        _insert_events(events)
        notify_job_events(events)  # webhooks and e-mail, as outbox rows (actions/notifications)
        dependencies.on_transition(list(rows), to_state)  # release or cancel dependents
    return list(rows)


def lock_jobs(job_ids: Iterable[int], states: Iterable[str] | None = None) -> list[tuple]:
    """Lock the jobs (those still in `states`, if given) FOR UPDATE, in id order (one lock
    order for every caller, no deadlocks between them); return their (id, state, attempt)."""
    lock = statements.lock_jobs if connection.vendor == "postgresql" else statements.lock_jobs_orm
    return lock(sorted(job_ids), None if states is None else list(states))


_EVENT_FIELDS = ("job_id", "at", "kind", "from_state", "to_state", "actor_id", "message", "data")


def _insert_events(events: list[JobEvent]) -> None:
    """Insert the events, their ids set: bulk_create, or on PostgreSQL one prepared
    statement from rows (db.insert_rows), which cost a fifth of what the ORM did."""
    if connection.vendor != "postgresql":
        JobEvent.objects.bulk_create(events)
        return
    rows = [{name: getattr(e, name) for name in _EVENT_FIELDS} for e in events]
    for event, pk in zip(events, insert_rows(JobEvent, rows), strict=True):
        event.pk = pk
        event._state.adding = False


@with_job_notify  # a spec with `notify`: its row commits with the job
def submit_job(
    *,
    team: Team,
    spec: JobSpec,
    user,
    idempotency_key: str | None = None,
    only_if: statements.SubmitGuard | None = None,
) -> Submitted | None:
    """Store a pending job and ask for a scheduling pass. Idempotent on the key.

    Raises QueueFull when the queue is at its pending limit, IdempotencyConflict
    when the key was used with another body, and store.Busy when this process
    stores as many jobs as it may at once. The job is stored together with the
    others this process stores at the same moment (actions/store.py: one statement,
    one commit) and this returns only once it is committed.

    `only_if` (PostgreSQL only) is a remembered grant's guard (statements.guard_sql),
    checked in the statement that stores the job: what the caller decided from data
    it remembered still holds. With it, nothing stored (a full queue, a key used
    before, the guard failing) returns None without saying which, and the caller
    asks again without it.
    """
    fingerprint = spec.fingerprint() if idempotency_key else ""
    now = timezone.now()
    row = _job_fields(team, spec, user, idempotency_key, fingerprint, now)
    job = Job(**row)
    if only_if is not None and connection.vendor != "postgresql":
        raise ValueError("submit_job: only_if needs PostgreSQL")
    new = statements.NewJob(row, _submitted_event_fields(team, spec, user, now), only_if)
    job.pk = store.store_job(store.Storing(new, lambda: _insert_with_orm(job, user, spec)))
    job._state.adding = job.pk is None
    if job.pk is not None:
        dependencies.stored(job, spec)  # a dependent job is stored in a transaction (submit._store)
        transaction.on_commit(request_scheduling_pass)
        return Submitted(job, created=True)
    if only_if is not None:
        return None
    existing = idempotency_key and _by_key(team, idempotency_key, fingerprint)
    if existing:
        return Submitted(existing, created=False)
    raise QueueFull(spec.queue, retry_after=30)


def _insert_with_orm(job: Job, user, spec: JobSpec) -> int | None:
    """Room check, job and event in one transaction; the job's id, or None when the key
    exists or the queue is full."""
    try:
        with transaction.atomic():
            if (
                job.idempotency_key
                and Job.objects.filter(
                    team_id=job.team_id, idempotency_key=job.idempotency_key
                ).exists()
            ):
                return None
            if _pending_in(job.queue) >= job.queue.max_pending_jobs:
                return None
            job.save()
            _submitted_event(job, user, spec).save()
    except IntegrityError:
        return None  # a concurrent retry with the same key won the race
    return job.pk


def submit_jobs(
    *, team: Team, specs: list[JobSpec], user, idempotency_key: str | None = None
) -> BulkSubmitted:
    """Bulk submit (array jobs): all the jobs or none; returns their ids in order.

    With an Idempotency-Key the jobs are keyed `KEY#0`, `KEY#1`, … and carry the
    whole request's fingerprint, so a retry of the same request returns the same
    jobs (created False) and a different request with that key raises
    IdempotencyConflict.
    """
    fingerprint = _bulk_fingerprint(specs) if idempotency_key else ""
    if idempotency_key:
        existing = _bulk_by_key(team, idempotency_key, fingerprint, len(specs))
        if existing:
            return BulkSubmitted([job.pk for job in existing], created=False)
    try:
        ids = _bulk_insert(team, specs, user, idempotency_key, fingerprint)
    except IntegrityError:
        existing = idempotency_key and _bulk_by_key(team, idempotency_key, fingerprint, len(specs))
        if not existing:
            raise
        return BulkSubmitted([job.pk for job in existing], created=False)
    return BulkSubmitted(ids, created=True)


def _bulk_insert(team, specs, user, key, fingerprint) -> list[int]:
    with transaction.atomic():
        dependencies.lock_singletons(team, user, specs)
        for queue, count in jobs_per_queue(specs):
            _check_room(queue, extra=count)
        now = timezone.now()
        rows = [
            _job_fields(team, spec, user, key and f"{key}#{i}", fingerprint, now)
            for i, spec in enumerate(specs)
        ]
        if connection.vendor == "postgresql":
            # Rows, not instances: building 2 model instances per job was a fifth of the cost.
            ids = insert_rows(Job, rows)
        else:
            ids = [job.pk for job in Job.objects.bulk_create(Job(**row) for row in rows)]
        events = _submitted_events(team, specs, user, now)
        if connection.vendor == "postgresql":
            insert_columns(JobEvent, len(ids), {"job_id": ids, **events})
        else:
            JobEvent.objects.bulk_create(
                JobEvent(job_id=pk, **{name: column[i] for name, column in events.items()})
                for i, pk in enumerate(ids)
            )
        dependencies.record_dependencies(ids, specs)
        store_job_notify(zip(ids, (spec.notify for spec in specs), strict=True))
        transaction.on_commit(request_scheduling_pass)
    return ids


def _submitted_events(team, specs, user, now) -> dict[str, list]:
    """The `submitted` events of new jobs (but their job ids) as columns: each job's
    _submitted_event_fields, made once for the jobs of one shape (queue, workers,
    GPUs, flavor), which a bulk's jobs mostly share."""
    made: dict[tuple, dict] = {}
    events = []
    for spec in specs:
        shape = (id(spec.queue), spec.workers, spec.gpus_per_worker, id(spec.flavor))
        event = made.get(shape)
        if event is None:
            event = made[shape] = _submitted_event_fields(team, spec, user, now)
        events.append(event)
    return {name: [event[name] for event in events] for name in events[0]}


def jobs_per_queue(specs: list[JobSpec]) -> list[tuple[Any, int]]:
    """Each queue of the specs (by key, in first-seen order) with how many of them it
    gets. Counted by object first: the specs of a bulk share their queue's row."""
    by_object: dict[int, list] = {}
    for spec in specs:
        seen = by_object.get(id(spec.queue))
        if seen is None:
            by_object[id(spec.queue)] = [spec.queue, 1]
        else:
            seen[1] += 1
    by_key: dict[int, list] = {}
    for queue, count in by_object.values():
        by_key.setdefault(queue.pk, [queue, 0])[1] += count
    return [(queue, count) for queue, count in by_key.values()]


def _bulk_fingerprint(specs: list[JobSpec]) -> str:
    return hashlib.sha256("".join(spec.fingerprint() for spec in specs).encode()).hexdigest()


def _bulk_by_key(team: Team, key: str, fingerprint: str, count: int) -> list[Job] | None:
    """The jobs of an earlier bulk request with this key, in request order, or None."""
    keys = [f"{key}#{i}" for i in range(count)]
    jobs = {j.idempotency_key: j for j in Job.objects.filter(team=team, idempotency_key__in=keys)}
    if not jobs:
        return None
    first = jobs.get(keys[0]) or next(iter(jobs.values()))
    if len(jobs) != count or any(j.request_fingerprint != fingerprint for j in jobs.values()):
        raise IdempotencyConflict(first)
    return [jobs[k] for k in keys]


def cancel_job(job: Job, *, actor, reason: str = "") -> Job:
    """Cancel a pending or active job. Active jobs keep their GPUs until their workers stop."""
    message = reason or f"Cancelled by {actor}."
    with transaction.atomic():
        moved = cancel_jobs([job.pk], actor=actor, message=message)
        if not moved:
            job.refresh_from_db(fields=["state"])
            raise InvalidTransition(f"Job {job.pk} already ended ({job.state}); nothing to cancel.")
        transaction.on_commit(request_scheduling_pass)
    job.refresh_from_db()
    return job


def cancel_jobs(job_ids: list[int], *, actor, message: str) -> list[int]:
    """Cancel those of the jobs that are pending or active; return the ids that moved
    (cancel_job for one job, actions.arrays.cancel_array for an array's tasks).

    Every open row is locked first: between the two transitions below, a heartbeat that
    completed a running job's preemption (requeued, pending again) made it escape both,
    and the user's cancel was refused as "already ended" while the job ran again."""
    now = timezone.now()
    lock_jobs(job_ids, Job.OPEN_STATES)
    cancelled = transition(
        job_ids,
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
    )
    done = set(cancelled)
    stopping = transition(
        [pk for pk in job_ids if pk not in done],
        from_states=Job.ACTIVE_STATES,
        to_state=State.CANCELLED,
        kind="cancelled",
        message=message,
        actor=actor,
        finished_at=now,
        # A job already stopping (preempted) keeps its time: its agent does not restart
        # a stop in progress, and the scheduler reads when it will end from it.
        stop_requested_at=IfNull(now),
    )
    wake.wake_job_nodes_on_commit(stopping)  # their workers' stop orders reach them at once
    return cancelled + stopping


def requeue_or_fail(
    job_ids: Iterable[int], *, kind: str, message: str, from_states=Job.ACTIVE_STATES
) -> dict[str, list[int]]:
    """Put interrupted jobs back in the queue with their original submit time, eligible
    again after their requeue backoff (Kueue's requeuingStrategy, scheduler.requeue), or
    fail those past their restart limit (Slurm's requeue + max restarts)."""
    ids = list(job_ids)
    jobs = Job.objects.filter(pk__in=ids, state__in=list(from_states)).values_list(
        "pk", "restart_count", "max_restarts"
    )
    over = [pk for pk, count, limit in jobs if count >= limit]
    under = defaultdict(list)  # requeues after this one -> jobs
    for pk, count, limit in jobs:
        if count < limit:
            under[count + 1].append(pk)
    now = timezone.now()
    failed = transition(
        over,
        from_states=from_states,
        to_state=State.FAILED,
        kind="restart_limit",
        message=f"{message} The job reached its restart limit and is not requeued.",
        finished_at=now,
        stop_requested_at=IfNull(now),  # its workers still running (a lost node's peers) stop
        reason_code="restart_limit",
        reason="Failed after reaching its restart limit.",
    )
    requeued = []
    for requeues, pks in sorted(under.items()):
        requeued += _requeue(pks, requeues, now, kind, message, from_states)
    return {"requeued": requeued, "failed": failed}


def _requeue(ids: list[int], requeues: int, now: datetime, kind, message, from_states) -> list[int]:
    """Requeue jobs that are all at their `requeues`-th requeue, so share one backoff."""
    cfg = settings.BERTH
    delay = requeue_backoff(requeues, cfg["REQUEUE_BACKOFF_BASE_S"], cfg["REQUEUE_BACKOFF_MAX_S"])
    eligible = now + timedelta(seconds=delay)
    when = f"{eligible:%Y-%m-%d %H:%M:%S} UTC"
    again = (
        f"eligible again from {when}, after a backoff of {delay:.0f} s for its requeue {requeues}"
        if delay > 0
        else "eligible again at once"
    )
    return transition(
        ids,
        from_states=from_states,
        to_state=State.PENDING,
        kind=kind,
        message=f"{message} Requeued with its original submit time; {again}.",
        data={"requeues": requeues, "backoff_s": delay, "eligible_at": eligible.isoformat()},
        admitted_at=None,
        started_at=None,
        # Workers of this attempt still running (a lost node's peers) stop from now; a
        # preempted job keeps its preemption's time. Its admission clears it.
        stop_requested_at=IfNull(now),
        eligible_at=eligible,
        reason_code="requeued",
        reason=f"Requeued; {again}.",
        restart_count=F("restart_count") + 1,
        attempt=F("attempt") + 1,
    )


PASS_TASK = "portal.core.tasks.scheduling_pass"
PASS_REQUESTED_KEY = "berth:pass-requested"
_last_pass_request = float("-inf")


def request_scheduling_pass() -> None:
    """Ask for a pass a moment from now, unless one is already queued.

    A burst of submits or job ends thus costs one extra pass, not one each. The task
    is sent by name (``PASS_TASK``), so the actions never import the task module that
    runs the pass (tasks → scheduling → apply → actions). Failure to reach the broker
    is logged, never raised: the job is already committed and the periodic pass
    will pick it up.
    """
    global _last_pass_request
    delay = settings.BERTH["SCHEDULE_DEBOUNCE_S"]
    now = time.monotonic()
    if now - _last_pass_request < delay:
        return  # this process asked moments ago; spare the shared cache a round trip
    _last_pass_request = now
    try:
        if not cache.add(PASS_REQUESTED_KEY, 1, timeout=max(delay * 2, 1)):
            return
        celery_app.send_task(PASS_TASK, countdown=delay, expires=delay + 30, retry=False)
    except Exception:  # noqa: BLE001 — the broker being down must not fail a submit
        log.warning(
            "could not queue an early scheduling pass; the periodic one will run", exc_info=True
        )
        with contextlib.suppress(Exception):
            cache.delete(PASS_REQUESTED_KEY)


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None


def _by_key(team: Team, key: str, fingerprint: str) -> Job | None:
    job = Job.objects.filter(team=team, idempotency_key=key).first()
    if job and job.request_fingerprint != fingerprint:
        raise IdempotencyConflict(job)
    return job


def _pending_in(queue) -> int:
    return Job.objects.filter(queue=queue, state=State.PENDING).count()


def _check_room(queue, extra: int = 1) -> None:
    if _pending_in(queue) + extra > queue.max_pending_jobs:
        raise QueueFull(queue, retry_after=30)


def _job_fields(team, spec: JobSpec, user, key, fingerprint, now) -> dict[str, Any]:
    """A new job's fields, the same for a single and a bulk submission."""
    row = _plain_job_fields(team, spec, user, key, fingerprint, now)
    row.update(dependencies.row_fields(spec))
    if spec.array_id is not None:  # a task of a job array (actions.arrays)
        row |= {"array_id": spec.array_id, "array_index": spec.array_index}
    return row


def _plain_job_fields(team, spec: JobSpec, user, key, fingerprint, now) -> dict[str, Any]:
    return dict(
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


def _submitted_event(job: Job, user, spec: JobSpec) -> JobEvent:
    return JobEvent(job=job, **_submitted_event_fields(job.team, spec, user, job.submitted_at))


def _submitted_event_fields(team, spec: JobSpec, user, at) -> dict[str, Any]:
    """A new job's `submitted` event, but for its job (single and bulk submission)."""
    return dict(
        at=at,
        kind="submitted",
        to_state=State.PENDING,
        actor=_user(user),
        message=f"Submitted to {team.slug}/{spec.queue.name}: "
        f"{spec.workers}×{spec.gpus_per_worker} {spec.flavor.name} GPUs.",
    )

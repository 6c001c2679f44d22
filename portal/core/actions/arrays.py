"""Job arrays (Slurm's `sbatch --array`): submit N tasks from one spec, cancel them as one.

`submit_array` is the one way in (POST /api/v1/arrays/, so the `berth submit --array`
CLI). It parses the index spec (portal.core.arrayspec), then, in one transaction:

1. Authorize: the team the caller may submit to (as submit_many does).
2. Find an earlier array with the same Idempotency-Key: the same request returns it,
   another body answers IdempotencyConflict.
3. Store the JobArray row, then its tasks through submit_many (validation, the queue's
   room for all N tasks, the `submitted` events, the pass request): all or none, as a
   bulk submission is.

The `%` limit is the scheduling pass's (scheduler.arrays, reason `array_limit`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count, Min, Q, Subquery
from django.utils import timezone

from portal.core.actions.jobs import (
    IdempotencyConflict,
    InvalidTransition,
    cancel_jobs,
    request_scheduling_pass,
)
from portal.core.actions.submit import Caller, submit_many
from portal.core.actions.submit import _bulk_lookups as submit_lookups
from portal.core.actions.submit import _team as authorized_team
from portal.core.arrayspec import (
    ARRAY_ENV,
    ArraySpec,
    compact,
    parse_array,
    task_env,
    task_values,
)
from portal.core.jobspec import JobSpec, SpecError
from portal.core.models import Job, JobArray


@dataclass
class ArraySubmitted:
    array: JobArray
    ids: list[int]  # the tasks' job ids, in index order
    indices: list[int]
    created: bool


class ArrayIdempotencyConflict(IdempotencyConflict):
    """The Idempotency-Key was used before for another array request."""

    def __init__(self, array: JobArray):
        Exception.__init__(
            self, f"Idempotency-Key already used for array {array.pk} with a different request."
        )
        self.job = None
        self.array = array


def submit_array(
    caller: Caller,
    slug: str | None,
    values: dict,
    array_text: object,
    *,
    parse_errors: dict[str, list[str]] | None = None,
    idempotency_key: str | None = None,
) -> ArraySubmitted:
    """Submit the tasks of `array_text` (e.g. "0-99%8") from one job's field values;
    raise SpecError (fields `array`, `env`, or the spec's) before anything is stored."""
    spec = _parse(array_text, values, parse_errors or {})
    team = authorized_team(caller, slug)  # 1.
    submit_lookups(caller, team, [values.get("queue") or "default"])  # may submit there
    fingerprint = _fingerprint(values, spec) if idempotency_key else ""
    if idempotency_key:
        earlier = _earlier(team, idempotency_key, fingerprint)  # 2.
        if earlier is not None:
            return earlier
    try:
        with transaction.atomic():
            return _store(caller, team, spec, values, parse_errors, idempotency_key, fingerprint)
    except IntegrityError:
        earlier = idempotency_key and _earlier(team, idempotency_key, fingerprint)
        if not earlier:
            raise
        return earlier  # a concurrent retry with the same key won the race


def _parse(array_text: object, values: dict, parse_errors: dict) -> ArraySpec:
    """The array spec, or SpecError with every problem the array adds to the job's."""
    errors = {}
    try:
        spec = parse_array(array_text)
    except SpecError as exc:
        errors, spec = dict(exc.fields), None
    env = values.get("env")
    taken = sorted(set(ARRAY_ENV) & set(env)) if isinstance(env, dict) else []
    if taken:
        errors["env"] = [f"Set by Berth for each array task, not by the job: {', '.join(taken)}."]
    if errors:
        raise SpecError(parse_errors | errors)
    return spec


def _store(caller, team, spec: ArraySpec, values, parse_errors, key, fingerprint) -> ArraySubmitted:
    """Step 3: the array row, then its tasks (submit_many), in the caller's transaction."""
    array = JobArray.objects.create(
        team=team,
        submitted_by=caller.user if getattr(caller.user, "is_authenticated", False) else None,
        name=str(values.get("name") or "")[:200],
        spec=spec.text,
        size=spec.size,
        task_limit=spec.limit,
        idempotency_key=key,
        request_fingerprint=fingerprint,
        submitted_at=timezone.now(),
    )
    tasks = _Tasks(array.pk, spec, values)
    item = (tasks.values(tasks.longest), dict(parse_errors or {}))
    try:
        _, result = submit_many(caller, None, [item], array=tasks, team=team)
    except SpecError as exc:
        raise SpecError(_task_errors(exc.fields, tasks.longest)) from None
    return ArraySubmitted(array, result.ids, list(spec.indices), created=True)


class _Tasks:
    """The tasks of one array, for submit_many: their field values differ only in the
    index written into the name, the command and the environment, all digits, so the
    task with the longest index (`longest`: the largest) is valid exactly when every
    task is (same characters, the most of them). submit_many validates that one; then
    `tasks` makes every task's spec from it without validating 10,000 times."""

    def __init__(self, array_id: int, spec: ArraySpec, values: dict):
        self.array_id, self.spec, self._values = array_id, spec, values
        self.longest = spec.indices[-1]

    def values(self, index: int) -> dict:
        env = self._values.get("env")
        env = env if isinstance(env, dict) else {}
        return task_values(self._values, index) | {
            "env": task_env(env, self.array_id, index, self.spec)
        }

    def tasks(self, valid: JobSpec) -> list[JobSpec]:
        out = []
        for index in self.spec.indices:
            values = self.values(index)
            task = copy.copy(valid)  # a third of dataclasses.replace's cost, 10,000 times
            task.name, task.command, task.env = values["name"], values["command"], values["env"]
            task.array_id, task.array_index = self.array_id, index
            out.append(task)
        return out


def _task_errors(fields: dict[str, list[str]], index: int) -> dict[str, list[str]]:
    """Bulk errors name the job (`jobs[0].name`); say the field, and for a message that
    may depend on the index, the task it was checked on."""
    out: dict[str, list[str]] = {}
    for name, messages in fields.items():
        if name == "jobs":  # more tasks than the queue may ever hold pending
            out["array"] = messages
            continue
        field = name.partition(".")[2] or name
        where = f" (checked on task {index}, the longest)" if field in _INDEXED else ""
        out.setdefault(field, []).extend(f"{m}{where}" for m in messages)
    return out


_INDEXED = {"name", "command", "env"}  # the fields an index is written into


def _fingerprint(values: dict, spec: ArraySpec) -> str:
    body = json.dumps({"job": values, "array": spec.text}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _earlier(team, key: str, fingerprint: str) -> ArraySubmitted | None:
    array = JobArray.objects.filter(team=team, idempotency_key=key).first()
    if array is None:
        return None
    if array.request_fingerprint != fingerprint:
        raise ArrayIdempotencyConflict(array)
    rows = list(array.tasks.order_by("array_index").values_list("pk", "array_index"))
    return ArraySubmitted(array, [r[0] for r in rows], [r[1] for r in rows], created=False)


def cancel_array(array: JobArray, *, actor, reason: str = "") -> list[int]:
    """Cancel every task of the array that has not ended; return their ids.

    InvalidTransition when every task had already ended (as cancel_job for one job)."""
    message = reason or f"Cancelled by {actor} with its array {array.pk}."
    with transaction.atomic():
        open_ids = list(
            Job.objects.filter(array=array, state__in=Job.OPEN_STATES).values_list("pk", flat=True)
        )
        moved = cancel_jobs(open_ids, actor=actor, message=message)
        if not moved:
            raise InvalidTransition(
                f"Every task of array {array.pk} already ended; nothing to cancel."
            )
        transaction.on_commit(request_scheduling_pass)
    return moved


@dataclass
class ArrayState:
    """An array with how many of its tasks are in each state, and which indices wait."""

    array: JobArray
    counts: dict[str, int]
    pending_indices: list[int]
    first_pending: int | None = None  # the job id of its first pending task

    @property
    def display(self) -> str:
        """squeue's collapsed form, `12_[4-99%8]`: its pending indices (all of them once
        none waits) and its limit."""
        a = self.array
        limit = f"%{a.task_limit}" if a.task_limit else ""
        return f"{a.pk}_[{compact(self.pending_indices) or a.spec.partition('%')[0]}{limit}]"

    @property
    def state(self) -> str:
        """`pending` or `running` while any task is open, else `succeeded` only if all
        did, `failed` if any failed, otherwise `cancelled` (what `berth wait` reports)."""
        c = self.counts
        if any(c.get(s, 0) for s in Job.ACTIVE_STATES):
            return "running"
        if c.get(Job.State.PENDING, 0):
            return "pending"
        if c.get(Job.State.SUCCEEDED, 0) == self.array.size:
            return "succeeded"
        return "failed" if c.get(Job.State.FAILED, 0) else "cancelled"


def array_states(arrays: list[JobArray]) -> dict[int, ArrayState]:
    """Each array's ArrayState, in two queries for any number of arrays."""
    ids = [a.pk for a in arrays]
    counts: dict[int, dict[str, int]] = {pk: {} for pk in ids}
    rows = Job.objects.filter(array_id__in=ids).values_list("array_id", "state")
    for array_id, state, n in rows.annotate(n=Count("pk")).order_by():
        counts[array_id][state] = n
    pending: dict[int, list[int]] = {pk: [] for pk in ids}
    first: dict[int, int] = {}
    waiting = Job.objects.filter(array_id__in=ids, state=Job.State.PENDING)
    for array_id, index, pk in waiting.values_list("array_id", "array_index", "pk").order_by(
        "array_id", "array_index"
    ):
        pending[array_id].append(index)
        first.setdefault(array_id, pk)
    return {a.pk: ArrayState(a, counts[a.pk], pending[a.pk], first.get(a.pk)) for a in arrays}


def collapse_arrays(jobs):
    """`jobs` (a Job queryset) without each array's pending tasks but its first one, which
    stands for them (squeue's `12_[4-99%8]`: the dashboard's queue, `berth queue`)."""
    heads = (
        Job.objects.filter(state=Job.State.PENDING, array__isnull=False)
        .values("array_id")
        .annotate(first=Min("pk"))
        .values("first")
    )
    waiting_task = Q(state=Job.State.PENDING, array__isnull=False)
    return jobs.filter(~waiting_task | Q(pk__in=Subquery(heads)))

"""Job dependencies (Slurm's `--dependency`): hold, release, cancel.

A job submitted with a dependency (`afterok:12:13,singleton`, checked by
portal.core.jobspec) is stored pending and *held* (`awaiting_dependency`, reason
`dependency`): the scheduling snapshot leaves it out, so held jobs cost the pass
nothing however many wait. Its parents are JobDependency rows, written in the same
transaction as the job. The rule that decides is scheduler.dependency.judge; this
module reads the facts it needs in a fixed number of queries and writes the outcome:

- released (every condition met): `awaiting_dependency` off, a `dependency_met`
  event, and a scheduling pass on commit; it then queues with its original submit time;
- cancelled with reason `dependency_never_satisfied` and an event naming the parent
  when a condition can never be met (Slurm's `kill_invalid_depend`), so a CI
  `berth wait` ends instead of hanging; its own dependents are then judged in turn;
- still waiting: its reason sentence says what for ("Waits for job 12 (train) to
  succeed (it is running).").

When it happens: at submission (a parent may already have ended), on every state
change of a parent (actions.jobs.transition calls `on_transition`, in the same
transaction: a job that starts or ends releases or cancels its dependents at once),
and in `sweep_held_jobs`, a periodic safety net (Celery beat) for what a race between
a submission and a parent's change could leave behind. A change that concerns more
than SETTLE_INLINE_MAX held jobs hands them to a Celery task once it commits.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from portal.core import statements
from portal.core.db import bulk_set
from portal.core.models import Job, JobDependency, JobEvent
from scheduler import dependency as rule
from scheduler.reasons import DEPENDENCY, DEPENDENCY_NEVER_SATISFIED

log = logging.getLogger(__name__)
State = Job.State
SWEEP_BATCH = 1000
# More dependents than this released by one transition are judged by a task after it
# commits (SETTLE_TASK), not inside it: a parent with 10,000 children would otherwise
# hold its agent's report for seconds (docs/benchmarks.md).
SETTLE_INLINE_MAX = 500
SETTLE_TASK = "portal.core.tasks.dependency_settle"
# A parent's change that can settle a dependent: it started (after), or it ended.
_TRIGGERS = frozenset({State.RUNNING, *Job.TERMINAL_STATES})
_cascade = threading.local()
# The first key of the advisory locks that serialize singleton submissions (lock_singletons).
SINGLETON_LOCK_CLASS = 0x42E7


def row_fields(spec) -> dict:
    """The fields a new job's row carries for its dependencies (every row names them,
    so that rows of one bulk insert share their fields)."""
    if not spec.is_dependent:
        return {"dependency": "", "awaiting_dependency": False}
    return {
        "dependency": spec.dependency,
        "awaiting_dependency": True,
        "reason_code": DEPENDENCY,
        "reason": f"Waits for its dependencies ({spec.dependency}).",
    }


def submit_dependent_job(*, team, spec, user, idempotency_key=None, only_if=None):
    """actions.jobs.submit_job in a transaction: the job, its event and its edges
    commit together (submit_job's single statement would otherwise commit alone)."""
    from portal.core.actions.jobs import submit_job  # jobs imports this module

    with transaction.atomic():
        lock_singletons(team, user, [spec])
        return submit_job(
            team=team, spec=spec, user=user, idempotency_key=idempotency_key, only_if=only_if
        )


def stored(job: Job, spec) -> None:
    """Hold a job submit_job just stored, if it has dependencies: its held fields (the
    single-job statement leaves them to their database defaults), its edges, and a
    first judgement (a parent may have ended already). In the store's transaction."""
    if spec.is_dependent:
        Job.objects.filter(pk=job.pk).update(**row_fields(spec))
        record_dependencies([job.pk], [spec])


def record_dependencies(ids: list[int], specs: list) -> None:
    """Write the edges of newly stored jobs (ids in the order of their specs) and judge
    the dependent ones; nothing for jobs without dependencies. Inside the store's
    transaction."""
    edges = [
        JobDependency(child_id=pk, parent_id=parent, type=kind)
        for pk, spec in zip(ids, specs, strict=True)
        for kind, parent in spec.depends_on
    ]
    if edges:
        JobDependency.objects.bulk_create(edges)
    held = [pk for pk, spec in zip(ids, specs, strict=True) if spec.is_dependent]
    if held:
        settle(held, at_submit=True)


def on_transition(job_ids: list[int], to_state: str) -> None:
    """Judge the held dependents of jobs that just moved to `to_state` (called by
    actions.jobs.transition for every state change, in its transaction).

    One query finds them (none for most jobs). Cancelling a dependent is itself a
    transition, which lands here again: those are queued and handled by the loop of
    the outermost call, so a long chain cascades without deep recursion."""
    if to_state not in _TRIGGERS or not job_ids:
        return
    queue = getattr(_cascade, "queue", None)
    if queue is not None:
        queue.append((job_ids, to_state))
        return
    _cascade.queue = queue = [(job_ids, to_state)]
    try:
        while queue:
            held = _held_dependents(*queue.pop())
            if len(held) > SETTLE_INLINE_MAX:
                transaction.on_commit(lambda held=held: _settle_later(held))
            elif held:
                settle(held)
    finally:
        _cascade.queue = None


def _settle_later(job_ids: list[int]) -> None:
    """Hand many dependents to a Celery task (sent by name, as the pass request is), so
    the transition that released them (an agent's report) stays short. If the broker
    cannot be reached, the sweep (every 30 s) judges them."""
    from portal.celery import app as celery_app

    try:
        celery_app.send_task(SETTLE_TASK, args=[job_ids], retry=False)
    except Exception:  # noqa: BLE001 — the sweep is the fallback
        log.warning("could not queue the release of %d held jobs", len(job_ids), exc_info=True)


def settle_in_batches(job_ids: list[int]) -> dict[str, int]:
    """settle() SWEEP_BATCH jobs at a time, each batch its own transaction."""
    totals = {"released": 0, "cancelled": 0, "waiting": 0}
    for start in range(0, len(job_ids), SWEEP_BATCH):
        for outcome, ids in settle(job_ids[start : start + SWEEP_BATCH]).items():
            totals[outcome] += len(ids)
    return totals


def _held_dependents(job_ids: list[int], to_state: str) -> list[int]:
    """Held jobs with one of `job_ids` as a parent, and, when they ended, held
    singletons of the same team, user and name: one round trip (statements.py)."""
    find = statements.held_dependents
    if connection.vendor != "postgresql":
        find = statements.held_dependents_orm
    return find(job_ids, to_state in Job.TERMINAL_STATES, rule.SINGLETON)


def settle(job_ids: list[int], *, at_submit: bool = False) -> dict[str, list[int]]:
    """Judge held jobs and release, cancel or re-word each (see the module).

    `at_submit` also locks the parents and same-name jobs the judgement reads (FOR NO
    KEY UPDATE, which a transition's FOR UPDATE waits for and vice versa): a parent
    that ends while its child is being submitted then either sees the child's edge or
    is seen ended by it. Returns the ids by outcome."""
    with transaction.atomic(savepoint=False):
        held = _lock_held(job_ids)
        if not held:
            return {"released": [], "cancelled": [], "waiting": []}
        conditions = _conditions(held, lock=at_submit)
        namesakes = _namesakes(held, lock=at_submit)
        verdicts = {
            pk: rule.judge(pk, conditions[pk], _is_singleton(row), namesakes.get(_key(row), []))
            for pk, row in held.items()
        }
        released = _release(held, {pk for pk, v in verdicts.items() if v.status == rule.MET})
        cancelled = _cancel({pk: v for pk, v in verdicts.items() if v.status == rule.NEVER})
        waiting = {pk: v.sentence for pk, v in verdicts.items() if v.status == rule.WAITING}
        _reword(held, waiting)
    return {"released": released, "cancelled": cancelled, "waiting": sorted(waiting)}


def sweep_held_jobs() -> dict[str, int]:
    """Judge every held job, SWEEP_BATCH at a time (a constant number of queries per
    batch, each batch its own transaction): the safety net behind on_transition, and
    what keeps the waiting sentences current. Celery beat runs it (portal.core.tasks)."""
    totals = {"released": 0, "cancelled": 0, "waiting": 0}
    last = 0
    while True:
        batch = list(
            Job.objects.filter(state=State.PENDING, awaiting_dependency=True, pk__gt=last)
            .order_by("pk")
            .values_list("pk", flat=True)[:SWEEP_BATCH]
        )
        if not batch:
            return totals
        for outcome, ids in settle(batch).items():
            totals[outcome] += len(ids)
        last = batch[-1]


def _lock_held(job_ids: list[int]) -> dict[int, dict]:
    """The jobs of `job_ids` still held, locked in id order (the order every caller uses)."""
    rows = (
        Job.objects.select_for_update()
        .filter(pk__in=job_ids, state=State.PENDING, awaiting_dependency=True)
        .order_by("pk")
        .values("pk", "team_id", "submitted_by_id", "name", "dependency", "reason")
    )
    return {row["pk"]: row for row in rows}


def _conditions(held: dict[int, dict], *, lock: bool) -> dict[int, list]:
    """(type, rule.Parent) pairs per held job, in the order they were written."""
    if lock:
        parents = JobDependency.objects.filter(child_id__in=list(held)).values("parent_id")
        list(
            Job.objects.select_for_update(no_key=True)
            .filter(pk__in=parents)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    edges = (
        JobDependency.objects.filter(child_id__in=list(held))
        .order_by("child_id", "id")
        .values_list(
            "child_id",
            "type",
            "parent_id",
            "parent__name",
            "parent__state",
            "parent__started_at",
            "parent__restart_count",
        )
    )
    out = defaultdict(list)
    for child, kind, pk, name, state, started_at, restarts in edges:
        started = started_at is not None or restarts > 0  # a requeue clears started_at
        out[child].append((kind, rule.Parent(pk, name, state, started)))
    return out


def _is_singleton(row: dict) -> bool:
    return rule.SINGLETON in row["dependency"].split(",")


def _key(row: dict) -> tuple:
    return (row["team_id"], row["submitted_by_id"], row["name"])


def _namesakes(held: dict[int, dict], *, lock: bool) -> dict[tuple, list]:
    """Open jobs sharing a held singleton's team, user and name, by that key."""
    keys = {_key(row) for row in held.values() if _is_singleton(row) and row["submitted_by_id"]}
    if not keys:
        return {}
    match = Q()
    for team, user, name in keys:
        match |= Q(team_id=team, submitted_by_id=user, name=name)
    rows = Job.objects.filter(match, state__in=Job.OPEN_STATES)
    if lock:
        rows = rows.select_for_update(no_key=True).order_by("pk")
    out = defaultdict(list)
    for row in rows.values("pk", "team_id", "submitted_by_id", "name", "state"):
        out[_key(row)].append(rule.Parent(row["pk"], row["name"], row["state"]))
    return out


def lock_singletons(team, user, specs) -> None:
    """Make the submissions of singletons of one team, user and name wait for each other
    until commit: a transaction-scoped advisory lock per name, taken in one order before
    the jobs are stored (so ids follow the lock's order too). Otherwise two submitted at
    once each judge before the other commits, see no namesake and are both released.
    SQLite runs one writer at a time already."""
    if connection.vendor != "postgresql" or user is None:
        return
    names = sorted({f"{team.pk}:{user.pk}:{spec.name}" for spec in specs if spec.singleton})
    statements.lock_names(SINGLETON_LOCK_CLASS, names)


def _release(held: dict[int, dict], ids: set[int]) -> list[int]:
    """Let the jobs into the scheduling snapshot, each with a `dependency_met` event."""
    if not ids:
        return []
    now = timezone.now()
    Job.objects.filter(pk__in=ids).update(
        awaiting_dependency=False,
        eligible_at=now,  # in the queue from now (scheduler: Pass.passed counts from it)
        reason_code="new",
        reason="Its dependencies are met; waiting for the next scheduling pass.",
    )
    JobEvent.objects.bulk_create(
        JobEvent(
            job_id=pk,
            at=now,
            kind="dependency_met",
            message=f"Dependencies met ({held[pk]['dependency']}): it joins the queue "
            "with its original submit time.",
            data={"dependency": held[pk]["dependency"]},
        )
        for pk in sorted(ids)
    )
    from portal.core.actions.jobs import request_scheduling_pass

    transaction.on_commit(request_scheduling_pass)
    return sorted(ids)


def _cancel(verdicts: dict[int, rule.Judgement]) -> list[int]:
    """Cancel the jobs whose dependency can never be met; each event and reason names
    the parent."""
    if not verdicts:
        return []
    from portal.core.actions.jobs import transition

    moved = transition(
        sorted(verdicts),
        from_states=[State.PENDING],
        to_state=State.CANCELLED,
        kind=DEPENDENCY_NEVER_SATISFIED,
        per_job={
            pk: (
                f"Cancelled: {v.sentence}",
                {"parent": v.parent.id, "parent_state": v.parent.state},
            )
            for pk, v in verdicts.items()
        },
        finished_at=timezone.now(),
        awaiting_dependency=False,
        reason_code=DEPENDENCY_NEVER_SATISFIED,
        reason="Cancelled: its dependency can never be met.",
        queue_position=None,
        estimated_start_at=None,
    )
    _set_reasons({pk: verdicts[pk].sentence for pk in moved}, DEPENDENCY_NEVER_SATISFIED)
    return moved


def _reword(held: dict[int, dict], sentences: dict[int, str]) -> None:
    """Write the waiting sentences that changed."""
    changed = {pk: s for pk, s in sentences.items() if held[pk]["reason"] != s}
    _set_reasons(changed, DEPENDENCY)


def _set_reasons(reasons: dict[int, str], code: str) -> None:
    """One reason per job, in one statement on PostgreSQL (db.bulk_set)."""
    jobs = [Job(pk=pk, reason_code=code, reason=text) for pk, text in sorted(reasons.items())]
    bulk_set(Job, jobs, ["reason_code", "reason"])

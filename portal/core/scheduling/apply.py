"""The plan → database writes, inside the pass's one transaction.

Admissions and preemptions are conditional transitions (a job cancelled while
the pass ran is left alone); workers and allocations are bulk inserts; the
verdicts of pending jobs are one bulk update of the rows whose verdict changed.
The partial unique index on active allocations is the backstop against
double booking.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.db.models import BigIntegerField, Case, Value, When

from portal.core.actions.jobs import transition
from portal.core.actions.unfittable import note_or_fail_unfittable
from portal.core.db import bulk_set, bulk_set_values
from portal.core.models import Allocation, Job, Worker
from portal.core.scheduling.snapshot import PassContext
from portal.core.wake import wake_job_nodes_on_commit, wake_nodes_on_commit
from scheduler import model as m
from scheduler.reasons import NEVER_FITS

State = Job.State
# An estimate that moved less than this is not rewritten (saves writes every pass).
ESTIMATE_SLACK_S = 60
VERDICT_FIELDS = ["reason_code", "reason", "queue_position", "estimated_start_at"]


@dataclass
class Applied:
    admitted: list[int]
    preempted: list[int]
    verdicts_written: int


def apply_plan(plan: m.Plan, ctx: PassContext) -> Applied:
    admitted = _admit(plan.admissions, ctx)
    preempted = _preempt(plan.preemptions, ctx)
    written = _write_verdicts(plan.verdicts, ctx)
    _unfittable(plan.verdicts, ctx)
    _wake_changed_nodes(plan, admitted, preempted, ctx)
    return Applied(admitted=admitted, preempted=preempted, verdicts_written=written)


def _admit(admissions: tuple[m.Admission, ...], ctx: PassContext) -> list[int]:
    by_job = {a.job_id: a for a in admissions}
    events = {a.job_id: (_admit_message(a), _placement_data(a)) for a in admissions}
    moved = transition(
        list(by_job),
        from_states=[State.PENDING],
        to_state=State.ADMITTED,
        kind="admitted",
        per_job=events,
        admitted_at=ctx.now,
        reason_code="",
        reason="",
        queue_position=None,
        estimated_start_at=None,
        preempted_by=None,
    )
    if not moved:
        return []
    attempts = dict(Job.objects.filter(pk__in=moved).values_list("pk", "attempt"))
    workers = Worker.objects.bulk_create(
        Worker(job_id=pk, attempt=attempts[pk], rank=p.rank, node_id=ctx.node_ids[p.node])
        for pk in moved
        for p in by_job[pk].placement
    )
    worker_of = {(w.job_id, w.rank): w for w in workers}
    Allocation.objects.bulk_create(
        Allocation(
            job_id=pk,
            worker=worker_of[(pk, p.rank)],
            worker_rank=p.rank,
            node_id=ctx.node_ids[p.node],
            gpu_id=gpu,
            created_at=ctx.now,
        )
        for pk in moved
        for p in by_job[pk].placement
        for gpu in p.gpus
    )
    return moved


def _wake_changed_nodes(plan: m.Plan, admitted: list[int], preempted: list[int], ctx) -> None:
    """Wake, on commit, the nodes whose desired state this pass changed: those given
    workers, and those whose workers it preempts (portal.core.wake)."""
    moved = set(admitted)
    nodes = {
        ctx.node_ids[p.node] for a in plan.admissions if a.job_id in moved for p in a.placement
    }
    wake_nodes_on_commit(nodes)
    if preempted:
        wake_job_nodes_on_commit(preempted)


def _admit_message(a: m.Admission) -> str:
    nodes = sorted({p.node for p in a.placement})
    borrowed = f", borrowing {a.borrowed} GPUs from the cohort" if a.borrowed else ""
    return f"Admitted on {', '.join(nodes)}{borrowed}."


def _placement_data(a: m.Admission) -> dict:
    return {
        "borrowed": a.borrowed,
        "placement": [{"rank": p.rank, "node": p.node, "gpus": list(p.gpus)} for p in a.placement],
    }


def _preempt(preemptions: tuple[m.Preemption, ...], ctx: PassContext) -> list[int]:
    events = {
        p.job_id: (p.message, {"reason": p.reason_code, "preemptor": p.preemptor_id})
        for p in preemptions
    }
    moved = transition(
        list(events),
        from_states=Job.RUNNING_STATES,
        to_state=State.PREEMPTING,
        kind="preempted",
        per_job=events,
        stop_requested_at=ctx.now,
    )
    _name_preemptors(moved, {p.job_id: p.preemptor_id for p in preemptions})
    return moved


def _name_preemptors(moved: list[int], preemptor: dict[int, int]) -> None:
    """Record each victim's preemptor (one UPDATE): the next passes keep the GPUs the
    victim frees reserved for it until it is admitted (scheduler.preemption)."""
    if not moved:
        return
    whens = [When(pk=pk, then=Value(preemptor[pk])) for pk in moved]
    Job.objects.filter(pk__in=moved).update(
        preempted_by=Case(*whens, output_field=BigIntegerField())
    )


def _unfittable(verdicts: tuple[m.Verdict, ...], ctx: PassContext) -> list[int]:
    """Note jobs that became `never_fits`; fail those that stayed so too long."""
    reasons = {v.job_id: v.message for v in verdicts if v.reason_code == NEVER_FITS}
    if not reasons:
        return []
    previous = {pk: ctx.pending_rows[pk]["reason_code"] for pk in reasons if pk in ctx.pending_rows}
    return note_or_fail_unfittable(reasons, previous, ctx.now)


def _write_verdicts(verdicts: tuple[m.Verdict, ...], ctx: PassContext) -> int:
    """Update reason, position and estimate of pending jobs whose verdict changed."""
    changed: list[tuple] = []  # (pk, reason code, reason, position, estimated start)
    for v in verdicts:
        start = (
            datetime.fromtimestamp(v.estimated_start, tz=UTC)
            if v.estimated_start is not None
            else None
        )
        row = ctx.pending_rows.get(v.job_id)
        if row and _same(row, v.reason_code, v.message, v.position, start):
            continue
        changed.append((v.job_id, v.reason_code[:32], v.message, v.position, start))
    if changed:
        _update_pending(changed)
    return len(changed)


def _update_pending(changed: list[tuple]) -> None:
    """Verdicts only describe pending jobs: a job that left `pending` while the
    pass ran keeps its own fields."""
    pks, *columns = zip(*changed, strict=True)
    if connection.vendor != "postgresql":
        jobs = [
            Job(pk=pk, **dict(zip(VERDICT_FIELDS, values, strict=True))) for pk, *values in changed
        ]
        bulk_set(Job, jobs, VERDICT_FIELDS, where="t.state = %s", params=[State.PENDING])
        return
    bulk_set_values(
        Job,
        pks,
        dict(zip(VERDICT_FIELDS, columns, strict=True)),
        where="t.state = %s",
        params=[State.PENDING],
    )


def _same(row: dict, code: str, message: str, position, start) -> bool:
    old = row["estimated_start_at"]
    close = (old is None and start is None) or (
        old is not None
        and start is not None
        and abs((old - start).total_seconds()) < ESTIMATE_SLACK_S
    )
    return (
        row["reason_code"] == code
        and row["reason"] == message
        and row["queue_position"] == position
        and close
    )

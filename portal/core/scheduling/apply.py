"""The plan → database writes, inside the pass's one transaction.

Admissions and preemptions are conditional transitions (a job cancelled while
the pass ran is left alone); workers and allocations are bulk inserts; the
verdicts of pending jobs are one bulk update of the rows whose verdict changed.
The partial unique index on active allocations is the backstop against
double booking.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from django.db import connection

from portal.core import statements
from portal.core.actions.jobs import lock_jobs, transition
from portal.core.actions.unfittable import note_or_fail_unfittable
from portal.core.db import insert_rows
from portal.core.models import Allocation, Job, ReclaimBackoff, Worker
from portal.core.scheduling.snapshot import PassContext, Shown
from portal.core.wake import wake_job_nodes_on_commit, wake_nodes_on_commit
from scheduler import model as m
from scheduler.reasons import NEVER_FITS
from scheduler.requeue import count_reclaims, reclaim_victims

State = Job.State
log = logging.getLogger(__name__)
# An estimate that moved less than this is not rewritten (saves writes every pass).
ESTIMATE_SLACK_S = 60


@dataclass
class Applied:
    admitted: list[int]
    preempted: list[int]
    verdicts_written: int


def apply_plan(plan: m.Plan, ctx: PassContext) -> Applied:
    plan = _on_schedulable_nodes(plan, ctx)
    linked = _lock(plan, ctx)
    admitted = _admit(plan.admissions, ctx)
    preempted = _preempt(plan.preemptions, ctx, admitted, linked)
    if ctx.reclaim_backoff:
        record_reclaims(plan, preempted, ctx.now)
    _store_reservations(plan.reservations, ctx, admitted)
    written = _write_verdicts(plan.verdicts, ctx)
    _unfittable(plan.verdicts, ctx)
    _wake_changed_nodes(plan, admitted, preempted, ctx)
    return Applied(admitted=admitted, preempted=preempted, verdicts_written=written)


def _on_schedulable_nodes(plan: m.Plan, ctx: PassContext) -> m.Plan:
    """Return the plan without its admissions onto a node no longer ready and uncordoned
    (those jobs stay pending for the next pass), the nodes locked before any job row
    (statements.lock_schedulable_nodes). The snapshot read them before an admin's cordon,
    drain or identity reset committed: placed there, a gang broke the cordon's "no new
    work" right after the admin was told it held, or kept a reset node's reinstalled
    machine from registering until the node monitor evicted it."""
    ids = sorted({ctx.node_ids[w.node] for a in plan.admissions for w in a.placement})
    if not ids:
        return plan
    pg = connection.vendor == "postgresql"
    fine = (statements.lock_schedulable_nodes if pg else statements.lock_schedulable_nodes_orm)(ids)
    if len(fine) == len(ids):
        return plan
    kept = [a for a in plan.admissions if all(ctx.node_ids[w.node] in fine for w in a.placement)]
    log.warning("pass: %d admission(s) dropped, their nodes cordoned or not ready meanwhile",
                len(plan.admissions) - len(kept))  # fmt: skip
    return replace(plan, admissions=tuple(kept))


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
        stop_requested_at=None,  # a stop of its previous attempt is over
        reason_code="",
        reason="",
        queue_position=None,
        estimated_start_at=None,
        preempted_by=None,
        reserved_on=[],
        reserved_until=None,
        reserved_ending=[],
    )
    if not moved:
        return []
    attempts = ctx.attempts  # the snapshot's: a job pending then and now kept its attempt
    if any(pk not in attempts for pk in moved):  # a plan not from this snapshot
        attempts = dict(Job.objects.filter(pk__in=moved).values_list("pk", "attempt"))
    node_ids = ctx.node_ids
    places = [(pk, p) for pk in moved for p in by_job[pk].placement]  # a worker each
    workers = [
        {"job_id": pk, "attempt": attempts[pk], "rank": p.rank, "node_id": node_ids[p.node]}
        for pk, p in places
    ]
    worker_ids = _insert(Worker, workers)
    _insert(
        Allocation,
        [
            {
                "job_id": pk,
                "worker_id": worker_id,
                "worker_rank": p.rank,
                "node_id": node_ids[p.node],
                "gpu_id": gpu,
                "created_at": ctx.now,
            }
            for (pk, p), worker_id in zip(places, worker_ids, strict=True)
            for gpu in p.gpus
        ],
    )
    return moved


def _linked(admitted: list[int], ctx: PassContext) -> list[int]:
    """Return the jobs, stopping or requeued, whose `preempted_by` names an admitted job.

    The snapshot names them (`ctx.links`), so no scan: `preempted_by` stays out of every
    index and the verdict updates of every pass stay heap-only. A plan not built from
    this snapshot (its jobs are not the snapshot's pending ones) asks the table."""
    if any(pk not in ctx.attempts for pk in admitted):
        return list(Job.objects.filter(preempted_by__in=admitted).values_list("pk", flat=True))
    return [v for pk in admitted for v in ctx.links.get(pk, ())]


def _end_links(linked: list[int], admitted: list[int]) -> None:
    """The admitted preemptors' reservations are spent: their victims' links end
    (scheduler.model.PendingJob.preempted_by). The caller holds the rows' locks."""
    if linked:
        Job.objects.filter(pk__in=linked, preempted_by__in=admitted).update(preempted_by=None)


def _store_reservations(
    reservations: tuple[m.Reservation, ...], ctx: PassContext, admitted: list[int]
) -> None:
    """Store where each waiting preemptor holds its GPUs, and the jobs reaching their max
    runtime its claim counted on with their horizon (scheduler.model.PendingJob.
    reserved_on, reserved_ending, reserved_until), so the next pass keeps them; clear
    them where the plan names none. Only rows that change are written (one statement):
    the preemptors, not every pending job."""
    held = {r.job_id: (r.nodes, r.until, r.ending) for r in reservations}
    gone = set(admitted)
    changed = {
        pk: stored
        for pk, stored in held.items()
        if _stored(ctx.reserved.get(pk)) != _stored(stored) and pk not in gone
    }
    changed.update((pk, ((), None, ())) for pk in ctx.reserved if pk not in held and pk not in gone)
    if not changed:
        return
    pks = sorted(changed)
    store = (
        statements.store_reservations
        if connection.vendor == "postgresql"
        else statements.store_reservations_orm
    )
    store(
        pks,
        [[[name, gpus] for name, gpus in changed[pk][0]] for pk in pks],
        [_when(changed[pk][1]) for pk in pks],
        [list(changed[pk][2]) for pk in pks],
    )


def _stored(reservation: tuple | None) -> tuple:
    """A reservation as its row stores it: nodes, the horizon to the microsecond, and the
    jobs it counted on."""
    if reservation is None:
        return (), None, ()
    nodes, until, ending = reservation
    return nodes, None if until is None else round(until, 6), tuple(ending)


def _when(seconds: float | None) -> datetime | None:
    """Seconds since the epoch (the scheduler's time) as the aware datetime a row stores."""
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def _insert(model, rows: list[dict]) -> list[int]:
    """Insert the rows (field → value, every row the same fields); their ids in order."""
    if connection.vendor == "postgresql":
        return insert_rows(model, rows)  # no model instance a row
    return [obj.pk for obj in model.objects.bulk_create(model(**row) for row in rows)]


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


def _lock(plan: m.Plan, ctx: PassContext) -> list[int]:
    """Lock every job row the plan writes, in one call, in id order, as every writer of
    job rows locks them: those it admits, those it stops, and the victims whose links to
    the admitted ones end (a stopping victim's row is also its node's heartbeat's; locks
    taken in turn could each wait for a row another writer holds). Return the latter."""
    planned = [a.job_id for a in plan.admissions]
    linked = _linked(planned, ctx) if planned else []
    rows = {*planned, *linked, *(p.job_id for p in plan.preemptions)}
    if len(rows) > len(planned) and planned:  # admissions alone: their transition locks them
        lock_jobs(rows)
    return linked


def _preempt(
    preemptions: tuple[m.Preemption, ...],
    ctx: PassContext,
    admitted: list[int],
    linked: list[int],
) -> list[int]:
    """Stop the victims and name their preemptor; end the links that name the jobs just
    admitted (the rows are locked already: _lock)."""
    events = {
        p.job_id: (p.message, {"reason": p.reason_code, "preemptor": p.preemptor_id})
        for p in preemptions
    }
    _end_links(linked, admitted)
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


def record_reclaims(plan: m.Plan, preempted: list[int], now: datetime) -> list[tuple[int, int]]:
    """Count the pass's reclaims for the reclaim backoff (`BERTH_RECLAIM_BACKOFF`): one per
    team and flavor whose borrowed jobs it stopped (scheduler.requeue.count_reclaims, as
    the simulator counts them). Return the (team, flavor) ids whose cooldown it started.
    A victim another process ended first (not in `preempted`) was not reclaimed."""
    stopped = set(preempted)
    victims = [pk for pk in reclaim_victims(plan) if pk in stopped]
    if not victims:
        return []
    pairs = set(Job.objects.filter(pk__in=victims).values_list("team_id", "flavor_id"))
    rows = ReclaimBackoff.objects.filter(
        team_id__in={t for t, _ in pairs}, flavor_id__in={f for _, f in pairs}
    ).values_list("team_id", "flavor_id", "reclaims", "last_reclaim_at")
    state = {(t, f): (count, at.timestamp()) for t, f, count, at in rows}
    started = count_reclaims(state, pairs, now.timestamp())
    ReclaimBackoff.objects.bulk_create(  # one upsert (INSERT ... ON CONFLICT), both databases
        [
            ReclaimBackoff(team_id=t, flavor_id=f, reclaims=state[(t, f)][0], last_reclaim_at=now)
            for t, f in started
        ],
        update_conflicts=True,
        unique_fields=["team", "flavor"],
        update_fields=["reclaims", "last_reclaim_at"],
    )
    for t, f in started:
        log.info(
            "reclaim backoff",
            extra={"team_id": t, "flavor_id": f, "reclaims": state[(t, f)][0]},
        )
    return started


def _name_preemptors(moved: list[int], preemptor: dict[int, int]) -> None:
    """Record each victim's preemptor (one UPDATE): the next passes keep the GPUs the
    victim frees reserved for it until it is admitted (scheduler.preemption)."""
    if not moved:
        return
    name = (
        statements.name_preemptors
        if connection.vendor == "postgresql"
        else statements.name_preemptors_orm
    )
    name(moved, [preemptor[pk] for pk in moved])


def _unfittable(verdicts: tuple[m.Verdict, ...], ctx: PassContext) -> list[int]:
    """Note jobs that became `never_fits`; fail those that stayed so too long."""
    reasons = {v.job_id: v.message for v in verdicts if v.reason_code == NEVER_FITS}
    if not reasons:
        return []
    previous = {pk: ctx.pending_rows[pk].reason_code for pk in reasons if pk in ctx.pending_rows}
    return note_or_fail_unfittable(reasons, previous, ctx.now)


def _write_verdicts(verdicts: tuple[m.Verdict, ...], ctx: PassContext) -> int:
    """Update reason, position and estimate of pending jobs whose verdict changed."""
    changed: list[tuple] = []  # (pk, reason code, reason, position, estimated start)
    shown = ctx.pending_rows
    for v in verdicts:
        row = shown.get(v.job_id)
        if row is not None and _same(row, v):
            continue
        start = _when(v.estimated_start)
        changed.append((v.job_id, v.reason_code[:32], v.message, v.position, start))
    if changed:
        _update_pending(changed)
    return len(changed)


def _update_pending(changed: list[tuple]) -> None:
    """Verdicts only describe pending jobs: a job that left `pending` while the
    pass ran keeps its own fields."""
    write = (
        statements.write_verdicts
        if connection.vendor == "postgresql"
        else statements.write_verdicts_orm
    )
    write(*zip(*changed, strict=True))


def _same(row: Shown, v: m.Verdict) -> bool:
    """Whether the row already shows the verdict (an estimate within ESTIMATE_SLACK_S)."""
    if row.reason_code != v.reason_code or row.reason != v.message:
        return False
    if row.queue_position != v.position:
        return False
    old, start = row.estimated_start, v.estimated_start
    if old is None or start is None:
        return old is start
    return abs(old - start) < ESTIMATE_SLACK_S

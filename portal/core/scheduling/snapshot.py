"""Database rows → the scheduler's frozen snapshot, in a fixed number of queries.

Nothing here loops over jobs issuing queries: every read is one query over a
whole table slice (nodes with their free GPUs, running jobs with their
allocations, teams, quotas, usage, pending jobs, GPU-hour budgets if a team has
one), so a pass costs the same round trips at 10 or 10,000 jobs. The node and job
reads are hand-written statements on PostgreSQL (portal/core/statements.py, each
beside its ORM twin, which SQLite runs): rows as tuples, times as seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from portal.core import statements
from portal.core.actions.workers import ENDED
from portal.core.budgets import BudgetStatus, budget_statuses
from portal.core.models import Job
from portal.core.scheduling.teams import scheduler_teams
from scheduler import model as m


class Shown(NamedTuple):
    """A pending job's verdict as its row holds it before the pass (the estimated start
    in seconds since the epoch): apply writes back only the verdicts that changed."""

    reason_code: str
    reason: str
    queue_position: int | None
    estimated_start: float | None


@dataclass
class PassContext:
    """What the apply step needs besides the plan: ids behind the snapshot's names."""

    now: datetime
    node_ids: dict[str, int] = field(default_factory=dict)  # hostname → Node.pk
    team_ids: dict[str, int] = field(default_factory=dict)  # slug → Team.pk
    flavor_ids: dict[str, int] = field(default_factory=dict)  # name → GpuFlavor.pk
    pending_rows: dict[int, Shown] = field(default_factory=dict)  # Job.pk → its verdict now
    attempts: dict[int, int] = field(default_factory=dict)  # Job.pk → attempt, of pending jobs
    budgets: list[BudgetStatus] = field(default_factory=list)  # behind Snapshot.budgets
    # preemptor pk → the jobs whose `preempted_by` names it (stopping or requeued)
    links: dict[int, list[int]] = field(default_factory=dict)
    # Job.pk → the reservation its row stores (Job.reserved_on, reserved_until as
    # seconds, reserved_ending), of pending jobs with one
    reserved: dict[int, tuple[tuple[tuple[str, int], ...], float | None, tuple[int, ...]]] = field(
        default_factory=dict
    )
    # whether the pass counts its reclaims (PolicyConfig.reclaim_backoff: apply.record_reclaims)
    reclaim_backoff: bool = False


def build_snapshot(now: datetime, config: m.PolicyConfig) -> tuple[m.Snapshot, PassContext]:
    ctx = PassContext(now=now, reclaim_backoff=config.reclaim_backoff)
    nodes = _nodes(ctx)
    running = _running(ctx)
    budgeted: set[int] = set()
    teams = _teams(ctx, now, config, budgeted)
    pending = _pending(ctx)
    ctx.budgets = budget_statuses(now) if budgeted else []  # none: no query
    snapshot = m.Snapshot(
        now=now.timestamp(),
        nodes=tuple(nodes),
        teams=tuple(teams),
        running=tuple(running),
        pending=tuple(pending),
        config=config,
        budgets=tuple(b.for_scheduler() for b in ctx.budgets),
    )
    return snapshot, ctx


def _nodes(ctx: PassContext) -> list[m.Node]:
    """Ready, uncordoned nodes with their healthy GPUs that no active allocation holds."""
    rows = statements.schedulable_nodes() if _postgresql() else statements.schedulable_nodes_orm()
    nodes = []
    for row in rows:
        ctx.node_ids[row.hostname] = row.pk
        ctx.flavor_ids[row.flavor] = row.flavor_id
        nodes.append(
            m.Node(
                name=row.hostname,
                flavor=row.flavor,
                free_gpus=row.free_gpus,
                total_gpus=row.total_gpus,
                rack=row.rack,
                block=row.block,
            )
        )
    return nodes


def _running(ctx: PassContext) -> list[m.RunningJob]:
    """Every job holding GPUs, whatever its state: a cancelled job whose workers are
    still stopping holds them as surely as a running one."""
    rows = statements.running_jobs() if _postgresql() else statements.running_jobs_orm()
    running = []
    flavor_ids, Running, Place, active = ctx.flavor_ids, m.RunningJob, m.WorkerPlacement, RUNNING
    for row in rows:
        flavor_ids[row.flavor] = row.flavor_id
        placement = tuple(Place(rank, host, gpus) for rank, host, gpus in row.placement)
        stopping = row.state not in active
        if row.preempted_by is not None:
            ctx.links.setdefault(row.preempted_by, []).append(row.pk)
        running.append(
            Running(
                id=row.pk,
                team=row.team,
                queue=row.queue,
                flavor=row.flavor,
                gpus=sum(len(p.gpus) for p in placement),
                priority=row.priority,
                submitted_at=row.submitted_at,
                started_at=row.started_at,
                max_runtime=row.max_runtime,
                placement=placement,
                preemptible=row.preemptible,
                stopping=stopping,
                checkpointed_at=row.checkpointed_at,
                grace_period=row.grace_period,
                preempted_by=row.preempted_by if stopping else None,
                array_id=row.array_id,
                stop_requested_at=row.stop_requested_at if stopping else None,
            )
        )
    return running


RUNNING = frozenset(Job.RUNNING_STATES)


def _teams(ctx: PassContext, now: datetime, config: m.PolicyConfig, budgeted: set) -> list[m.Team]:
    teams = scheduler_teams(
        now,
        config.half_life,
        flavor_ids=ctx.flavor_ids,
        budgeted=budgeted,
        reclaims=config.reclaim_backoff,
    )
    ctx.team_ids.update({team.name: pk for pk, team in teams.items()})
    return list(teams.values())


def _pending(ctx: PassContext) -> list[m.PendingJob]:
    """Pending jobs, each with whether its previous attempt still has live workers
    (one EXISTS in the same query; the core makes it wait: `previous_attempt`). Jobs
    held for their dependencies are not among them (actions.dependencies releases them)."""
    read = statements.pending_jobs if _postgresql() else statements.pending_jobs_orm
    pending = []
    shown, attempts, flavor_ids, Pending = (
        ctx.pending_rows,
        ctx.attempts,
        ctx.flavor_ids,
        m.PendingJob,
    )
    for row in read(ENDED):
        shown[row.pk] = Shown(row.reason_code, row.reason, row.queue_position, row.estimated_start)
        attempts[row.pk] = row.attempt
        flavor_ids[row.flavor] = row.flavor_id
        if row.preempted_by is not None:
            ctx.links.setdefault(row.preempted_by, []).append(row.pk)
        reserved_on, reserved_until, reserved_ending = (), None, ()
        if row.reserved_on:
            reserved_on = tuple((str(n), int(k)) for n, k in row.reserved_on)
            reserved_until = row.reserved_until
            reserved_ending = tuple(int(pk) for pk in row.reserved_ending)
            ctx.reserved[row.pk] = (reserved_on, reserved_until, reserved_ending)
        pending.append(
            Pending(
                id=row.pk,
                team=row.team,
                queue=row.queue,
                flavor=row.flavor,
                workers=row.workers,
                gpus_per_worker=row.gpus_per_worker,
                priority=row.priority,
                submitted_at=row.submitted_at,
                max_runtime=row.max_runtime,
                preemptible=row.preemptible,
                restart_count=row.restart_count,
                eligible_at=row.eligible_at,
                preempted_by=row.preempted_by,
                reserved_on=reserved_on,
                reserved_until=reserved_until,
                reserved_ending=reserved_ending,
                previous_attempt_stopping=row.draining,
                array_id=row.array_id,
                array_limit=row.array_limit,
                grace_period=row.grace_period,
            )
        )
    return pending


def _postgresql() -> bool:
    return connection.vendor == "postgresql"

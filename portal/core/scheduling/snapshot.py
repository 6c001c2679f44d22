"""Database rows → the scheduler's frozen snapshot, in a fixed number of queries.

Nothing here loops over jobs issuing queries: every read is one query over a
whole table slice (nodes, GPUs, active allocations, teams, quotas, usage,
pending jobs, GPU-hour budgets), so a pass costs the same round trips at 10 or
10,000 jobs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Exists, OuterRef

from portal.core.budgets import BudgetStatus, budget_statuses
from portal.core.models import Allocation, Gpu, Job, Node, Worker
from portal.core.scheduling.teams import scheduler_teams
from scheduler import model as m


@dataclass
class PassContext:
    """What the apply step needs besides the plan: ids behind the snapshot's names."""

    now: datetime
    node_ids: dict[str, int] = field(default_factory=dict)  # hostname → Node.pk
    team_ids: dict[str, int] = field(default_factory=dict)  # slug → Team.pk
    flavor_ids: dict[str, int] = field(default_factory=dict)  # name → GpuFlavor.pk
    pending_rows: dict[int, dict] = field(default_factory=dict)  # Job.pk → current verdict fields
    running_rows: dict[int, dict] = field(default_factory=dict)
    budgets: list[BudgetStatus] = field(default_factory=list)  # behind Snapshot.budgets


def build_snapshot(now: datetime, config: m.PolicyConfig) -> tuple[m.Snapshot, PassContext]:
    ctx = PassContext(now=now)
    nodes = _nodes(ctx)
    running = _running(ctx, now)
    teams = _teams(ctx, now, config)
    pending = _pending(ctx)
    ctx.budgets = budget_statuses(now)
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
    rows = list(
        Node.objects.filter(condition=Node.Condition.READY, cordon=Node.Cordon.NONE).values_list(
            "pk", "hostname", "flavor_id", "flavor__name", "rack", "block"
        )
    )
    held = Allocation.objects.filter(gpu=OuterRef("pk"), active=True)
    gpus = (
        Gpu.objects.filter(node_id__in=[r[0] for r in rows], health=Gpu.Health.HEALTHY)
        .annotate(held=Exists(held))
        .values_list("pk", "node_id", "held")
        .order_by("node_id", "index")
    )
    free, total = defaultdict(list), defaultdict(int)
    for gpu_id, node_id, is_held in gpus:
        total[node_id] += 1
        if not is_held:
            free[node_id].append(gpu_id)
    nodes = []
    for pk, hostname, flavor_id, flavor, rack, block in rows:
        ctx.node_ids[hostname] = pk
        ctx.flavor_ids[flavor] = flavor_id
        nodes.append(
            m.Node(
                name=hostname,
                flavor=flavor,
                free_gpus=tuple(free[pk]),
                total_gpus=total[pk],
                rack=rack,
                block=block,
            )
        )
    return nodes


def _running(ctx: PassContext, now: datetime) -> list[m.RunningJob]:
    """Every job holding GPUs, whatever its state: a cancelled job whose workers are
    still stopping holds them as surely as a running one."""
    placements = defaultdict(lambda: defaultdict(list))
    hosts = {}
    allocations = Allocation.objects.filter(active=True).values_list(
        "job_id", "worker_rank", "node_id", "node__hostname", "gpu_id"
    )
    for job_id, rank, node_id, hostname, gpu_id in allocations:
        placements[job_id][(rank, hostname)].append(gpu_id)
        hosts[node_id] = hostname
    jobs = Job.objects.filter(pk__in=list(placements)).values(
        "pk",
        "team__slug",
        "queue__name",
        "flavor__name",
        "flavor_id",
        "workers",
        "gpus_per_worker",
        "priority",
        "submitted_at",
        "admitted_at",
        "max_runtime_seconds",
        "preemptible",
        "state",
        "last_checkpoint_at",
        "grace_period_seconds",
        "stop_requested_at",
        "preempted_by",
        "array_id",
    )
    running = []
    for row in jobs:
        ctx.running_rows[row["pk"]] = row
        ctx.flavor_ids[row["flavor__name"]] = row["flavor_id"]
        places = tuple(
            m.WorkerPlacement(rank=rank, node=host, gpus=tuple(sorted(gpus)))
            for (rank, host), gpus in sorted(placements[row["pk"]].items())
        )
        running.append(_running_job(row, places, now))
    return running


def _running_job(row: dict, placement: tuple, now: datetime) -> m.RunningJob:
    stopping = row["state"] not in Job.RUNNING_STATES
    started = row["admitted_at"] or row["submitted_at"]
    return m.RunningJob(
        id=row["pk"],
        team=row["team__slug"],
        queue=row["queue__name"],
        flavor=row["flavor__name"],
        gpus=sum(len(p.gpus) for p in placement),
        priority=row["priority"],
        submitted_at=row["submitted_at"].timestamp(),
        started_at=started.timestamp(),
        max_runtime=float(row["max_runtime_seconds"]),
        placement=placement,
        preemptible=row["preemptible"],
        stopping=stopping,
        checkpointed_at=row["last_checkpoint_at"].timestamp()
        if row["last_checkpoint_at"]
        else None,
        grace_period=float(row["grace_period_seconds"]),
        preempted_by=row["preempted_by"] if stopping else None,
        array_id=row["array_id"],
    )


def _teams(ctx: PassContext, now: datetime, config: m.PolicyConfig) -> list[m.Team]:
    teams = scheduler_teams(now, config.half_life, flavor_ids=ctx.flavor_ids)
    ctx.team_ids.update({team.name: pk for pk, team in teams.items()})
    return list(teams.values())


def _pending(ctx: PassContext) -> list[m.PendingJob]:
    """Pending jobs, each with whether its previous attempt still has live workers
    (one EXISTS in the same query; the core makes it wait: `previous_attempt`). Jobs
    held for their dependencies are not among them (actions.dependencies releases them)."""
    old_workers = Worker.objects.filter(job=OuterRef("pk")).exclude(
        state__in=[Worker.State.EXITED, Worker.State.LOST]
    )
    rows = (
        Job.objects.filter(state=Job.State.PENDING, awaiting_dependency=False)
        .annotate(draining=Exists(old_workers))
        .values(
            "pk",
            "team__slug",
            "queue__name",
            "flavor__name",
            "flavor_id",
            "workers",
            "gpus_per_worker",
            "priority",
            "submitted_at",
            "max_runtime_seconds",
            "preemptible",
            "restart_count",
            "eligible_at",
            "preempted_by",
            "draining",
            "reason_code",
            "reason",
            "queue_position",
            "estimated_start_at",
            "array_id",
            "array__task_limit",
        )
    )
    pending = []
    for row in rows:
        ctx.pending_rows[row["pk"]] = row
        ctx.flavor_ids[row["flavor__name"]] = row["flavor_id"]
        pending.append(
            m.PendingJob(
                id=row["pk"],
                team=row["team__slug"],
                queue=row["queue__name"],
                flavor=row["flavor__name"],
                workers=row["workers"],
                gpus_per_worker=row["gpus_per_worker"],
                priority=row["priority"],
                submitted_at=row["submitted_at"].timestamp(),
                max_runtime=float(row["max_runtime_seconds"]),
                preemptible=row["preemptible"],
                restart_count=row["restart_count"],
                eligible_at=row["eligible_at"].timestamp() if row["eligible_at"] else 0.0,
                preempted_by=row["preempted_by"],
                previous_attempt_stopping=row["draining"],
                array_id=row["array_id"],
                array_limit=row["array__task_limit"],
            )
        )
    return pending

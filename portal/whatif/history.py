"""The database as a simulation input: the cluster's nodes and teams now, and the job history.

Jobs are exported in the simulator's `berth` trace format
(scheduler.sim.trace.BERTH_FIELDS), and read back through the same function
as a trace file, so the what-if and `python -m scheduler.sim --format berth`
replay the same thing.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q

from portal.core.models import Gpu, Job, Node
from portal.core.scheduling.teams import scheduler_teams
from scheduler import model as m
from scheduler.sim.cluster import NodeSpec, node_record, team_record


def cluster_nodes() -> list[NodeSpec]:
    """Every registered node with its GPUs that are not lost, whatever its state today.

    A what-if asks about the cluster's shape; a node that is cordoned or
    briefly not ready today is still part of it.
    """
    rows = (
        Node.objects.annotate(gpu_count=Count("gpus", filter=~Q(gpus__health=Gpu.Health.LOST)))
        .filter(gpu_count__gt=0)
        .values_list("hostname", "flavor__name", "gpu_count", "rack", "block")
        .order_by("hostname")
    )
    return [NodeSpec(host, flavor, gpus, rack, block) for host, flavor, gpus, rack, block in rows]


def cluster_teams() -> tuple[m.Team, ...]:
    """Every team with its weight, cohort and quotas as they are now (no usage history:
    the plan starts from an idle cluster's standing)."""
    return tuple(scheduler_teams(None, 0.0).values())


def job_records(start: datetime, end: datetime) -> list[dict]:
    """Return the jobs submitted in [start, end) as Berth trace records.

    Left out: jobs that ended (cancelled, failed) without ever starting; they
    asked for no GPU-time. Run time is finished_at - started_at when both are
    known, else (still running, still pending) the job's max runtime.
    """
    rows = (
        Job.objects.filter(submitted_at__gte=start, submitted_at__lt=end)
        .exclude(started_at=None, state__in=Job.TERMINAL_STATES)
        .values_list(
            "pk",
            "team__slug",
            "queue__name",
            "flavor__name",
            "workers",
            "gpus_per_worker",
            "submitted_at",
            "started_at",
            "finished_at",
            "max_runtime_seconds",
            "priority",
            "preemptible",
        )
        .order_by("submitted_at", "pk")
    )
    return [_record(*row) for row in rows]


def _record(
    pk,
    team,
    queue,
    flavor,
    workers,
    per_worker,
    submitted,
    started,
    finished,
    max_rt,
    prio,
    preemptible,
) -> dict:
    if started is not None and finished is not None:
        duration = max(1.0, (finished - started).total_seconds())
    else:
        duration = float(max_rt)
    return {
        "id": pk,
        "team": team,
        "queue": queue,
        "flavor": flavor,
        "workers": workers,
        "gpus_per_worker": per_worker,
        "submitted_at": submitted.timestamp(),
        "duration_s": duration,
        "max_runtime_s": float(max_rt),
        "priority": prio,
        "preemptible": preemptible,
    }


def export(start: datetime, end: datetime) -> dict:
    """Return the history and the cluster as one Berth trace document (JSON-ready)."""
    return {
        "jobs": job_records(start, end),
        "nodes": [node_record(n) for n in cluster_nodes()],
        "teams": [team_record(t) for t in cluster_teams()],
    }

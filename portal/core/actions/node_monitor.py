"""Watching nodes and jobs over time: silent nodes become not ready, long-silent
ones lose their gangs (requeued), and jobs past their max run time are stopped.
A node's changes are rows in its audit trail; a job's, events on its timeline.

Kubernetes' node lifecycle controller is the model: a node-monitor grace
period (NODE_NOT_READY_AFTER_S) then an eviction timeout (NODE_EVICT_AFTER_S).
The agent stops its own workers after AGENT_DISCONNECT_LIMIT_S, which the
settings keep below the sum, so a gang is never requeued while it still runs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.core.actions.audit import record_event
from portal.core.actions.jobs import request_scheduling_pass, transition
from portal.core.actions.workers import LIVE, lose_workers
from portal.core.db import IfNull
from portal.core.models import Job, Node, Worker

log = logging.getLogger(__name__)


def monitor_nodes(now: datetime | None = None) -> dict:
    """One sweep; safe to run concurrently with heartbeats and passes."""
    now = now or timezone.now()
    cfg = settings.BERTH
    silent = mark_not_ready(now - timedelta(seconds=cfg["NODE_NOT_READY_AFTER_S"]), now)
    evicted = evict_lost_nodes(now - timedelta(seconds=cfg["NODE_EVICT_AFTER_S"]), now)
    timed_out = stop_overdue_jobs(now)
    return {"not_ready": silent, "evicted": evicted, "timed_out": timed_out}


def mark_not_ready(cutoff: datetime, now: datetime) -> int:
    """Ready nodes silent since `cutoff` become not ready: no new work lands there.

    Each one gets a row in its audit trail. A node whose row a heartbeat holds right
    now is skipped (it is answering); the next sweep looks at it again.
    """
    stale = Q(last_heartbeat_at__lt=cutoff) | Q(last_heartbeat_at__isnull=True)
    with transaction.atomic():
        nodes = list(
            Node.objects.select_for_update(skip_locked=True)
            .filter(stale, condition=Node.Condition.READY)
            .only("pk", "hostname", "last_heartbeat_at")
        )
        if not nodes:
            return 0
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(
            condition=Node.Condition.NOT_READY, not_ready_since=now
        )
        for node in nodes:
            last = node.last_heartbeat_at.isoformat() if node.last_heartbeat_at else "never"
            record_event(
                actor=None, instance=node, action="not_ready", note=f"last heartbeat {last}"
            )
    log.warning("nodes not ready: %d silent since %s", len(nodes), cutoff.isoformat())
    return len(nodes)


def _lost(cutoff: datetime) -> Q:
    """A node not ready since before `cutoff`: its gangs are evicted."""
    return Q(condition=Node.Condition.NOT_READY, not_ready_since__lt=cutoff)


def evict_lost_nodes(cutoff: datetime, now: datetime) -> list[str]:
    """Requeue (or fail) the gangs of nodes not ready since before `cutoff`."""
    nodes = list(Node.objects.filter(_lost(cutoff), workers__state__in=LIVE).distinct())
    return [n.hostname for n in nodes if evict_node(n, now=now, cutoff=cutoff)]


def evict_node(node: Node, *, now: datetime, cutoff: datetime) -> int:
    """The node is gone: its workers are lost, their gangs requeued everywhere.

    Decided on the node's locked row, locked before its workers (as an identity reset
    and a heartbeat lock them): a node that heartbeated since the sweep read it (ready
    again, or not ready only since later) keeps its workers."""
    with transaction.atomic():
        lost = Node.objects.select_for_update().filter(_lost(cutoff), pk=node.pk)
        if not list(lost.values_list("pk", flat=True)):  # (exists() would not lock it)
            return 0
        workers = list(Worker.objects.select_for_update().filter(node=node, state__in=LIVE))
        if not workers:
            return 0
        message = f"Node {node.hostname} stopped answering; its workers are considered lost."
        lose_workers(workers, now=now, kind="node_lost", message=message)
        record_event(
            actor=None, instance=node, action="evict", note=f"{len(workers)} worker(s) lost"
        )
    log.warning("evicted node", extra={"node": node.hostname, "workers": len(workers)})
    return len(workers)


def stop_overdue_jobs(now: datetime) -> list[int]:
    """Jobs past their max run time fail with reason `timeout` (Slurm's TIMEOUT);
    their workers are then told to stop. Backfill relies on this bound.

    A job stopping for a preemption fails too, and is not requeued: its attempt is over
    at its max run time, as a running job's is (the simulator and the tests' driver end
    such a victim there too). It keeps the stop time its preemption gave it: its workers
    keep the stop they run, so the core's view of when its GPUs come free
    (RunningJob.ends_by) stays right for its preemptor's claim.

    The rows are read, then the overdue ones locked: what moves is decided on the locked
    rows (an attempt requeued and admitted again in between is left alone; a job
    preempted in between gets the stopping job's event)."""
    active = Job.objects.filter(state__in=Job.ACTIVE_STATES).values_list(
        "pk", "attempt", "admitted_at", "max_runtime_seconds"
    )
    overdue = {
        pk: attempt
        for pk, attempt, admitted, limit in active
        if admitted and admitted + timedelta(seconds=limit) < now
    }
    stopping = (
        "Stopped: the job exceeded its max run time while it stopped for a preemption; "
        "it is not requeued."
    )
    with transaction.atomic():
        # One call: its rows are locked in id order, as every other caller locks them (two
        # calls, running jobs then stopping ones, could deadlock with a heartbeat's settle).
        moved = transition(
            sorted(overdue),
            from_states=Job.ACTIVE_STATES,
            to_state=Job.State.FAILED,
            kind="timeout",
            message="Stopped: the job exceeded its max run time.",
            attempts=overdue,
            per_state={Job.State.PREEMPTING: (stopping, {})},
            finished_at=now,
            stop_requested_at=IfNull(now),  # a stopping job keeps its preemption's stop time
            reason_code="timeout",
            reason="Exceeded its max run time.",
        )
        if moved:
            transaction.on_commit(request_scheduling_pass)
    return sorted(moved)

"""Recording a heartbeat (docs/protocol.md, section 2): the node's GPU inventory and
telemetry, its workers' reports and what follows for their gangs, its condition.

The reply (the node's desired state) is read by portal.agentapi.desired; the agent
API's schema has checked every field before these run."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from portal.core import statements
from portal.core.actions.workers import ENDED, WorkerReport, apply_worker_reports
from portal.core.db import bulk_set, update_row
from portal.core.models import Gpu, Node, Worker


class ProtocolError(Exception):
    """The agent sent something the protocol does not allow; nothing was changed."""

    def __init__(self, message: str, fields: dict | None = None):
        super().__init__(message)
        self.fields = fields or {}


@dataclass(frozen=True)
class GpuReport:
    index: int
    uuid: str
    name: str
    memory_total_mib: int = 0
    memory_used_mib: int | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    health: str = "healthy"
    health_reason: str = ""


# The heartbeat's statements are hand-written on PostgreSQL and kept prepared
# (portal/core/statements.py, db.server_binding_cursor): 2,000 agents every 10 s make
# them the hottest queries of the portal, and the ORM spends more Python building each
# one than the database spends answering it. Other databases use the ORM.


@dataclass(frozen=True)
class Recorded:
    """What a recorded heartbeat tells its reply: the exits to acknowledge, and the
    node's live workers (with their jobs) as the heartbeat read and updated them, or
    None when a report moved one of their jobs on other than to running (a gang that
    failed, was requeued or preempted: the reply reads them again)."""

    ack: list[str]
    live: list[Worker] | None


def record_heartbeat(
    node: Node, *, agent_version: str, gpus: list[GpuReport], workers: list[WorkerReport]
) -> Recorded:
    """Record one heartbeat: the inventory, the workers' reports, the node ready again.

    This runs for every node every few seconds, so the common case (nothing
    changed) costs a handful of queries: the node's workers with their GPUs'
    UUIDs for the reply, the heartbeat time; the GPU rows only when they changed
    or their telemetry is due.
    """
    now = timezone.now()
    with transaction.atomic():
        inventory = sync_inventory(node, gpus, now)
        # Ready, whatever the row read said: the node monitor may have marked it not ready
        # since (it then stayed unschedulable until its next beat).
        fields = {
            "last_heartbeat_at": now,
            **inventory,
            "condition": Node.Condition.READY,
            "not_ready_since": None,
            "agent_version": agent_version,
        }
        # The node's row first: its lock before its workers', in the order of an eviction
        # and an identity reset (taken after them, the two could deadlock). Only while the
        # node keeps an identity: an identity reset that committed after this beat
        # authenticated (its token gone, its workers lost) wins, and the beat is undone
        # (401); before, it set the reset node ready again. (A node row read without a
        # token is one a test or the demo drives directly.)
        kept = {"token_hash": ""} if node.token_hash else None
        if not update_row(Node, node.pk, fields, unless=kept):
            raise PermissionError("the node's identity was reset meanwhile")
        node.condition = Node.Condition.READY
        # Its workers read under the node's lock: read before it, a worker an eviction
        # ended meanwhile was still told to run in the reply (a review's case).
        known = _reportable_workers(node, [w.key for w in workers])
        ack, moved = apply_worker_reports(known, workers, now=now)
    # The reply needs the live workers with their jobs: those read above, updated in place
    # by the reports, unless a report moved a live worker's job on (its stop order then
    # needs the job's new state). Reading them again cost a seventh of a busy web
    # process's CPU (docs/benchmarks.md, "H").
    live = [w for w in known.values() if w.is_live]
    stale = any(w.job_id in moved for w in live)
    return Recorded(ack=ack, live=None if stale else live)


def _reportable_workers(node: Node, keys: list[str]) -> dict[str, Worker]:
    """The node's live workers plus the reported ones; reject keys that are not this node's."""
    reported = {key: _parse_key(key) for key in keys}
    job_ids = {job_id for job_id, _, _ in reported.values()}
    found = {w.key: w for w in _node_workers(node, job_ids) if w.is_live or w.key in reported}
    foreign = sorted(reported.keys() - found.keys())
    if foreign:
        raise ProtocolError(
            "The heartbeat reports workers that are not assigned to this node.",
            {"workers": [f"Not this node's worker: {key}" for key in foreign[:20]]},
        )
    return found


def _node_workers(node: Node, job_ids: set[int]) -> list[Worker]:
    """The node's live workers and its workers of `job_ids`, each with its job."""
    ended = list(ENDED)
    if connection.vendor != "postgresql":
        return statements.node_workers_orm(node, ended, job_ids)
    return statements.node_workers(node, ended, job_ids)


def _parse_key(key: str) -> tuple[int, int, int]:
    """A key the schema checked (WORKER_KEY): three ASCII numbers."""
    job_id, attempt, rank = (int(p) for p in key.split("."))
    return job_id, attempt, rank


# Telemetry (utilization, memory, temperature, power) is written at most this
# often per GPU; identity and health changes are written at once.
TELEMETRY_EVERY_S = 30.0
_IDENTITY = ["index", "product_name", "memory_mib", "health", "health_reason"]
_TELEMETRY = ["memory_used_mib", "utilization_pct", "temperature_c", "power_w"]


def _inventory_digest(gpus: list[GpuReport]) -> str:
    """A digest of the GPUs' identity and health, as reported (order does not matter)."""
    signature = sorted(
        (r.uuid, r.index, r.name, r.memory_total_mib, r.health, r.health_reason) for r in gpus
    )
    return hashlib.sha1(repr(signature).encode(), usedforsecurity=False).hexdigest()


def sync_inventory(node: Node, gpus: list[GpuReport], now: datetime) -> dict:
    """Update the node's GPU rows from the report; a GPU missing from it is lost.

    Returns the Node fields to save with the heartbeat. Most heartbeats report
    the same GPUs as the last written one (`Node.inventory_digest`) before their
    telemetry is due: they touch no GPU row. The marks live on the node's row, so
    every web process sees them (a per-process memo made each process rewrite
    each node's GPUs on its own).
    """
    seen = _inventory_digest(gpus)
    if node.inventory_digest == seen and node.telemetry_at is not None:
        if (now - node.telemetry_at).total_seconds() < TELEMETRY_EVERY_S:
            return {}
        if _write_telemetry(node, gpus, now):
            node.telemetry_at = now
            return {"telemetry_at": now}
    written = _write_inventory(node, gpus, now)
    node.inventory_digest, node.telemetry_at = seen, written
    return {"inventory_digest": seen, "telemetry_at": written}


def _write_telemetry(node: Node, gpus: list[GpuReport], now: datetime) -> bool:
    """Only the telemetry is due: one UPDATE of the node's GPU rows from arrays.

    False where that does not do (not PostgreSQL, or a reported GPU has no row
    on this node); the caller then writes the whole inventory.
    """
    if connection.vendor != "postgresql":
        return False
    return statements.write_telemetry(node, gpus, now)


def _write_inventory(node: Node, gpus: list[GpuReport], now: datetime) -> datetime:
    """Write what changed; return when the node's telemetry is now oldest."""
    existing = {
        g.uuid: g for g in Gpu.objects.filter(Q(node=node) | Q(uuid__in=[r.uuid for r in gpus]))
    }
    elsewhere = sorted(u for u, g in existing.items() if g.node_id != node.pk)
    if elsewhere:
        raise ProtocolError("GPU UUIDs already belong to another node.", {"gpus": elsewhere[:10]})
    reported, changed, new, unindexed = set(), [], [], []
    for r in gpus:
        reported.add(r.uuid)
        gpu = existing.get(r.uuid)
        if gpu is None:
            new.append(_copy_report(Gpu(node=node, uuid=r.uuid), r, now))
        elif _worth_writing(gpu, r, now):
            if gpu.index != r.index and gpu.health != Gpu.Health.LOST:
                unindexed.append(gpu.pk)
            changed.append(_copy_report(gpu, r, now))
    for uuid, gpu in existing.items():
        if uuid not in reported and gpu.health != Gpu.Health.LOST:
            gpu.health, gpu.health_reason = Gpu.Health.LOST, "missing from the agent's inventory"
            gpu.updated_at = now
            changed.append(gpu)
            unindexed.append(gpu.pk)  # (its index may be another GPU's now)
    if unindexed:  # out of (node, index)'s uniqueness first: it is checked row by row, and GPUs
        # that swap indices (another PCI order after a reboot), or take the index of one
        # that is gone, made every beat a 500 (two reviews' cases)
        Gpu.objects.filter(pk__in=unindexed).update(health=Gpu.Health.LOST)
    bulk_set(Gpu, changed, _IDENTITY + _TELEMETRY + ["updated_at"])
    if new:
        Gpu.objects.bulk_create(new)
    current = [g.updated_at for u, g in existing.items() if u in reported] + [now] * len(new)
    return min(current, default=now)


def _worth_writing(gpu: Gpu, r: GpuReport, now: datetime) -> bool:
    identity = (r.index, r.name, r.memory_total_mib, r.health, r.health_reason)
    if identity != tuple(getattr(gpu, f) for f in _IDENTITY):
        return True
    return (now - gpu.updated_at).total_seconds() >= TELEMETRY_EVERY_S


def _copy_report(gpu: Gpu, r: GpuReport, now: datetime) -> Gpu:
    gpu.index, gpu.product_name, gpu.memory_mib = r.index, r.name, r.memory_total_mib
    gpu.memory_used_mib, gpu.utilization_pct = r.memory_used_mib, r.utilization_pct
    gpu.temperature_c, gpu.power_w = r.temperature_c, r.power_w
    gpu.health, gpu.health_reason = r.health, r.health_reason
    gpu.updated_at = now
    return gpu

"""The portal's side of the node agent protocol (docs/protocol.md): registration,
heartbeats, and the desired state each heartbeat reply carries."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.core.actions.workers import WorkerReport, apply_worker_reports, is_desired
from portal.core.db import bulk_set, columns, server_binding_cursor, split_row, update_row
from portal.core.models import Allocation, Gpu, GpuFlavor, Job, Node, NodeBootstrapToken, Worker
from portal.core.secrets import digest, new_secret


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
# (db.server_binding_cursor): 2,000 agents every 10 s make them the hottest queries
# of the portal, and the ORM spends more Python building each one than the database
# spends answering it. Other databases use the ORM.


def node_for_token(token: str) -> Node | None:
    if not token:
        return None
    if connection.vendor != "postgresql":
        return Node.objects.filter(token_hash=digest(token)).first()
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(Node, 'n')} FROM {Node._meta.db_table} n WHERE n.token_hash = %s",
            [digest(token)],
        )
        row = cursor.fetchone()
    return split_row(row, Node)[0][0] if row else None


def register_node(
    *,
    bootstrap_token: str,
    hostname: str,
    rack: str,
    block: str,
    agent_version: str,
    gpus: list[GpuReport],
) -> tuple[Node, str]:
    """Trade a valid bootstrap token for a node token (returned once, stored hashed).

    A hostname that is already known keeps its row and history and gets a new token.
    """
    now = timezone.now()
    with transaction.atomic():
        bootstrap = _usable_bootstrap(bootstrap_token, now)
        flavor = _flavor_of(gpus)
        secret = new_secret("bnt")
        node, _ = Node.objects.select_for_update().get_or_create(
            hostname=hostname, defaults={"flavor": flavor}
        )
        if node.flavor_id != flavor.pk and node.allocations.filter(active=True).exists():
            raise ProtocolError(f"Node {hostname} changed GPU flavor while it still runs jobs.")
        node.flavor, node.rack, node.block = flavor, rack, block
        node.agent_version, node.token_hash = agent_version, secret.digest
        node.save()
        if inventory := _sync_inventory(node, gpus, now):
            Node.objects.filter(pk=node.pk).update(**inventory)
        NodeBootstrapToken.objects.filter(pk=bootstrap.pk).update(uses=F("uses") + 1)
    return node, secret.plaintext


def _usable_bootstrap(token: str, now: datetime) -> NodeBootstrapToken:
    found = (
        NodeBootstrapToken.objects.filter(token_hash=digest(token or ""), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if found is None:
        raise PermissionError("unknown, expired or revoked bootstrap token")
    return found


def _flavor_of(gpus: list[GpuReport]) -> GpuFlavor:
    if not gpus:
        raise ProtocolError(
            "A node must report at least one GPU.", {"gpus": ["This list may not be empty."]}
        )
    names = {g.name for g in gpus}
    if len(names) > 1:
        raise ProtocolError(f"A node has one GPU flavor; it reported {sorted(names)}.")
    (name,) = names
    for flavor in GpuFlavor.objects.all():
        if name in flavor.product_names or name == flavor.name:
            return flavor
    raise ProtocolError(
        f"No GPU flavor lists the product name {name!r}; an admin must add it to a flavor's product names.",
        {"gpus": [f"Unknown GPU product {name!r}."]},
    )


def heartbeat(
    node: Node, *, agent_version: str, gpus: list[GpuReport], workers: list[WorkerReport]
) -> dict:
    """Record one heartbeat and return the node's desired state (the reply body).

    This runs for every node every few seconds, so the common case (nothing
    changed) costs a handful of queries: the node's workers, its GPUs, the
    heartbeat time, the GPUs' UUIDs for the reply.
    """
    now = timezone.now()
    with transaction.atomic():
        known = _reportable_workers(node, [w.key for w in workers])
        inventory = _sync_inventory(node, gpus, now)
        ack, changed = apply_worker_reports(known, workers, now=now)
        fields = {"last_heartbeat_at": now, **inventory}
        if (
            node.condition != Node.Condition.READY
            or node.not_ready_since
            or node.agent_version != agent_version
        ):
            fields |= {
                "condition": Node.Condition.READY,
                "not_ready_since": None,
                "agent_version": agent_version,
            }
        update_row(Node, node.pk, fields)
        node.condition = Node.Condition.READY
        live = None if changed else [w for w in known.values() if w.is_live]
        reply = desired_state(node, live=live)
    reply["ack"] = ack
    return reply


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
    ended = [Worker.State.EXITED, Worker.State.LOST]
    if connection.vendor != "postgresql":
        live = ~Q(state__in=ended)
        return list(
            Worker.objects.filter(node=node)
            .filter(live | Q(job_id__in=job_ids))
            .select_related("job")
        )
    # Each worker comes with the UUIDs of its active allocations: the heartbeat's
    # reply needs them, and asking here saves it a round trip (desired_state).
    sql = (
        f"SELECT {columns(Worker, 'w')}, {columns(Job, 'j')}, "
        f"ARRAY(SELECT g.uuid FROM {Allocation._meta.db_table} a "
        f"JOIN {Gpu._meta.db_table} g ON g.id = a.gpu_id WHERE a.active AND a.worker_id = w.id) "
        f"FROM {Worker._meta.db_table} w JOIN {Job._meta.db_table} j ON j.id = w.job_id "
        "WHERE w.node_id = %s AND (w.state <> ALL(%s) OR w.job_id = ANY(%s))"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [node.pk, ended, list(job_ids)])
        rows = cursor.fetchall()
    workers = []
    for row in rows:
        (worker, job), (uuids,) = split_row(row, Worker, Job)
        worker.job, worker.gpu_uuids = job, uuids
        workers.append(worker)
    return workers


def _parse_key(key: str) -> tuple[int, int, int]:
    parts = key.split(".") if isinstance(key, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ProtocolError(
            "Malformed worker key.", {"workers": [f"Malformed worker key {key!r}."]}
        )
    job_id, attempt, rank = (int(p) for p in parts)
    return job_id, attempt, rank


# Telemetry (utilization, memory, temperature, power) is written at most this
# often per GPU; identity and health changes are written at once.
TELEMETRY_EVERY_S = 30.0
_IDENTITY = ["index", "product_name", "memory_mib", "health", "health_reason"]
_TELEMETRY = ["memory_used_mib", "utilization_pct", "temperature_c", "power_w"]


def _inventory_digest(gpus: list[GpuReport]) -> str:
    """A digest of the GPUs' identity and health, as reported (order does not matter)."""
    signature = sorted(
        (r.uuid, r.index, r.name, r.memory_total_mib, r.health, r.health_reason[:200]) for r in gpus
    )
    return hashlib.sha1(repr(signature).encode(), usedforsecurity=False).hexdigest()


def _sync_inventory(node: Node, gpus: list[GpuReport], now: datetime) -> dict:
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
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"UPDATE {Gpu._meta.db_table} g SET memory_used_mib = t.mem, "
            "utilization_pct = t.util, temperature_c = t.temp, power_w = t.power, updated_at = %s "
            "FROM unnest(%s::varchar[], %s::int[], %s::float8[], %s::float8[], %s::float8[]) "
            "AS t(uuid, mem, util, temp, power) WHERE g.uuid = t.uuid AND g.node_id = %s",
            [
                now,
                [r.uuid for r in gpus],
                [r.memory_used_mib for r in gpus],
                [r.utilization_pct for r in gpus],
                [r.temperature_c for r in gpus],
                [r.power_w for r in gpus],
                node.pk,
            ],
        )
        return cursor.rowcount == len(gpus)


def _write_inventory(node: Node, gpus: list[GpuReport], now: datetime) -> datetime:
    """Write what changed; return when the node's telemetry is now oldest."""
    existing = {
        g.uuid: g for g in Gpu.objects.filter(Q(node=node) | Q(uuid__in=[r.uuid for r in gpus]))
    }
    elsewhere = sorted(u for u, g in existing.items() if g.node_id != node.pk)
    if elsewhere:
        raise ProtocolError("GPU UUIDs already belong to another node.", {"gpus": elsewhere[:10]})
    reported, changed, new = set(), [], []
    for r in gpus:
        reported.add(r.uuid)
        gpu = existing.get(r.uuid)
        if gpu is None:
            new.append(_copy_report(Gpu(node=node, uuid=r.uuid), r, now))
        elif _worth_writing(gpu, r, now):
            changed.append(_copy_report(gpu, r, now))
    for uuid, gpu in existing.items():
        if uuid not in reported and gpu.health != Gpu.Health.LOST:
            gpu.health, gpu.health_reason = Gpu.Health.LOST, "missing from the agent's inventory"
            gpu.updated_at = now
            changed.append(gpu)
    bulk_set(Gpu, changed, _IDENTITY + _TELEMETRY + ["updated_at"])
    if new:
        Gpu.objects.bulk_create(new)
    current = [g.updated_at for u, g in existing.items() if u in reported] + [now] * len(new)
    return min(current, default=now)


def _worth_writing(gpu: Gpu, r: GpuReport, now: datetime) -> bool:
    identity = (r.index, r.name, r.memory_total_mib, r.health, r.health_reason[:200])
    if identity != tuple(getattr(gpu, f) for f in _IDENTITY):
        return True
    return (now - gpu.updated_at).total_seconds() >= TELEMETRY_EVERY_S


def _copy_report(gpu: Gpu, r: GpuReport, now: datetime) -> Gpu:
    gpu.index, gpu.product_name, gpu.memory_mib = r.index, r.name, r.memory_total_mib
    gpu.memory_used_mib, gpu.utilization_pct = r.memory_used_mib, r.utilization_pct
    gpu.temperature_c, gpu.power_w = r.temperature_c, r.power_w
    gpu.health, gpu.health_reason = r.health, r.health_reason[:200]
    gpu.updated_at = now
    return gpu


def desired_state(node: Node, *, live: list[Worker] | None = None) -> dict:
    """What the node should run and stop now (the heartbeat reply, without `ack`).

    `live` are the node's live workers with their jobs, when the caller has them fresh.
    """
    if live is None:
        live = list(
            Worker.objects.filter(node=node)
            .exclude(state__in=[Worker.State.EXITED, Worker.State.LOST])
            .select_related("job")
        )
    wanted = [w for w in live if is_desired(w, w.job)]
    uuids = _gpu_uuids(wanted)
    masters = _master_hosts(node, wanted)
    cfg = settings.BERTH
    return {
        "node": {"id": node.pk, "state": node.state, "cordon": node.cordon},
        "heartbeat_interval_s": cfg["HEARTBEAT_INTERVAL_S"],
        "disconnect_limit_s": cfg["AGENT_DISCONNECT_LIMIT_S"],
        "run": [_run_entry(w, uuids.get(w.pk, []), masters) for w in wanted],
        "stop": [_stop_entry(w) for w in live if not is_desired(w, w.job)],
    }


def _gpu_uuids(workers: list[Worker]) -> dict[int, list[str]]:
    """The UUIDs of each worker's active allocations (read with the workers when
    _node_workers read them)."""
    if all(hasattr(w, "gpu_uuids") for w in workers):
        return {w.pk: w.gpu_uuids for w in workers if w.gpu_uuids}
    out: dict[int, list[str]] = {}
    ids = [w.pk for w in workers]
    if connection.vendor == "postgresql":
        with server_binding_cursor() as cursor:
            cursor.execute(
                f"SELECT a.worker_id, g.uuid FROM {Allocation._meta.db_table} a "
                f"JOIN {Gpu._meta.db_table} g ON g.id = a.gpu_id WHERE a.active AND a.worker_id = ANY(%s)",
                [ids],
            )
            rows = cursor.fetchall()
    else:
        rows = Allocation.objects.filter(worker__in=ids, active=True).values_list(
            "worker_id", "gpu__uuid"
        )
    for worker_id, uuid in rows:
        out.setdefault(worker_id, []).append(uuid)
    return out


def _master_hosts(node: Node, workers: list[Worker]) -> dict[int, str]:
    """Hostname of each job's rank-0 worker in its current attempt; asked of the
    database only for gangs whose rank 0 runs on another node."""
    masters = {w.job_id: node.hostname for w in workers if w.rank == 0}
    elsewhere = {w.job_id for w in workers} - masters.keys()
    if elsewhere:
        rows = Worker.objects.filter(job_id__in=elsewhere, rank=0, attempt=F("job__attempt"))
        masters |= dict(rows.values_list("job_id", "node__hostname"))
    return masters


def master_port(job_id: int) -> int:
    """The gang's rendezvous port: one per job within BERTH_MASTER_PORT_FIRST/COUNT.

    Workers use the node's network (host), so two gangs whose rank 0 share a node
    need different ports; two running jobs clash only if their ids differ by a
    multiple of the range's size."""
    first, count = settings.BERTH["MASTER_PORT_FIRST"], settings.BERTH["MASTER_PORT_COUNT"]
    return first + job_id % count


def _run_entry(worker: Worker, uuids: list[str], masters: dict[int, str]) -> dict:
    job = worker.job
    return {
        "key": worker.key,
        "job_id": job.pk,
        "attempt": worker.attempt,
        "rank": worker.rank,
        "world_size": job.workers,
        "image": job.image,
        "command": job.command,
        "env": job.env,
        "gpu_uuids": sorted(uuids),
        "master_addr": masters.get(job.pk, ""),
        "master_port": master_port(job.pk),
        "max_runtime_s": job.max_runtime_seconds,
    }


_STOP_REASONS = {
    Job.State.PREEMPTING: "preempted",
    Job.State.CANCELLED: "cancelled",
    Job.State.FAILED: "gang failed",
    Job.State.SUCCEEDED: "gang finished",
    Job.State.PENDING: "requeued",
}


def _stop_entry(worker: Worker) -> dict:
    job = worker.job
    reason = _STOP_REASONS.get(job.state, "superseded")
    if job.state == Job.State.FAILED and job.reason_code == "timeout":
        reason = "max run time exceeded"
    return {
        "key": worker.key,
        "signal": job.checkpoint_signal,
        "grace_period_s": job.grace_period_seconds,
        "reason": reason,
    }

"""The heartbeat's reply: the node's desired state (docs/protocol.md, section 2).

Only the node's own workers are in it, and a job's image, command and env are sent only
in `run` entries, to the nodes its current attempt's workers were placed on (node
identity: docs/protocol.md, "Threat model").
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import F

from portal.core import statements
from portal.core.actions.workers import LIVE, is_desired
from portal.core.models import Job, Node, Worker


def desired_state(node: Node, *, live: list[Worker] | None = None) -> dict:
    """What the node should run and stop now (the heartbeat reply, without `ack`).

    `live` are the node's live workers with their jobs, when the caller has them fresh.
    """
    if live is None:
        live = list(Worker.objects.filter(node=node).filter(state__in=LIVE).select_related("job"))
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
        rows = statements.gpu_uuids(ids)
    else:
        rows = statements.gpu_uuids_orm(ids)
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
        "master_port": master_port(worker.job_id),
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

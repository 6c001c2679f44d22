"""Helpers for the agent protocol's tests: a node's token, its inventory, a heartbeat, a
job admitted onto nodes as a scheduling pass would, and a worker's report."""

from __future__ import annotations

from django.utils import timezone

from portal.core.models import Job, Node
from portal.core.scheduling.apply import apply_plan
from portal.core.scheduling.snapshot import PassContext
from portal.core.secrets import new_secret
from scheduler import model as m

State = Job.State


def node_token(node: Node) -> str:
    secret = new_secret("bnt")
    Node.objects.filter(pk=node.pk).update(token_hash=secret.digest)
    return secret.plaintext


def inventory(node: Node, overrides: dict | None = None) -> list[dict]:
    gpus = []
    for gpu in node.gpus.order_by("index"):
        entry = {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": node.flavor.display_name,
            "memory_total_mib": 81559,
            "memory_used_mib": 10,
            "utilization_pct": 50.0,
            "temperature_c": 40.0,
            "power_w": 300.0,
            "health": "healthy",
            "health_reason": "",
        }
        entry.update((overrides or {}).get(gpu.index, {}))
        gpus.append(entry)
    return gpus


def beat(client, node, token, workers=(), gpus=None):
    body = {
        "agent_version": "test",
        "gpus": inventory(node) if gpus is None else gpus,
        "workers": list(workers),
    }
    return client.post(
        "/api/agent/v1/heartbeat",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def make_job(cluster, *, workers=1, gpus_per_worker=2, **kw) -> Job:
    job = Job.objects.create(
        team=cluster.team_a,
        queue=cluster.queue_a,
        flavor=cluster.h100,
        name="train",
        image="img",
        command=["python", "train.py"],
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        max_runtime_seconds=3600,
        **{"env": {"EPOCHS": "3"}, **kw},
    )
    job.events.create(kind="submitted", to_state=State.PENDING)
    return job


def admit(job: Job, nodes: list[Node], first_gpu: int = 0) -> None:
    """Admit the job with one worker per node, as a scheduling pass would, on each
    node's GPUs from index `first_gpu` on."""
    placement = tuple(
        m.WorkerPlacement(
            rank=rank,
            node=node.hostname,
            gpus=tuple(
                node.gpus.order_by("index").values_list("pk", flat=True)[
                    first_gpu : first_gpu + job.gpus_per_worker
                ]
            ),
        )
        for rank, node in enumerate(nodes)
    )
    ctx = PassContext(now=timezone.now(), node_ids={n.hostname: n.pk for n in nodes})
    applied = apply_plan(m.Plan(admissions=(m.Admission(job_id=job.pk, placement=placement),)), ctx)
    assert applied.admitted == [job.pk]
    job.refresh_from_db()


def report(job: Job, rank: int, state: str, exit_code=None, attempt=None) -> dict:
    attempt = job.attempt if attempt is None else attempt
    return {
        "key": f"{job.pk}.{attempt}.{rank}",
        "state": state,
        "exit_code": exit_code,
        "log_tail": f"rank {rank} {state}\n",
    }

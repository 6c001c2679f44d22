"""A lived-in cluster for the dashboard's tests and screenshots.

On top of tests.factories.make_cluster: team alpha runs a 16-GPU training gang
and an idle notebook, has jobs pending (one of them preempted by beta before),
a month of usage and eight weeks of finished jobs; beta runs one gang; one A100
node is not ready, one GPU is unhealthy and a spare H100 node is cordoned.
Rows are written directly (the scheduler is not needed to build the picture).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from portal.core.models import Allocation, Gpu, Job, JobEvent, Node, Usage, Worker
from tests.factories import Cluster, make_node

State = Job.State
H = 3600


@dataclass
class Story:
    cluster: Cluster
    now: datetime
    training: Job  # alpha, lead_a, running 2×8 h100 on h100-0/1
    notebook: Job  # alpha, member_a, running 1×2 h100 at 3 % utilization
    sweep: Job  # alpha, member_a, pending 1×8 h100 (quota)
    ablation: Job  # alpha, lead_a, pending again after beta preempted it
    beta_train: Job  # beta, lead_b, running 1×8 h100 on h100-3
    lead_pending: Job  # alpha, lead_a, pending 1×2 a100


def make_job(cluster: Cluster, team, user, name: str, now: datetime, **fields) -> Job:
    queue = cluster.queue_a if team == cluster.team_a else cluster.queue_b
    defaults = {
        "flavor": cluster.h100,
        "image": "ghcr.io/example/trainer:2.4",
        "command": ["python", "train.py", "--config", f"{name}.yaml"],
        "max_runtime_seconds": 24 * H,
        "submitted_at": now - timedelta(minutes=30),
    }
    job = Job.objects.create(
        team=team, queue=queue, submitted_by=user, name=name, **(defaults | fields)
    )
    JobEvent.objects.create(
        job=job,
        at=job.submitted_at,
        kind="submitted",
        to_state=State.PENDING,
        actor=user,
        message=f"Submitted to {team.slug}/{queue.name}: {job.workers}×{job.gpus_per_worker} "
        f"{job.flavor.name} GPUs.",
    )
    return job


def start(job: Job, placement: list[tuple[Node, list[int]]], *, util: float, log: str = "") -> Job:
    """Admit and start the job on these GPUs (rank r on placement[r]) with this telemetry."""
    hosts = ", ".join(n.hostname for n, _ in placement)
    JobEvent.objects.bulk_create(
        [
            JobEvent(
                job=job,
                at=job.admitted_at,
                kind="admitted",
                from_state=State.PENDING,
                to_state=State.ADMITTED,
                message=f"Admitted on {hosts}.",
            ),
            JobEvent(
                job=job,
                at=job.started_at,
                kind="running",
                from_state=State.ADMITTED,
                to_state=State.RUNNING,
                message="All workers started.",
            ),
        ]
    )
    for rank, (node, indexes) in enumerate(placement):
        worker = Worker.objects.create(
            job=job,
            attempt=job.attempt,
            rank=rank,
            node=node,
            state=Worker.State.RUNNING,
            started_at=job.started_at,
            log_tail=log.replace("{rank}", str(rank)),
        )
        gpus = list(node.gpus.filter(index__in=indexes))
        Allocation.objects.bulk_create(
            Allocation(job=job, worker=worker, worker_rank=rank, node=node, gpu=g) for g in gpus
        )
        Gpu.objects.filter(pk__in=[g.pk for g in gpus]).update(
            utilization_pct=util, memory_used_mib=61000, temperature_c=64, power_w=520
        )
    return job


def build_story(cluster: Cluster, now: datetime | None = None) -> Story:
    now = now or timezone.now()
    p, alpha, beta = cluster.personas, cluster.team_a, cluster.team_b
    h0, h1, h2, h3, a0, a1 = cluster.nodes
    _degrade_hardware(cluster, a0, a1)
    log = "".join(
        f"rank {{rank}} step {s:>5} loss {2.5 - s / 9000:.4f}\n" for s in range(3000, 3600, 50)
    )
    training = start(
        make_job(
            cluster,
            alpha,
            p.lead_a,
            "llm-pretrain",
            now,
            workers=2,
            gpus_per_worker=8,
            state=State.RUNNING,
            submitted_at=now - timedelta(hours=5),
            admitted_at=now - timedelta(hours=4, minutes=40),
            started_at=now - timedelta(hours=4, minutes=39),
        ),
        [(h0, list(range(8))), (h1, list(range(8)))],
        util=91,
        log=log,
    )
    notebook = start(
        make_job(
            cluster,
            alpha,
            p.member_a,
            "notebook-debug",
            now,
            gpus_per_worker=2,
            state=State.RUNNING,
            submitted_at=now - timedelta(hours=2, minutes=5),
            admitted_at=now - timedelta(hours=2),
            started_at=now - timedelta(hours=2),
            max_runtime_seconds=8 * H,
        ),
        [(h2, [0, 1])],
        util=3,
        log="[I 10:02:11] Jupyter Server is running\n",
    )
    beta_train = start(
        make_job(
            cluster,
            beta,
            p.lead_b,
            "beta-diffusion",
            now,
            gpus_per_worker=8,
            state=State.RUNNING,
            submitted_at=now - timedelta(hours=1, minutes=10),
            admitted_at=now - timedelta(hours=1),
            started_at=now - timedelta(minutes=59),
        ),
        [(h3, list(range(8)))],
        util=77,
    )
    ablation = _preempted_and_requeued(cluster, now, beta_train)
    sweep = make_job(
        cluster,
        alpha,
        p.member_a,
        "vit-sweep",
        now,
        gpus_per_worker=8,
        submitted_at=now - timedelta(minutes=25),
        reason_code="quota",
        queue_position=2,
        reason="needs 8 h100-80gb GPUs; team alpha uses 18 of 16 nominal and may borrow 0 more; 1 job ahead in queue alpha/default",
        estimated_start_at=now + timedelta(hours=2, minutes=20),
    )
    lead_pending = make_job(
        cluster,
        alpha,
        p.lead_a,
        "bert-finetune",
        now,
        flavor=cluster.a100,
        gpus_per_worker=2,
        submitted_at=now - timedelta(minutes=3),
        reason_code="new",
        reason="Waiting for the next scheduling pass.",
    )
    _history(cluster, now)
    _usage(cluster, now)
    return Story(cluster, now, training, notebook, sweep, ablation, beta_train, lead_pending)


def _degrade_hardware(cluster: Cluster, a0: Node, a1: Node) -> None:
    Node.objects.filter(pk=a1.pk).update(condition=Node.Condition.NOT_READY)
    a0.gpus.filter(index=7).update(
        health=Gpu.Health.UNHEALTHY, health_reason="XID 79: GPU has fallen off the bus"
    )
    spare = make_node("h100-spare", cluster.h100, rack="r3", block="b3")
    Node.objects.filter(pk=spare.pk).update(
        cordon=Node.Cordon.CORDONED, cordon_reason="firmware upgrade"
    )


def _preempted_and_requeued(cluster: Cluster, now: datetime, preemptor: Job) -> Job:
    job = make_job(
        cluster,
        cluster.team_a,
        cluster.personas.lead_a,
        "resnet-ablation",
        now,
        gpus_per_worker=4,
        submitted_at=now - timedelta(hours=3),
        attempt=1,
        restart_count=1,
        reason_code="quota",
        queue_position=1,
        estimated_start_at=now + timedelta(minutes=40),
        reason="needs 4 h100-80gb GPUs; team alpha uses 18 of 16 nominal and may borrow 0 more",
    )
    message = (
        f"preempted by job {preemptor.pk} of team beta, which reclaims its nominal quota: it needs "
        "8 h100-80gb GPUs and uses 0 of 16 nominal, while team alpha borrows (20 used of 16 nominal)"
    )
    JobEvent.objects.bulk_create(
        [
            JobEvent(
                job=job,
                at=now - timedelta(hours=2, minutes=50),
                kind="admitted",
                from_state="pending",
                to_state="admitted",
                message="Admitted on h100-3, borrowing 4 GPUs from the cohort.",
            ),
            JobEvent(
                job=job,
                at=now - timedelta(hours=2, minutes=49),
                kind="running",
                from_state="admitted",
                to_state="running",
                message="All workers started.",
            ),
            JobEvent(
                job=job,
                at=now - timedelta(hours=1),
                kind="preempted",
                from_state="running",
                to_state="preempting",
                message=message,
                data={"reason": "reclaim", "preemptor": preemptor.pk},
            ),
            JobEvent(
                job=job,
                at=now - timedelta(minutes=59),
                kind="requeued",
                from_state="preempting",
                to_state="pending",
                message="Workers stopped after SIGTERM. Requeued with its original submit time.",
            ),
        ]
    )
    return job


def _history(cluster: Cluster, now: datetime) -> None:
    """Eight weeks of finished jobs with varied waits, for the wait chart."""
    rng = random.Random(8)
    users = [cluster.personas.lead_a, cluster.personas.member_a]
    ends = [State.SUCCEEDED] * 6 + [State.FAILED, State.CANCELLED]
    jobs = []
    for i in range(48):
        submitted = now - timedelta(days=55 - i * 1.1, hours=rng.randint(0, 12))
        wait = timedelta(minutes=rng.choice([1, 2, 5, 8, 15, 30, 60, 140]) * (1 + i % 3))
        admitted = submitted + wait
        jobs.append(
            Job(
                team=cluster.team_a,
                queue=cluster.queue_a,
                submitted_by=users[i % 2],
                name=f"exp-{i:03d}",
                image="ghcr.io/example/trainer:2.3",
                command=["python", "exp.py"],
                flavor=cluster.h100 if i % 3 else cluster.a100,
                gpus_per_worker=rng.choice([1, 2, 4, 8]),
                max_runtime_seconds=12 * H,
                state=ends[i % len(ends)],
                submitted_at=submitted,
                admitted_at=admitted,
                started_at=admitted + timedelta(seconds=20),
                finished_at=admitted + timedelta(hours=rng.randint(1, 9)),
                exit_code=0 if ends[i % len(ends)] == State.SUCCEEDED else 1,
            )
        )
    Job.objects.bulk_create(jobs)


def _usage(cluster: Cluster, now: datetime) -> None:
    """A month of hourly GPU-seconds for alpha (and a little for beta)."""
    rng = random.Random(30)
    rows = []
    hour0 = now.replace(minute=0, second=0, microsecond=0)
    for h in range(30 * 24):
        at = hour0 - timedelta(hours=h)
        weekday = at.weekday() < 5
        rows.append(
            Usage(
                team=cluster.team_a,
                flavor=cluster.h100,
                hour=at,
                gpu_seconds=3600 * rng.randint(8 if weekday else 2, 18 if weekday else 8),
            )
        )
        rows.append(
            Usage(
                team=cluster.team_a,
                flavor=cluster.a100,
                hour=at,
                gpu_seconds=3600 * rng.randint(0, 6),
            )
        )
        rows.append(
            Usage(
                team=cluster.team_b,
                flavor=cluster.h100,
                hour=at,
                gpu_seconds=3600 * rng.randint(0, 8),
            )
        )
    Usage.objects.bulk_create(rows)

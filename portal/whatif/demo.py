"""The demo's past: 30 days of a real cluster's jobs, replayed on the demo's cluster.

A slice of the Philly trace (data/philly-30d.csv) is read by the simulator's
own reader, its virtual clusters are mapped onto the demo's teams, and it is
replayed by scheduler.sim on the demo's nodes and quotas with the portal's
policy, as a what-if replays history (portal.whatif.replay). What the replay
decided (when each job was admitted, where, whether it was preempted) becomes
the finished jobs that seed_demo stores (portal.core.actions.history), so
showback, decayed fair share, wait charts and what-ifs have data on first open.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from portal.core.actions.history import Attempt, FinishedJob
from portal.core.models import GpuFlavor, Job
from portal.core.scheduling import policy_config
from portal.whatif import history
from scheduler import model as m
from scheduler.sim import SimConfig, Simulator, assign_flavors
from scheduler.sim.cluster import NodeSpec
from scheduler.sim.trace import TraceJob, read_philly

TRACE = Path(__file__).with_name("data") / "philly-30d.csv"
DAYS = 30
DEMO_GPUS_PER_NODE = 8  # devstack's agents run --fake-gpus 8
# Philly virtual cluster -> demo team, sized so each team's load is near its quota
# (speech asks for a little more than its share: it borrows, and is preempted).
TEAM_OF_CLUSTER = {
    "ee9e8c": "vision",
    "11cb48": "vision",
    "6214e9": "vision",
    "7f04ca": "nlp",
    "6c71a0": "nlp",
    "0e4a51": "nlp",
    "e13805": "nlp",
    "2869ce": "speech",
    "103959": "speech",
    "b436b2": "speech",
    "ed69ec": "speech",
}
URGENT = {"queue": "urgent", "priority": 100, "preemptible": False, "max_runtime": 4 * 3600}
URGENT_SHARE = 0.08  # of the jobs short enough for the urgent queue
DEFAULT_MAX_RUNTIME = 24 * 3600
MAX_RESTARTS = Job._meta.get_field("max_restarts").default
FAILED_SHARE = 0.08  # Philly's jobs fail often; a few demo jobs do too
WORKLOADS = {
    "vision": ["resnet50", "vit-base", "detr", "sam-finetune", "clip-eval", "yolo-sweep"],
    "nlp": ["llama-sft", "bert-pretrain", "t5-distill", "tokenizer-eval", "rlhf-rm", "mt-en-de"],
    "speech": ["whisper-ft", "conformer", "tts-vocoder", "wav2vec-pt", "diarize-eval"],
}


@dataclass
class Replayed:
    """One job's life in the replay: its attempts (admission, nodes, end) and its finish."""

    job: TraceJob
    attempts: list[Attempt] = field(default_factory=list)
    finished: float | None = None


class RecordingSimulator(Simulator):
    """The simulator, keeping what it decided for each job (the plain one keeps summaries)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.replayed = {job_id: Replayed(r.job) for job_id, r in self.recs.items()}

    def _start(self, r, admission) -> None:
        super()._start(r, admission)
        hosts = tuple(dict.fromkeys(w.node for w in admission.placement))
        self.replayed[r.job.id].attempts.append(
            Attempt(self.now, hosts, borrowed=admission.borrowed)
        )

    def _preempt(self, r, by: int) -> None:
        super()._preempt(r, by)
        self.replayed[r.job.id].attempts[-1].preempted_at = self.now

    def _stop(self, r) -> None:
        super()._stop(r)
        self.replayed[r.job.id].attempts[-1].ended = self.now

    def _complete(self, r) -> None:
        super()._complete(r)
        rep = self.replayed[r.job.id]
        rep.attempts[-1].ended = rep.finished = self.now


def cluster_nodes() -> list[NodeSpec]:
    """The demo's nodes: as registered, or, before their agents have started, as make run starts them."""
    from portal.devstack import DEMO_NODES  # the demo's node list; devstack imports no Django

    if registered := history.cluster_nodes():
        return registered
    flavor_of = {
        product: f.name for f in GpuFlavor.objects.all() for product in f.product_names or []
    }
    return [
        NodeSpec(host, flavor_of[product], DEMO_GPUS_PER_NODE, rack, block)
        for host, rack, block, product, _memory in DEMO_NODES
    ]


def trace_jobs(
    teams: Sequence[m.Team], end: float, rng: random.Random, path: Path = TRACE
) -> list[TraceJob]:
    """The trace's jobs mapped onto the demo: teams, queues, flavors, and its last day ending at `end`.

    Each job keeps its real run time (at most its queue's maximum) and declares a
    max run time of 1.5 to 3 times it, rounded up to half hours, as people do.
    Each team sends its jobs to the flavors it has quota of, in proportion to it.
    """
    trace = read_philly(path)
    jobs = [j for j in trace.jobs if j.team in TEAM_OF_CLUSTER]
    shift = end - DAYS * 86400 - min(j.submitted_at for j in jobs)
    out = []
    for j in jobs:
        urgent = j.duration < URGENT["max_runtime"] / 3 and rng.random() < URGENT_SHARE
        limit = URGENT["max_runtime"] if urgent else DEFAULT_MAX_RUNTIME
        duration = min(j.duration, limit)
        declared = min(limit, -(-duration * rng.uniform(1.5, 3.0) // 1800) * 1800)
        job = replace(
            j,
            team=TEAM_OF_CLUSTER[j.team],
            submitted_at=j.submitted_at + shift,
            duration=max(30.0, duration),
            max_runtime=max(1800.0, declared),
        )
        if urgent:
            job = replace(
                job, queue="urgent", priority=URGENT["priority"], preemptible=URGENT["preemptible"]
            )
        out.append(job)
    return [
        job for team in teams for job in _by_quota(team, [j for j in out if j.team == team.name])
    ]


def _by_quota(team: m.Team, jobs: list[TraceJob]) -> list[TraceJob]:
    """Flavors for the team's jobs in proportion to its nominal quotas (cluster.assign_flavors
    over the quota cut into 8-GPU "nodes": a worker goes where the team has room for it)."""
    shape = [
        NodeSpec(
            f"{flavor}-{i}", flavor, min(DEMO_GPUS_PER_NODE, q.nominal - i * DEMO_GPUS_PER_NODE)
        )
        for flavor, q in sorted(team.quotas.items())
        for i in range(-(-q.nominal // DEMO_GPUS_PER_NODE))
    ]
    return assign_flavors(jobs, shape) if shape else []


def replay(
    jobs: Sequence[TraceJob], nodes: Sequence[NodeSpec], teams: Sequence[m.Team]
) -> list[Replayed]:
    """Replay the jobs as the portal schedules (its policy, declared run times, its backoff)."""
    config = SimConfig(
        policy=policy_config(),
        runtime_estimate="declared",
        requeue_backoff_s=settings.BERTH["REQUEUE_BACKOFF_BASE_S"],
        requeue_backoff_max_s=settings.BERTH["REQUEUE_BACKOFF_MAX_S"],
    )
    sim = RecordingSimulator(jobs, nodes, teams, config).run()
    return list(sim.replayed.values())


def finished_jobs(
    replayed: Sequence[Replayed], users: dict[str, list[str]], now: float, rng: random.Random
) -> list[FinishedJob]:
    """The replayed jobs that ended before `now`, as jobs people submitted: names, users, exits."""
    counters: dict[str, int] = {}
    out = []
    for rep in replayed:
        if rep.finished is None or rep.finished > now:
            continue
        j = rep.job
        # The portal fails a job preempted more often than it may restart (requeue_or_fail);
        # the simulator requeues it forever: keep the attempts the portal would have run.
        attempts = rep.attempts[: MAX_RESTARTS + 1]
        limited = len(rep.attempts) > len(attempts)
        timed_out = not limited and j.duration >= j.max_runtime
        workload = rng.choice(WORKLOADS[j.team])
        counters[workload] = counters.get(workload, 0) + 1
        failed = rng.random() < FAILED_SHARE
        out.append(
            FinishedJob(
                team=j.team,
                queue=j.queue,
                flavor=j.flavor,
                user=rng.choice(users[j.team]),
                name=f"{workload}-{counters[workload]}",
                command=["python", "train.py", "--config", f"configs/{workload}.yaml"],
                workers=j.workers,
                gpus_per_worker=j.gpus_per_worker,
                priority=j.priority,
                preemptible=j.preemptible,
                max_runtime_seconds=int(j.max_runtime),
                submitted_at=j.submitted_at,
                attempts=attempts,
                exit_code=None if limited or timed_out else rng.choice((1, 137)) if failed else 0,
                restart_limited=limited,
                timed_out=timed_out,
            )
        )
    return out

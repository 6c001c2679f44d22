"""Measure what one /metrics scrape costs on a big cluster (not a test; run by hand).

    createdb -h 127.0.0.1 -U postgres berth_bench_ops
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench_ops \
    REDIS_URL=redis://127.0.0.1:6379/13 .venv/bin/python manage.py migrate -v0
    DATABASE_URL=… REDIS_URL=… .venv/bin/python bench/bench_scrape.py [--jobs 100000]

Seeds (once) 50 teams, 1,000 nodes × 8 GPUs, `--jobs` jobs (90 % finished, 6 %
running or admitted holding 4 GPUs each, the rest pending), their events and a
week of scheduling passes, then times cold (empty shared base), warm, and warm
scrapes with a fresh tail of events. Figures go to docs/operations.md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402
from prometheus_client.exposition import generate_latest  # noqa: E402

from portal.core.models import (  # noqa: E402
    Allocation,
    Cohort,
    Gpu,
    GpuFlavor,
    Job,
    JobEvent,
    Node,
    Queue,
    Quota,
    SchedulingPass,
    Team,
    Worker,
)
from portal.ops import tallies  # noqa: E402
from portal.ops.metrics import SECTIONS, registry  # noqa: E402

State = Job.State
BATCH = 5000


def seed(jobs: int) -> None:
    rng = random.Random(7)
    now = timezone.now()
    flavor = GpuFlavor.objects.create(name="h100-80gb", display_name="NVIDIA H100 80GB HBM3")
    cohort = Cohort.objects.create(name="all")
    teams = Team.objects.bulk_create(
        Team(slug=f"team-{i:02d}", name=f"Team {i}", cohort=cohort) for i in range(50)
    )
    Quota.objects.bulk_create(Quota(team=t, flavor=flavor, nominal=160) for t in teams)
    queues = Queue.objects.bulk_create(Queue(team=t, name="default") for t in teams)
    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"gpu-{i:04d}",
            flavor=flavor,
            rack=f"r{i // 32}",
            block=f"b{i // 32}",
            condition=Node.Condition.READY,
            last_heartbeat_at=now,
        )
        for i in range(1000)
    )
    gpus = Gpu.objects.bulk_create(
        (
            Gpu(
                node=n,
                index=i,
                uuid=f"GPU-{n.hostname}-{i}",
                product_name=flavor.display_name,
                memory_mib=81559,
                memory_used_mib=1000,
                utilization_pct=50.0,
                temperature_c=50.0,
                power_w=400.0,
            )
            for n in nodes
            for i in range(8)
        ),
        batch_size=BATCH,
    )
    running = int(jobs * 0.06)
    pending = int(jobs * 0.04)
    states = [State.RUNNING] * running + [State.PENDING] * pending
    states += [
        rng.choice([State.SUCCEEDED] * 8 + [State.FAILED, State.CANCELLED])
        for _ in range(jobs - len(states))
    ]
    rows = []
    for i, state in enumerate(states):
        k = i % 50
        submitted = now - timedelta(seconds=rng.uniform(4 * 3600, 30 * 86400))
        rows.append(
            Job(
                team=teams[k],
                queue=queues[k],
                flavor=flavor,
                name=f"j{i}",
                image="img",
                workers=1,
                gpus_per_worker=4,
                max_runtime_seconds=86400,
                state=state,
                reason_code="quota" if state == State.PENDING else "",
                submitted_at=submitted,
                admitted_at=None
                if state == State.PENDING
                else submitted + timedelta(seconds=rng.uniform(1, 7200)),
            )
        )
    created = Job.objects.bulk_create(rows, batch_size=BATCH)
    events = []
    for job in created:
        events.append(JobEvent(job=job, at=job.submitted_at, kind="submitted", to_state="pending"))
        if job.state != State.PENDING:
            events.append(
                JobEvent(
                    job=job,
                    at=job.admitted_at,
                    kind="admitted",
                    from_state="pending",
                    to_state="admitted",
                )
            )
        if job.state in Job.TERMINAL_STATES:
            events.append(
                JobEvent(
                    job=job,
                    at=job.admitted_at + timedelta(hours=1),
                    kind=str(job.state),
                    from_state="running",
                    to_state=job.state,
                )
            )
        if len(events) >= BATCH:
            JobEvent.objects.bulk_create(events)
            events = []
    JobEvent.objects.bulk_create(events)
    run_jobs = [j for j in created if j.state == State.RUNNING][: len(gpus) // 4]
    workers = Worker.objects.bulk_create(
        (
            Worker(job=j, attempt=0, rank=0, node_id=gpus[4 * i].node_id, state="running")
            for i, j in enumerate(run_jobs)
        ),
        batch_size=BATCH,
    )
    Allocation.objects.bulk_create(
        (
            Allocation(
                job_id=w.job_id, worker=w, worker_rank=0, node_id=w.node_id, gpu=gpus[4 * i + g]
            )
            for i, w in enumerate(workers)
            for g in range(4)
        ),
        batch_size=BATCH,
    )
    week = 7 * 86400 // 5
    SchedulingPass.objects.bulk_create(
        (
            SchedulingPass(
                started_at=now - timedelta(seconds=5 * (week - i)),
                duration_ms=rng.uniform(20, 900),
                policy="fairshare",
            )
            for i in range(week)
        ),
        batch_size=BATCH,
    )


def scrape(sections=SECTIONS) -> tuple[float, int, int]:
    with CaptureQueriesContext(connection) as ctx:
        started = time.perf_counter()
        body = generate_latest(registry(sections=sections))
        elapsed = time.perf_counter() - started
    return elapsed, len(ctx.captured_queries), len(body)


def fresh_tail(n: int) -> None:
    """`n` admissions in the last minute: counted above the watermark at every scrape."""
    now = timezone.now()
    jobs = list(Job.objects.filter(state=State.PENDING).values_list("pk", flat=True)[:n])
    JobEvent.objects.bulk_create(
        JobEvent(job_id=pk, at=now, kind="admitted", from_state="pending", to_state="admitted")
        for pk in jobs
    )


def report(label: str, runs: list[tuple[float, int, int]]) -> None:
    times = [r[0] * 1000 for r in runs]
    print(
        f"{label:<38} median {statistics.median(times):7.1f} ms  max {max(times):7.1f} ms  "
        f"{runs[0][1]} queries  {runs[0][2] / 1024:.0f} KiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    if not Job.objects.exists():
        started = time.perf_counter()
        seed(args.jobs)
        print(f"seeded in {time.perf_counter() - started:.0f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(
        f"jobs {Job.objects.count()}, events {JobEvent.objects.count()}, "
        f"passes {SchedulingPass.objects.count()}, GPUs {Gpu.objects.count()}, "
        f"active allocations {Allocation.objects.filter(active=True).count()}"
    )
    cold = []
    for _ in range(3):
        tallies.reset()
        cold.append(scrape(("cluster",)))
    report("cold ?collect=cluster (full recount)", cold)
    report("warm (base up to date)", [scrape() for _ in range(10)])
    report("  ?collect=cluster", [scrape(("cluster",)) for _ in range(10)])
    report("  ?collect=gpus", [scrape(("gpus",)) for _ in range(10)])
    fresh_tail(2000)
    report("warm + 2,000 unsettled events", [scrape() for _ in range(10)])
    report("  ?collect=cluster", [scrape(("cluster",)) for _ in range(10)])


if __name__ == "__main__":
    main()

"""Benchmark the full scheduling pass on PostgreSQL: load the snapshot, run the
core, write the plan and commit — the work the Celery task does every few seconds.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench \\
        .venv/bin/python bench/bench_pass.py [--pending 10000] [--nodes 1000] [--repeat 3]

It (re)creates the database's tables, fills them like bench_core.py's cluster
(1,000 nodes × 8 GPUs in two flavors, 50 teams in 5 cohorts, about 70 % of the
GPUs held by running gangs, N pending gangs of 1–32 GPUs), then times passes.
Between passes the writes of the previous one are undone, so every pass sees
the same data. Reports wall time, queries, admitted and preempted.
Target (../shared/DESIGN.md): ≤ 2 s at 10,000 pending, a constant number of queries.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

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
from portal.core.scheduling import run_pass  # noqa: E402

SIZES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)]
SIZE_WEIGHTS = [40, 15, 15, 15, 10, 5]
RUNTIMES = [3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600]


def ensure_database() -> None:
    """Create the benchmark database if it does not exist, then migrate from scratch."""
    import psycopg

    name = connection.settings_dict["NAME"]
    params = {
        k: v
        for k, v in {
            "host": connection.settings_dict["HOST"],
            "user": connection.settings_dict["USER"],
            "port": connection.settings_dict["PORT"] or 5432,
        }.items()
        if v
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')
    call_command("migrate", "--no-input", "-v", "0")
    with connection.cursor() as cur:
        tables = [t for t in connection.introspection.table_names(cur) if t.startswith("core_")]
        cur.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE")


def populate(n_nodes: int, n_pending: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    flavors = [
        GpuFlavor.objects.create(name=n, display_name=n, product_names=[n])
        for n in ("h100-80gb", "a100-40gb")
    ]
    cohorts = [Cohort.objects.create(name=f"cohort-{i}") for i in range(5)]
    teams = Team.objects.bulk_create(
        Team(
            slug=f"team-{i:02d}",
            name=f"Team {i}",
            weight=rng.choice([1, 1, 2]),
            cohort=cohorts[i % 5],
        )
        for i in range(50)
    )
    per_team = n_nodes * 8 // 2 // 50
    Quota.objects.bulk_create(
        Quota(team=t, flavor=f, nominal=per_team, borrowing_limit=per_team * 2)
        for t in teams
        for f in flavors
    )
    queues = Queue.objects.bulk_create(Queue(team=t, name="default") for t in teams)
    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"n{i:04d}",
            flavor=flavors[i * 2 // n_nodes],
            rack=f"r{i // 16}",
            block=f"b{i // 32}",
            condition=Node.Condition.READY,
            last_heartbeat_at=timezone.now(),
        )
        for i in range(n_nodes)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(node=n, index=g, uuid=f"GPU-{n.hostname}-{g}") for n in nodes for g in range(8)
    )
    _running(rng, teams, queues, flavors, nodes, gpus)
    _pending(rng, teams, queues, flavors, n_pending)


def _job(rng, team, queue, flavor, shape, state, submitted):
    workers, per = shape
    return Job(
        team=team,
        queue=queue,
        flavor=flavor,
        name="bench",
        image="img",
        command=["true"],
        workers=workers,
        gpus_per_worker=per,
        priority=rng.choice([0, 0, 0, 10]),
        max_runtime_seconds=rng.choice(RUNTIMES),
        state=state,
        submitted_at=submitted,
    )


def _running(rng, teams, queues, flavors, nodes, gpus) -> None:
    """Fill about 70 % of each node's GPUs with single-node gangs."""
    now = timezone.now()
    free = {n.pk: [g for g in gpus if g.node_id == n.pk] for n in nodes}
    jobs, places = [], []
    for node in nodes:
        budget = rng.choice([4, 6, 8, 8])
        while budget > 0:
            per = min(budget, rng.choice([1, 2, 4, 8]))
            i = rng.randrange(50)
            job = _job(
                rng,
                teams[i],
                queues[i],
                next(f for f in flavors if f.pk == node.flavor_id),
                (1, per),
                Job.State.RUNNING,
                now - timedelta(hours=rng.uniform(1, 48)),
            )
            job.admitted_at = job.started_at = now - timedelta(hours=rng.uniform(0, 1))
            jobs.append(job)
            places.append((node, [free[node.pk].pop() for _ in range(per)]))
            budget -= per
    jobs = Job.objects.bulk_create(jobs)
    workers = Worker.objects.bulk_create(
        Worker(job=j, attempt=0, rank=0, node=node, state=Worker.State.RUNNING)
        for j, (node, _) in zip(jobs, places, strict=True)
    )
    Allocation.objects.bulk_create(
        Allocation(job=j, worker=w, worker_rank=0, node=node, gpu=g)
        for j, w, (node, gs) in zip(jobs, workers, places, strict=True)
        for g in gs
    )


def _pending(rng, teams, queues, flavors, count) -> None:
    base = timezone.now() - timedelta(hours=6)
    jobs = []
    for k in range(count):
        i = rng.randrange(50)
        shape = rng.choices(SIZES, SIZE_WEIGHTS)[0]
        jobs.append(
            _job(
                rng,
                teams[i],
                queues[i],
                rng.choice(flavors),
                shape,
                Job.State.PENDING,
                base + timedelta(seconds=k),
            )
        )
    Job.objects.bulk_create(jobs, batch_size=5000)


def undo_pass(marks: dict, pending: list[int], running: list[int]) -> None:
    """Put the data back as it was before the pass (outside the timing)."""
    Allocation.objects.filter(pk__gt=marks["allocation"]).delete()
    Worker.objects.filter(pk__gt=marks["worker"]).delete()
    JobEvent.objects.filter(pk__gt=marks["event"]).delete()
    SchedulingPass.objects.all().delete()
    Job.objects.filter(pk__in=pending).update(
        state=Job.State.PENDING,
        admitted_at=None,
        reason_code="",
        reason="",
        queue_position=None,
        estimated_start_at=None,
        reserved_on=[],
        reserved_until=None,
        reserved_ending=[],
    )
    Job.objects.filter(pk__in=running).update(
        state=Job.State.RUNNING, stop_requested_at=None, preempted_by=None
    )
    # Each pass and its undo leave two dead versions of every pending job's row; without
    # a vacuum every pass finds a more bloated table (2.0 s, then 2.9 s). Autovacuum does
    # this on a live portal, where most passes change few rows.
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE core_job, core_worker, core_allocation, core_jobevent")


def backend_cpu() -> float | None:
    """CPU seconds the PostgreSQL backend serving this connection has used (from
    /proc, when the server runs on this machine and its process is readable)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def last_id(model) -> int:
    return model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="profile one more pass; top 30 by cumulative time"
    )
    args = parser.parse_args()

    ensure_database()
    started = time.perf_counter()
    populate(args.nodes, args.pending)
    print(
        f"populated in {time.perf_counter() - started:.1f} s: {Node.objects.count()} nodes, "
        f"{Gpu.objects.count()} GPUs, {Allocation.objects.count()} held, "
        f"{Job.objects.filter(state='running').count()} running, {Job.objects.filter(state='pending').count()} pending"
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    pending = list(Job.objects.filter(state="pending").values_list("pk", flat=True))
    running = list(Job.objects.filter(state="running").values_list("pk", flat=True))
    marks = {
        "allocation": last_id(Allocation),
        "worker": last_id(Worker),
        "event": last_id(JobEvent),
    }
    walls, cpus, rows = [], [], []
    for _ in range(args.repeat):
        db0 = backend_cpu()
        c0, t0 = time.process_time(), time.perf_counter()
        result = run_pass()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        db1 = backend_cpu()
        db = db1 - db0 if db0 is not None and db1 is not None else None
        s = result.summary()
        rows.append((walls[-1], cpus[-1], db, s["queries"], s["admitted"], s["preempted"]))
        undo_pass(marks, pending, running)
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(run_pass)
        undo_pass(marks, pending, running)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if not rows:
        return
    for wall, cpu, db, queries, admitted, preempted in rows:
        server = f", PostgreSQL {db:.3f} s CPU" if db is not None else ""
        print(
            f"pass: {wall:.3f} s wall, {cpu:.3f} s CPU{server}, {queries} queries, "
            f"{admitted} admitted, {preempted} preempted"
        )
    print(
        f"median {statistics.median(walls):.3f} s wall, {statistics.median(cpus):.3f} s CPU "
        f"over {len(walls)} passes "
        f"({args.pending} pending, {args.nodes} nodes × 8 GPUs) at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )


if __name__ == "__main__":
    main()

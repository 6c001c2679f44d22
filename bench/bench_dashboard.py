"""Benchmark the dashboard's busiest pages for a team with 10,000 jobs of history.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth \\
        .venv/bin/python bench/bench_dashboard.py [--jobs 10000] [--runs 40]

Builds a throwaway database (test_<name>, dropped afterwards): 3 teams in one
cohort, 2 GPU flavors on 50 nodes x 8 GPUs in 5 racks, and for team "alpha"
`--jobs` jobs over 90 days (about 4 % pending in two queues, 1 % running or
admitted with their GPUs, the rest finished) with 3 events each, 90 days of
hourly usage, and some jobs for the other teams. It then renders each page
through Django's test client, logged in as alpha's lead, and prints the median
and p95 of the server-side time (request in, HTML out; no network, no browser).
Target (issue #8): team overview and queue under 300 ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
warnings.filterwarnings("ignore", "No directory at")  # collected static files are not needed

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench import cpu_model  # noqa: E402
from portal.core.models import (  # noqa: E402
    Allocation,
    Cohort,
    GpuFlavor,
    Job,
    JobEvent,
    Membership,
    Queue,
    Usage,
    Worker,
)
from tests.factories import make_node, make_team, make_user  # noqa: E402

State = Job.State
H = 3600


def build(n_jobs: int, rng: random.Random):
    now = timezone.now()
    cohort = Cohort.objects.create(name="research")
    h100 = GpuFlavor.objects.create(name="h100-80gb", memory_mib=81559)
    a100 = GpuFlavor.objects.create(name="a100-40gb", memory_mib=40960)
    alpha = make_team("alpha", cohort=cohort, quotas={h100: 96, a100: 64})
    others = [make_team(s, cohort=cohort, quotas={h100: 64, a100: 32}) for s in ("beta", "gamma")]
    queues = [
        Queue.objects.create(team=alpha, name=n, max_runtime_seconds=72 * H)
        for n in ("default", "urgent")
    ]
    other_queues = [
        Queue.objects.create(team=t, name="default", max_runtime_seconds=72 * H) for t in others
    ]
    nodes = [
        make_node(
            f"node-{i:03d}", h100 if i < 30 else a100, rack=f"r{i // 10}", block=f"b{i // 10}"
        )
        for i in range(50)
    ]
    lead = make_user("bench-lead")
    Membership.objects.create(user=lead, team=alpha, role=Membership.Role.LEAD)
    members = [make_user(f"bench-user-{i}") for i in range(8)]
    Membership.objects.bulk_create(Membership(user=u, team=alpha) for u in members)

    jobs = [
        _job(alpha, queues[i % 2], members[i % 8], h100 if i % 3 else a100, i, n_jobs, now, rng)
        for i in range(n_jobs)
    ]
    jobs += [
        _job(t, q, lead, h100, i, 2000, now, rng)
        for t, q in zip(others, other_queues, strict=True)
        for i in range(2000)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    JobEvent.objects.bulk_create(
        (
            JobEvent(job=j, at=j.submitted_at, kind=k, to_state=s, message="bench")
            for j in jobs
            for k, s in (("submitted", "pending"), ("admitted", "admitted"), ("running", "running"))
        ),
        batch_size=5000,
    )
    _place_active(jobs, nodes, now)
    _usage([alpha, *others], [h100, a100], now, rng)
    return lead, alpha


def _job(team, queue, user, flavor, i, n, now, rng) -> Job:
    age = timedelta(seconds=rng.uniform(0, 90 * 24 * H))
    submitted = now - age
    roll = i / n
    state = (
        State.PENDING
        if roll < 0.04
        else State.RUNNING
        if roll < 0.05
        else rng.choice([State.SUCCEEDED] * 8 + [State.FAILED, State.CANCELLED])
    )
    wait = timedelta(seconds=rng.expovariate(1 / 1800))
    finished = state not in (State.PENDING, State.RUNNING)
    return Job(
        team=team,
        queue=queue,
        submitted_by=user,
        name=f"{team.slug}-job-{i}",
        image="img:1",
        command=["python", "train.py"],
        flavor=flavor,
        gpus_per_worker=rng.choice([1, 2, 4, 8]),
        max_runtime_seconds=24 * H,
        state=state,
        submitted_at=submitted
        if state != State.RUNNING
        else now - timedelta(hours=rng.uniform(0.2, 20)),
        admitted_at=None if state == State.PENDING else submitted + wait,
        started_at=None if state == State.PENDING else submitted + wait,
        finished_at=submitted + wait + timedelta(hours=2) if finished else None,
        reason_code="no_capacity" if state == State.PENDING else "",
        reason="needs 8 GPUs; 3 free" if state == State.PENDING else "",
        estimated_start_at=now + timedelta(minutes=rng.randint(1, 600))
        if state == State.PENDING
        else None,
    )


def _place_active(jobs, nodes, now) -> None:
    """Give every running job GPUs on a node of its flavor, while free GPUs last."""
    free = {n.pk: list(n.gpus.values_list("pk", flat=True)) for n in nodes}
    by_flavor = {}
    for n in nodes:
        by_flavor.setdefault(n.flavor_id, []).append(n)
    for job in (j for j in jobs if j.state == State.RUNNING):
        node = next(
            (n for n in by_flavor[job.flavor_id] if len(free[n.pk]) >= job.gpus_per_worker), None
        )
        if node is None:
            Job.objects.filter(pk=job.pk).update(state=State.SUCCEEDED, finished_at=now)
            continue
        worker = Worker.objects.create(job=job, attempt=0, rank=0, node=node, state="running")
        gpus = [free[node.pk].pop() for _ in range(job.gpus_per_worker)]
        Allocation.objects.bulk_create(
            Allocation(job=job, worker=worker, worker_rank=0, node=node, gpu_id=g) for g in gpus
        )


def _usage(teams, flavors, now, rng) -> None:
    hour0 = now.replace(minute=0, second=0, microsecond=0)
    Usage.objects.bulk_create(
        (
            Usage(
                team=t,
                flavor=f,
                hour=hour0 - timedelta(hours=h),
                gpu_seconds=3600 * rng.randint(0, 40),
            )
            for t in teams
            for f in flavors
            for h in range(90 * 24)
        ),
        batch_size=5000,
    )


def measure(client: Client, url: str, runs: int) -> dict:
    """Wall time of each request (Python and PostgreSQL) and this process's CPU time.

    On a shared machine wall time also counts other processes; CPU time does not
    (but leaves out the database server's own work).
    """
    for _ in range(3):
        assert client.get(url).status_code == 200, url
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    wall.sort()
    return {
        "median": statistics.median(wall),
        "p95": wall[min(len(wall) - 1, int(0.95 * len(wall)))],
        "cpu": statistics.median(cpu),
        "queries": len(queries),
    }


def machine() -> str:
    cpu = cpu_model()
    nproc = (
        subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() or os.cpu_count()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version()" if connection.vendor == "postgresql" else "SELECT sqlite_version()"
        )
        db = cursor.fetchone()[0].split(",")[0]
    return f"nproc={nproc}, CPU: {cpu}, Python {platform.python_version()}, Django {django.__version__}, {db}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs of history for the team")
    parser.add_argument("--runs", type=int, default=40, help="timed requests per page")
    args = parser.parse_args()

    setup_test_environment()
    settings.DEBUG = False
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        started = time.perf_counter()
        lead, alpha = build(args.jobs, random.Random(8))
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("ANALYZE")
        print(
            f"built {Job.objects.count():,} jobs ({Job.objects.filter(team=alpha).count():,} "
            f"of team alpha), {JobEvent.objects.count():,} events, "
            f"{Allocation.objects.count():,} allocations in {time.perf_counter() - started:.1f} s"
        )
        client = Client()
        client.force_login(lead)
        client.get("/teams/alpha/")
        some_job = Job.objects.filter(team=alpha, state=State.RUNNING).first()
        pages = {
            "team overview": "/teams/alpha/",
            "team overview, live fragment": "/teams/alpha/?fragment=live",
            "queue": "/teams/alpha/queue/",
            "queue, live fragment": "/teams/alpha/queue/?fragment=live",
            "cluster (400 GPUs)": "/teams/alpha/cluster/",
            "job": f"/jobs/{some_job.pk}/",
            "usage CSV": "/teams/alpha/usage.csv",
        }
        print(f"\n{'page':<32} {'median ms':>10} {'p95 ms':>8} {'CPU ms':>8} {'queries':>8}")
        for name, url in pages.items():
            r = measure(client, url, args.runs)
            print(
                f"{name:<32} {r['median']:>10.1f} {r['p95']:>8.1f} {r['cpu']:>8.1f} {r['queries']:>8}"
            )
        print(f"\n{args.runs} requests per page; wall median/p95, CPU median; {machine()}")
        print(f"load average during the run: {os.getloadavg()[0]:.1f}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark agent heartbeats: N simulated agents, each every T seconds, against
gunicorn on PostgreSQL, open loop (latency counted from each heartbeat's
scheduled time, so a slow server cannot hide its queueing).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench \\
        .venv/bin/python bench/bench_heartbeat.py [--agents 2000] [--interval 10] \\
        [--duration 60] [--workers 2] [--threads 8] [--jobs-per-node 1] [--in-process BEATS] \
        [--watch]

Each agent reports 8 GPUs with telemetry and its running workers; each reply
carries its desired state. Target (../shared/DESIGN.md): 2,000 agents every
10 s with p99 < 100 ms on a 2-core machine.

`--watch` runs the agents' watch as deployed (docs/deploy.md; needs REDIS_URL): the
heartbeats read each node's desired-state version and sign a watch ticket, and every
agent keeps one watch waiting on the watch process (uvicorn portal.agentapi.watch:app),
asking again each time one times out, as the agent does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.bench_api import _proc_cpu, server_cpu  # noqa: E402
from bench.bench_pass import ensure_database  # noqa: E402
from portal.core.models import Allocation, Gpu, GpuFlavor, Job, Node, Queue, Team, Worker  # noqa: E402
from portal.core.secrets import new_secret  # noqa: E402

PRODUCT = "NVIDIA H100 80GB HBM3"


def populate(agents: int, jobs_per_node: int) -> list[tuple[str, dict]]:
    """Nodes with tokens, GPUs and running single-node jobs; returns (token, body) per agent."""
    flavor = GpuFlavor.objects.create(
        name="h100-80gb", display_name=PRODUCT, product_names=[PRODUCT]
    )
    team = Team.objects.create(slug="bench", name="Bench")
    queue = Queue.objects.create(team=team, name="default")
    secrets = [new_secret("bnt") for _ in range(agents)]
    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"hb{i:05d}",
            flavor=flavor,
            rack=f"r{i // 32}",
            condition=Node.Condition.READY,
            last_heartbeat_at=timezone.now(),
            token_hash=s.digest,
        )
        for i, s in enumerate(secrets)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(node=n, index=g, uuid=f"GPU-{n.hostname}-{g}") for n in nodes for g in range(8)
    )
    per = 8 // max(1, jobs_per_node)
    jobs = Job.objects.bulk_create(
        Job(
            team=team,
            queue=queue,
            flavor=flavor,
            name="hb",
            image="img",
            command=["sleep", "1d"],
            gpus_per_worker=per,
            max_runtime_seconds=86400,
            state=Job.State.RUNNING,
            admitted_at=timezone.now(),
        )
        for _ in nodes
        for _ in range(jobs_per_node)
    )
    workers = Worker.objects.bulk_create(
        Worker(job=j, attempt=0, rank=0, node=nodes[k // jobs_per_node], state=Worker.State.RUNNING)
        for k, j in enumerate(jobs)
    )
    by_node = {}
    for w in workers:
        by_node.setdefault(w.node_id, []).append(w)
    gpus_of = {}
    for g in gpus:
        gpus_of.setdefault(g.node_id, []).append(g)
    Allocation.objects.bulk_create(
        Allocation(job_id=w.job_id, worker=w, worker_rank=0, node_id=w.node_id, gpu=g)
        for w_list in by_node.values()
        for k, w in enumerate(w_list)
        for g in gpus_of[w.node_id][k * per : (k + 1) * per]
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    out = []
    for node, secret in zip(nodes, secrets, strict=True):
        body = {
            "agent_version": "bench",
            "gpus": [
                {
                    "index": g,
                    "uuid": f"GPU-{node.hostname}-{g}",
                    "name": PRODUCT,
                    "memory_total_mib": 81559,
                    "memory_used_mib": 4000,
                    "utilization_pct": 90.0,
                    "temperature_c": 60.0,
                    "power_w": 500.0,
                    "health": "healthy",
                    "health_reason": "",
                }
                for g in range(8)
            ],
            "workers": [
                {"key": w.key, "state": "running", "exit_code": None}
                for w in by_node.get(node.pk, [])
            ],
        }
        out.append((secret.plaintext, body))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SECRET = "b" * 20 + "x9!k#Lm2$Qp7&Rt4*Vw8^Yz1@Ac3-Ef6+"


def server_env(watch_port: int | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": SECRET,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "BERTH_LOG_LEVEL": "WARNING",
        # Database sessions live through the run, so their CPU time is all counted
        # (a session closed by CONN_MAX_AGE takes its CPU time with it).
        "DB_CONN_MAX_AGE": "3600",
    }
    if watch_port:
        env["BERTH_WATCH_URL"] = f"http://127.0.0.1:{watch_port}/api/agent/v1/watch"
    return env


def start_watch(port: int) -> subprocess.Popen:
    """The agents' watch process, as deployed (uvicorn, one process)."""
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "uvicorn"),
            "portal.agentapi.watch:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--backlog",
            "4096",
            "--timeout-graceful-shutdown",
            "2",
        ],  # fmt: skip
        cwd=ROOT,
        env=server_env(port),
        start_new_session=True,
    )
    _await_port(port, "uvicorn")
    return proc


def _await_port(port: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"{what} did not start")


async def watch_forever(port: int, ticket: str, until: float, counts: dict) -> None:
    """One agent's watch: a GET that waits; again each time it answers, from the version
    it answered (the agent takes it from the beat that a change wakes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    since = 0
    while time.monotonic() < until:
        writer.write(
            f"GET /api/agent/v1/watch?since={since} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {ticket}\r\n\r\n".encode()
        )
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = json.loads(await reader.readexactly(length))
        since = body.get("version", since)
        counts[status] = counts.get(status, 0) + 1
    writer.close()


def start_gunicorn(port: int, workers: int, threads: int = 1, watch_port=None) -> subprocess.Popen:
    env = server_env(watch_port)
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "portal.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--threads",
            str(threads),
            "--log-level",
            "warning",
            "--keep-alive",
            "30",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    raise SystemExit("gunicorn did not start")


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port: int):
        self.port = port
        self.reader = self.writer = None

    async def post(self, path: str, token: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
            if name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        await self.reader.readexactly(length)
        if close:
            self.writer.close()
            self.writer = None
        return int(status_line.split()[1])


async def run_load(
    port: int, agents: list[tuple[str, bytes]], interval: float, duration: float, conns: int
):
    queue: asyncio.Queue = asyncio.Queue()
    latencies, statuses = [], {}
    start = time.monotonic() + 1.0
    phase = [random.Random(i).uniform(0, interval) for i in range(len(agents))]

    async def producer():
        schedule = sorted(
            (start + p + k * interval, i)
            for i, p in enumerate(phase)
            for k in range(int(duration / interval))
        )
        for due, i in schedule:
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait((due, i))
        for _ in range(conns):
            queue.put_nowait(None)

    async def consumer():
        conn = Conn(port)
        while (item := await queue.get()) is not None:
            due, i = item
            token, body = agents[i]
            try:
                status = await conn.post("/api/agent/v1/heartbeat", token, body)
            except (ConnectionError, asyncio.IncompleteReadError):
                conn.writer, status = None, 0
            latencies.append(time.monotonic() - due)
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(producer(), *(consumer() for _ in range(conns)))
    return latencies, statuses


def watch_tickets() -> list[str]:
    """Every node's watch ticket, signed with the servers' key."""
    from django.core import signing

    from portal.core.wake import TICKET_SALT

    node_ids = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    connection.close()
    return [signing.dumps(pk, key=SECRET, salt=TICKET_SALT, compress=False) for pk in node_ids]


async def load_and_watch(port, agents, args, watch_port, watches, tickets):
    """The heartbeats' open loop, with every agent's watch waiting alongside when asked."""
    if not watch_port:
        return await run_load(port, agents, args.interval, args.duration, args.connections)
    until = time.monotonic() + args.duration + 1
    watchers = [asyncio.create_task(watch_forever(watch_port, t, until, watches)) for t in tickets]
    await asyncio.sleep(1.0)
    try:
        return await run_load(port, agents, args.interval, args.duration, args.connections)
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


def in_process(agents: list[tuple[str, bytes]], beats: int) -> None:
    """The web side's CPU per beat without gunicorn or queueing: Django's test client
    in this process, one beat after another, cycling through the agents (each agent's
    first beat, which writes its inventory, is not counted). For comparing two trees
    on a machine too busy for the latencies of the open-loop run to mean much."""
    from django.test import Client

    client = Client()

    def beat(token: str, body: bytes) -> None:
        response = client.post(
            "/api/agent/v1/heartbeat",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 200, response.content[:300]

    for token, body in agents:
        beat(token, body)
    samples = []
    for k in range(beats):
        token, body = agents[k % len(agents)]
        c0 = time.thread_time()
        beat(token, body)
        samples.append(time.thread_time() - c0)
    samples.sort()
    q = statistics.quantiles(samples, n=100)
    print(
        f"in-process, {beats} beats of {len(agents)} agents: Django CPU per beat "
        f"median {q[49] * 1000:.3f} ms, p90 {q[89] * 1000:.3f} ms, mean {statistics.fmean(samples) * 1000:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--threads",
        type=int,
        default=8,
        help="threads per worker (gthread, as deploy/gunicorn.conf.py)",
    )
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--jobs-per-node", type=int, default=1)
    parser.add_argument(
        "--in-process",
        type=int,
        metavar="BEATS",
        help="instead of the load: BEATS beats through Django's test client, CPU per beat",
    )
    parser.add_argument("--watch", action="store_true", help="with the agents' watch (above)")
    args = parser.parse_args()

    ensure_database()
    agents = [(t, json.dumps(b).encode()) for t, b in populate(args.agents, args.jobs_per_node)]
    if args.in_process:
        return in_process(agents, args.in_process)
    connection.close()
    port = free_port()
    watch_port = free_port() if args.watch else None
    watch = start_watch(watch_port) if watch_port else None
    server = start_gunicorn(port, args.workers, args.threads, watch_port)
    try:
        # Warm up outside the figures: every worker (imports, URL resolver, database
        # sessions), and every agent once, so each node has its inventory written, as on
        # a cluster that has been up a while (the measured beats then write only
        # telemetry, when it is due: one beat in three per node at 10 s).
        asyncio.run(run_load(port, agents, args.interval, args.interval, args.connections))
        time.sleep(1.0)
        tickets = watch_tickets() if watch else []
        t0, c0, s0 = time.monotonic(), time.process_time(), server_cpu(server.pid)
        w0 = _proc_cpu(watch.pid) if watch else 0.0
        watches: dict[int, int] = {}
        latencies, statuses = asyncio.run(
            load_and_watch(port, agents, args, watch_port, watches, tickets)
        )
        wall = time.monotonic() - t0
        s1 = server_cpu(server.pid)
        if watch:
            s1["watch"], s0["watch"] = _proc_cpu(watch.pid), w0
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(20)
        if watch:
            os.killpg(watch.pid, signal.SIGTERM)
            watch.wait(20)
    if watch:
        print(f"{len(agents)} agents watching all along; watch answers {watches}")
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    print(
        f"{len(latencies)} heartbeats from {args.agents} agents every {args.interval:g} s over {wall:.0f} s "
        f"({len(latencies) / wall:.0f}/s), gunicorn {args.workers} workers × {args.threads} threads; statuses {statuses}; "
        f"load generator CPU {time.process_time() - c0:.1f} s"
    )
    print(
        f"latency p50 {q[49] * 1000:.1f} ms, p90 {q[89] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms"
    )
    per = {k: (s1[k] - s0[k]) / len(latencies) * 1000 for k in s0}
    client = (time.process_time() - c0) / len(latencies) * 1000
    total = sum(per.values()) + client
    watch_cpu = f"watch {per['watch']:.2f} ms, " if "watch" in per else ""
    print(
        f"CPU per heartbeat: gunicorn {per['web server']:.2f} ms, {watch_cpu}postgres {per['postgres']:.2f} ms, "
        f"load generator {client:.2f} ms = {total:.2f} ms → {os.cpu_count()} idle cores ≈ "
        f"{os.cpu_count() * 1000 / total:,.0f} heartbeats/s"
    )


if __name__ == "__main__":
    main()

"""Benchmark job submission over REST: authenticated, validated, stored, under
gunicorn on PostgreSQL, closed loop from several client processes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench_api \\
    REDIS_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/bench_api.py [--duration 30] [--clients 16] \\
        [--workers 2] [--threads 8] [--worker-class sync|gthread] \\
        [--keepalive-requests 100] [--reuse-port] [--bulk-size 1000] [--context] \\
        [--json PATH]

Every request carries a Bearer token (one per client, each of its own team),
passes the per-token throttle (its rate raised so it counts without refusing),
full validation (jobspec) and is committed before its 201. A drainer stands in
for the scheduler: every second it moves pending jobs on (to `succeeded`), so
queues stay as short as a running cluster keeps them; `--no-drain` lets them grow.

Each run also reports the CPU one success cost (gunicorn workers, their
PostgreSQL sessions, the client processes), read from /proc, and what the
machine's cores could sustain at that cost if nothing else ran: on a shared
machine the measured rate depends on the neighbours, the CPU cost much less.

`--json PATH` also writes the figures of every run there (bench/compare_slurm.sh
reads them).

`--server granian` serves the same WSGI application with granian (a Rust HTTP
server; not a dependency of Berth: `.venv/bin/pip install granian` first) to
see what the HTTP server's own share of the CPU is; the targets are for gunicorn.

The web server asks for a scheduling pass after submissions (a Celery task sent to
the broker at REDIS_URL), and no Celery worker runs here to take them: the script
purges the broker's queue before and after the run and says how many it found
(none may be left behind; it exits non-zero if some are).

Targets (../shared/DESIGN.md): ≥ 1,000 single submissions/s sustained and
≥ 20,000 jobs/s in bulk on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench_api")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from bench import cpu_model  # noqa: E402
from bench.bench_pass import ensure_database  # noqa: E402
from portal.core.actions.tokens import create_api_token  # noqa: E402
from portal.core.models import Cohort, Gpu, GpuFlavor, Membership, Node, Queue, Quota, Team  # noqa: E402

JOB = {
    "name": "bench",
    "image": "registry.example.com/pytorch:2.4",
    "command": ["python", "train.py", "--epochs", "3"],
    "flavor": "h100-80gb",
    "workers": 2,
    "gpus_per_worker": 8,
    "max_runtime_seconds": 3600,
    "env": {"SEED": "1"},
}


def populate(clients: int) -> list[str]:
    """One team, queue, member and token per client; 8 nodes of 8 GPUs. Returns the tokens."""
    get_user_model().objects.filter(username__startswith="ci-").delete()  # from an earlier run
    flavor = GpuFlavor.objects.create(name="h100-80gb", product_names=["NVIDIA H100 80GB HBM3"])
    cohort = Cohort.objects.create(name="bench")
    for i in range(8):
        node = Node.objects.create(hostname=f"n{i}", flavor=flavor, condition=Node.Condition.READY)
        Gpu.objects.bulk_create(Gpu(node=node, index=g, uuid=f"GPU-n{i}-{g}") for g in range(8))
    tokens = []
    for i in range(clients):
        team = Team.objects.create(slug=f"team-{i}", name=f"Team {i}", cohort=cohort)
        Quota.objects.create(team=team, flavor=flavor, nominal=32)
        Queue.objects.create(team=team, name="default", max_pending_jobs=1_000_000)
        user = get_user_model().objects.create_user(f"ci-{i}", password=None)
        Membership.objects.create(user=user, team=team, role=Membership.Role.MEMBER)
        tokens.append(create_api_token(user, name="bench")[1])
    return tokens


def start_server(
    port: int,
    workers: int,
    threads: int,
    server: str = "gunicorn",
    worker_class: str = "",
    config: list[str] | None = None,
) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "bench-" + "k9!x#Lm2$Qp7&Rt4*Vw8^Yz1@Ac3-Ef6+" * 2,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "BERTH_LOG_LEVEL": "WARNING",
        # Database sessions live through the run, so their CPU time is all counted
        # (a session closed by CONN_MAX_AGE takes its CPU time with it).
        "DB_CONN_MAX_AGE": "3600",
        "BERTH_API_RATE": "10000000/min",
        "BERTH_BATCH_STATS": "1",  # each worker says at exit how big its submit batches were
    }
    bin_dir = Path(sys.executable).parent
    if server == "granian":
        argv = [str(bin_dir / "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
                "--port", str(port), "--workers", str(workers), "--blocking-threads",
                str(threads), "--log-level", "warning", "--no-ws", "portal.wsgi:application"]  # fmt: skip
    else:
        worker_class = worker_class or ("gthread" if threads > 1 else "sync")
        worker_args = ["-k", worker_class, "--threads", str(threads)]
        argv = [str(bin_dir / "gunicorn"), "portal.wsgi", "-b", f"127.0.0.1:{port}",
                "-w", str(workers), *worker_args, "--log-level", "warning", *(config or [])]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{server} did not start")


def client(
    port: int,
    token: str,
    path: str,
    body: bytes | None,
    until: float,
    warmup: float,
    out,
    per_connection: int = 0,
):
    """Closed loop of one client (a GET when there is no body); sends (latencies after
    warm-up, statuses, successes, CPU seconds) to `out`.

    The request's bytes are built once and the response read with the least parsing
    (status, Content-Length, Connection), as wrk and other load generators do: the
    clients share the 2 cores with the server, and http.client spent 0.5 ms of CPU a
    request. Keeps the connection open while the server does (gthread) for at most
    `per_connection` requests (0: no limit), as nginx's `keepalive_requests` does
    for its upstream connections; a sync worker closes it after each response and
    the client connects again, as any client would.
    """
    head = [f"{'GET' if body is None else 'POST'} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
            f"Authorization: Bearer {token}"]  # fmt: skip
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
    sock, used = None, 0
    latencies, statuses, ok, cpu_start = [], {}, 0, None
    while (now := time.perf_counter()) < until:
        if cpu_start is None and now >= warmup:
            cpu_start = time.process_time()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                used = 0
            sock.sendall(request)
            status, keep = _response(sock)
            used += 1
        except (OSError, ValueError):
            status, keep = 0, False
        if sock is not None and (not keep or used == per_connection):
            sock.close()
            sock = None
        if now >= warmup:
            latencies.append(time.perf_counter() - now)
            statuses[status] = statuses.get(status, 0) + 1
            ok += 200 <= status < 300
    out.put((latencies, statuses, ok, time.process_time() - (cpu_start or time.process_time())))


def _response(sock: socket.socket) -> tuple[int, bool]:
    """Read one HTTP/1.1 response with a Content-Length: (status, connection kept open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("connection closed mid-response")
        data += chunk
    header, _, rest = data.partition(b"\r\n\r\n")
    lines = header.split(b"\r\n")
    status = int(lines[0].split()[1])
    fields = dict(line.split(b":", 1) for line in lines[1:])
    fields = {k.strip().lower(): v.strip().lower() for k, v in fields.items()}
    length = int(fields.get(b"content-length", b"0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("connection closed mid-body")
        rest += chunk
    return status, fields.get(b"connection") != b"close"


class Run:
    """One closed-loop run: latencies, statuses, successes, and CPU seconds used in the
    measured window by the server, its database sessions and the clients."""

    def __init__(self, latencies, statuses, ok, cpu):
        self.latencies, self.statuses, self.ok, self.cpu = latencies, statuses, ok, cpu

    def cpu_per_success_ms(self) -> dict[str, float]:
        return {k: 1000 * v / max(1, self.ok) for k, v in self.cpu.items()}


def run_clients(
    port, tokens, path, body, duration, server_pid, warmup=3.0, per_connection=0
) -> Run:
    start = time.perf_counter()
    until, measure_from = start + warmup + duration, start + warmup
    queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(
            target=client,
            args=(port, t, path, body, until, measure_from, queue, per_connection),
        )
        for t in tokens
    ]
    for p in procs:
        p.start()
    time.sleep(warmup)
    before = server_cpu(server_pid)
    results = [queue.get() for _ in procs]
    after = server_cpu(server_pid)
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r[0])
    statuses = {}
    for r in results:
        for k, v in r[1].items():
            statuses[k] = statuses.get(k, 0) + v
    cpu = {k: after[k] - before[k] for k in after} | {"clients": sum(r[3] for r in results)}
    return Run(latencies, statuses, sum(r[2] for r in results), cpu)


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(master: int) -> dict[str, float]:
    """CPU seconds so far of the web server (gunicorn or granian: its master and workers)
    and of the database sessions for this database."""
    workers = [int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND application_name <> 'bench-drainer'"
        )
        backends = [row[0] for row in cur.fetchall()]
    return {
        "web server": sum(_proc_cpu(p) for p in [master, *workers]),
        "postgres": sum(_proc_cpu(p) for p in backends),
    }


def drain(stop: threading.Event) -> None:
    """Stand-in for the scheduler: pending jobs move on, so queues stay short."""
    import psycopg

    s = connection.settings_dict
    with psycopg.connect(dbname=s["NAME"], host=s["HOST"] or None, user=s["USER"] or None,
                         port=s["PORT"] or 5432, autocommit=True, application_name="bench-drainer") as db:  # fmt: skip
        while not stop.wait(1.0):
            db.execute("UPDATE core_job SET state = 'succeeded' WHERE state = 'pending'")


def purge_pass_requests(when: str) -> int:
    """Drop the scheduling-pass tasks the web server sent to the broker (no worker runs
    during the benchmark to take them; left there they pile up run after run and a
    worker started later on this broker would run them all) and the debounce key;
    raise if the broker's queue is not empty afterwards. Returns how many were dropped."""
    import redis
    from django.core.cache import cache

    from portal.celery import app
    from portal.core.actions.jobs import PASS_REQUESTED_KEY

    dropped = app.control.purge() or 0
    broker = redis.Redis.from_url(app.conf.broker_url)
    queue = app.conf.task_default_queue
    # kombu keeps a queue as a Redis list under its name (and its name plus a
    # priority suffix when priorities are used)
    left = sum(broker.llen(k) for k in broker.scan_iter(f"{queue}*") if broker.type(k) == b"list")
    cache.delete(PASS_REQUESTED_KEY)
    print(f"broker {when}: {dropped} scheduling-pass tasks purged, {left} left")
    if left:
        raise SystemExit(f"{left} tasks still queued on the broker after the purge")
    return dropped


RESULTS: list[dict] = []  # every report()'s figures, for --json


def report(what: str, run: Run, duration: float, per_request: int) -> None:
    """Throughput, latency, statuses, and the CPU each success cost: what an idle
    machine with os.cpu_count() cores could sustain is cores / CPU per success."""
    rate = run.ok * per_request / duration
    cpu = run.cpu_per_success_ms()
    total = sum(cpu.values())
    RESULTS.append(result_record(what, run, duration, per_request, rate, cpu))
    print(
        f"{what}: {rate:,.0f} jobs/s over {duration:g} s; p50 {pct(run.latencies, 0.5):.1f} ms, "
        f"p90 {pct(run.latencies, 0.9):.1f} ms, p99 {pct(run.latencies, 0.99):.1f} ms; "
        f"statuses {run.statuses}\n    CPU per request: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in cpu.items())
        + f" = {total:.2f} ms → {os.cpu_count()} idle cores ≈ "
        f"{os.cpu_count() * 1000 / total * per_request if total else float('nan'):,.0f} jobs/s"
    )


def result_record(what, run, duration, per_request, rate, cpu) -> dict:
    """One run's figures as --json writes them; `kind` is single, bulk or context."""
    kind = "bulk" if per_request > 1 else "context" if what.startswith("context") else "single"
    return {
        "kind": kind,
        "what": what,
        "per_s": rate,
        "seconds": duration,
        "jobs_per_request": per_request,
        "latency_ms": {f"p{q}": pct(run.latencies, q / 100) for q in (50, 90, 99)},
        "statuses": {str(k): v for k, v in run.statuses.items()},
        "cpu_ms": cpu,
    }


def pct(values, q):
    return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


def machine() -> str:
    model = cpu_model()
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
    return f"nproc={os.cpu_count()} cpu={model!r} python={platform.python_version()} postgres={pg}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=30.0, help="measured seconds (after 3 s warm-up)"
    )
    parser.add_argument("--clients", type=int, default=16, help="client processes, one token each")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per worker (gthread if > 1)"
    )
    parser.add_argument(
        "--worker-class",
        choices=["sync", "gthread"],
        default="",
        help="gunicorn's worker (default: gthread with --threads > 1, else sync)",
    )
    parser.add_argument("--bulk-size", type=int, default=1000)
    parser.add_argument("--bulk-clients", type=int, default=2)
    parser.add_argument("--bulk-duration", type=float, default=15.0)
    parser.add_argument("--no-drain", action="store_true")
    parser.add_argument(
        "--context",
        action="store_true",
        help="also measure GET /healthz (Django, no database) and GET /api/v1/me/ "
        "(DRF, token auth, 3 queries): what this machine allows before any submit work",
    )
    parser.add_argument(
        "--keepalive-requests",
        type=int,
        default=100,
        help="requests a client sends on one connection before it opens another, as "
        "nginx does with the web processes (deploy/nginx: keepalive_requests); 0: no limit",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="gunicorn --reuse-port: one listening socket per worker, the kernel spreads "
        "connections over them",
    )
    parser.add_argument("--port", type=int, default=8777)
    parser.add_argument("--server", choices=["gunicorn", "granian"], default="gunicorn")
    parser.add_argument("--json", metavar="PATH", help="also write every run's figures here")
    parser.add_argument(
        "--split",
        action="store_true",
        help="gunicorn only: each worker prints where its CPU went per request (gunicorn, "
        "the application, the response's close, the event loop; bench/gunicorn_split.py)",
    )
    parser.add_argument(
        "--deploy-config",
        action="store_true",
        help="gunicorn only: run with deploy/gunicorn.conf.py (its access log, keepalive, "
        "recycling), the other options still naming the bind, workers and threads",
    )
    args = parser.parse_args()

    ensure_database()
    tokens = populate(max(args.clients, args.bulk_clients))
    print(machine())
    purge_pass_requests("before the run")
    worker_class = args.worker_class or ("gthread" if args.threads > 1 else "sync")
    print(
        f"{args.server}: {args.workers} {worker_class} workers × {args.threads} threads; "
        f"{args.clients} clients; {args.keepalive_requests or 'unlimited'} requests a connection"
        + (", --reuse-port" if args.reuse_port else "")
    )
    if args.reuse_port:
        os.environ["GUNICORN_CMD_ARGS"] = "--reuse-port"
    config = ["-c", str(ROOT / "deploy" / "gunicorn.conf.py")] if args.deploy_config else []
    if args.split:  # gunicorn takes one config file: this one loads the deploy one if asked
        config = [
            "-c",
            os.environ.get("BENCH_SPLIT_CONFIG", str(ROOT / "bench" / "gunicorn_split.py")),
        ]
        if args.deploy_config:
            os.environ["BENCH_WITH_DEPLOY_CONFIG"] = "1"
    server = start_server(args.port, args.workers, args.threads, args.server, worker_class, config)
    stop = threading.Event()
    drainer = threading.Thread(target=drain, args=(stop,), daemon=True)
    if not args.no_drain:
        drainer.start()

    def measure(clients: int, path: str, body: bytes | None, duration: float) -> Run:
        return run_clients(
            args.port,
            tokens[:clients],
            path,
            body,
            duration,
            server.pid,
            per_connection=args.keepalive_requests,
        )

    try:
        run = measure(args.clients, "/api/v1/jobs/", json.dumps(JOB).encode(), args.duration)
        report(f"single submit, {args.clients} clients", run, args.duration, 1)
        if args.context:
            for path in ("/healthz", "/api/v1/me/"):
                run = measure(args.clients, path, None, 10.0)
                report(f"context GET {path}", run, 10.0, 1)
        bulk = json.dumps(
            {"jobs": [JOB | {"name": f"sweep-{i}"} for i in range(args.bulk_size)]}
        ).encode()
        run = measure(args.bulk_clients, "/api/v1/jobs/bulk/", bulk, args.bulk_duration)
        report(
            f"bulk submit, {args.bulk_size} jobs/request, {args.bulk_clients} clients",
            run,
            args.bulk_duration,
            args.bulk_size,
        )
    finally:
        stop.set()
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded machine: the graceful stop took too long
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        purge_pass_requests("after the run")
        if args.json:
            write_json(args.json, args)


def write_json(path: str, args) -> None:
    """--json: the machine, the configuration and every run's figures."""
    Path(path).write_text(
        json.dumps(
            {
                "machine": machine(),
                "clients": args.clients,
                "workers": args.workers,
                "threads": args.threads,
                "server": args.server,
                "runs": RESULTS,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

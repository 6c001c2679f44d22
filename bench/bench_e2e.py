"""Benchmark a job's whole path on a live stack: submit → admitted → running → finished.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 \\
        .venv/bin/python bench/bench_e2e.py [--json PATH] [--nodes 8] [--gpus-per-node 8] \\
        [--idle-jobs 50] [--backlog-jobs 2000] [--count]

It starts what a deployment runs (docs/deploy.md): gunicorn with deploy/gunicorn.conf.py,
the agents' watch (uvicorn portal.agentapi.watch:app), a Celery worker with beat, on the
PostgreSQL and Redis the environment names (the database is migrated and emptied, the
Redis database flushed: give it its own), and `--nodes` real agents (berth-agent) with
simulated GPUs (`--nvml fake`) and the process runtime. Every job is `true` on 1 GPU,
submitted over the REST API.

1. Idle cluster: `--idle-jobs` jobs, one at a time, each after the one before finished.
   For each: submit (the client's clock before the POST) → admitted (`admitted_at`) →
   running (`started_at`: when the portal learned its worker runs, or that it already
   ended) → finished (`finished_at`), p50 and p99.
2. Backlog: `--backlog-jobs` jobs in bulk requests, then the time until the last one
   finished: jobs executed to completion per second on nodes × GPUs, and the CPU a job
   cost each part of the stack. `--count` also prints the requests by path and the
   scheduling passes per backlog job (gunicorn's access log, Celery's log at INFO).

Targets (../shared/DESIGN.md): p50 submit → running ≤ 1 s, p99 ≤ 3 s; ≥ 100 trivial jobs/s.
`--json PATH` writes the figures for bench/compare_slurm.sh (keep its keys).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from bench import cpu_model  # noqa: E402
from bench.bench_pass import ensure_database  # noqa: E402
from portal.core.actions.jobs import PASS_TASK  # noqa: E402
from portal.core.actions.nodes import issue_bootstrap_token  # noqa: E402
from portal.core.actions.tokens import create_api_token  # noqa: E402
from portal.core.models import GpuFlavor, Job, Membership, Node, Queue, Quota, Team  # noqa: E402

PRODUCT = "NVIDIA H100 80GB HBM3"
JOB = {
    "name": "e2e",
    "image": "none",
    "command": ["true"],
    "flavor": "h100-80gb",
    "workers": 1,
    "gpus_per_worker": 1,
    "max_runtime_seconds": 600,
}
BULK = 1000
SECRET = "e2e-" + "k9!x#Lm2$Qp7&Rt4*Vw8^Yz1@Ac3-Ef6+" * 2
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def populate(gpus: int, nodes: int) -> tuple[str, str]:
    """A team whose quota is the whole cluster, its API token, and a bootstrap token for
    the agents. Returns (API token, bootstrap token)."""
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()  # Celery's queue, versions
    get_user_model().objects.filter(username="e2e").delete()
    GpuFlavor.objects.create(name="h100-80gb", display_name=PRODUCT, product_names=[PRODUCT])
    flavor = GpuFlavor.objects.get(name="h100-80gb")
    team = Team.objects.create(slug="e2e", name="E2E")
    Quota.objects.create(team=team, flavor=flavor, nominal=gpus)
    Queue.objects.create(team=team, name="default", max_pending_jobs=1_000_000)
    user = get_user_model().objects.create_user("e2e", password=None)
    Membership.objects.create(user=user, team=team, role=Membership.Role.MEMBER)
    api = create_api_token(user, name="e2e")[1]
    boot = issue_bootstrap_token(acting_user=None, hostname_pattern="e2e-*", max_uses=nodes)[1]
    return api, boot


class Stack:
    """The processes of one live stack, each in its own process group, logs in a folder."""

    def __init__(self, logs: Path):
        self.logs, self.procs = logs, {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self.logs / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is not None]

    def stop(self) -> None:
        """Agents first (they stop their workers), then the portal's processes."""
        order = sorted(self.procs, key=lambda n: not n.startswith("agent"))
        for name in order:
            proc = self.procs[name]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _proc_times() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, CPU seconds of it and its reaped children) for every process."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return out


# Not a part of its own: the agents' processes without their workers (shims and commands).
AGENTS_OWN = "agents' own"


def _own_time(pid: int) -> float:
    """CPU seconds of one process itself (utime + stime), without its children."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_part(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of each part of the stack (a process with its descendants), and
    of this database's PostgreSQL sessions."""
    procs = _proc_times()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)

    def tree(pid: int) -> float:
        return procs.get(pid, (0, 0.0))[1] + sum(tree(c) for c in children.get(pid, []))

    out: dict[str, float] = {AGENTS_OWN: 0.0}
    for name, proc in stack.procs.items():
        part = "agents (and their workers)" if name.startswith("agent") else name
        out[part] = out.get(part, 0.0) + tree(proc.pid)
        if name.startswith("agent"):
            out[AGENTS_OWN] += _own_time(proc.pid)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        out["postgres"] = sum(procs.get(row[0], (0, 0.0))[1] for row in cur.fetchall())
    out["bench"] = time.process_time()
    return out


def portal_env(web: int, watch: int) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": SECRET,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "BERTH_LOG_LEVEL": "WARNING",
        "BERTH_API_RATE": "10000000/min",
        "BERTH_WATCH_URL": f"http://127.0.0.1:{watch}/api/agent/v1/watch",
        "BERTH_BIND": f"127.0.0.1:{web}",
    }


def start_stack(stack: Stack, args, boot: str, var: Path) -> str:
    web, watch = free_port(), free_port()
    env = portal_env(web, watch)
    access = str(stack.logs / "access.log") if args.count else "/dev/null"
    gunicorn = [str(BIN / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "portal.wsgi",
                "--access-logfile", access]  # fmt: skip
    stack.start("web", gunicorn, env)
    uvicorn = [str(BIN / "uvicorn"), "portal.agentapi.watch:app", "--host", "127.0.0.1",
               "--port", str(watch), "--log-level", "warning", "--no-access-log",
               "--timeout-graceful-shutdown", "2"]  # fmt: skip
    stack.start("watch", uvicorn, env)
    celery = [str(BIN / "celery"), "-A", "portal", "worker", "-B", "-c", "1", "--loglevel",
              "INFO" if args.count else "WARNING", "-s", str(var / "celerybeat-schedule")]  # fmt: skip
    stack.start("celery", celery, env)
    url = f"http://127.0.0.1:{web}"
    wait_for(lambda: _http_ok(f"{url}/healthz"), 60, "gunicorn")
    agent_env = {k: v for k, v in os.environ.items() if not k.startswith(("BERTH_", "DJANGO_"))}
    agent_env["BERTH_BOOTSTRAP_TOKEN"] = boot
    for i in range(args.nodes):
        host = f"e2e-n{i:02d}"
        stack.start(f"agent-{host}", [
            str(BIN / "berth-agent"), "--portal-url", url, "--hostname", host,
            "--nvml", "fake", "--fake-gpus", str(args.gpus_per_node), "--fake-product", PRODUCT,
            "--runtime", "process", "--max-starts", str(args.gpus_per_node),
            "--state-dir", str(var / "agents" / host), "--stop-workers-on-exit",
            "--log-level", "WARNING",
        ], agent_env)  # fmt: skip
    wait_for(lambda: _ready_gpus() >= args.nodes * args.gpus_per_node, 90, "the agents")
    return url


def _ready_gpus() -> int:
    return sum(
        node.gpus.filter(health="healthy").count()
        for node in Node.objects.filter(condition=Node.Condition.READY)
    )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for(check, timeout_s: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(every)
    raise SystemExit(f"{what} did not come up within {timeout_s:.0f} s")


class Api:
    """A keep-alive connection to the REST API that opens again when the server closed it
    (gunicorn keeps an idle one 5 s); each request has its own Idempotency-Key, so sending
    it again cannot submit twice."""

    def __init__(self, url: str, token: str):
        host, port = url.removeprefix("http://").split(":")
        self._address = (host, int(port))
        self._conn = None
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict) -> dict:
        import http.client
        import uuid

        headers = self._headers | {"Idempotency-Key": uuid.uuid4().hex}
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(*self._address, timeout=60)
            try:
                self._conn.request("POST", path, json.dumps(body), headers)
                response = self._conn.getresponse()
                data = response.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        if response.status >= 300:
            raise SystemExit(f"POST {path} answered {response.status}: {data[:300]!r}")
        return json.loads(data)


TERMINAL = list(Job.TERMINAL_STATES)


def idle(api: Api, count: int) -> dict:
    """Jobs one at a time on the idle cluster: latency of each step from the submit."""
    steps = {"submit_to_admitted_s": [], "submit_to_running_s": [], "submit_to_finished_s": []}
    failed = 0
    for _ in range(count):
        t0 = time.time()
        job_id = api.post("/api/v1/jobs/", JOB)["id"]
        job = wait_for(lambda j=job_id: _ended(j), 60, f"job {job_id}", every=0.005)
        failed += job.state != Job.State.SUCCEEDED
        for key, at in zip(steps, (job.admitted_at, job.started_at, job.finished_at), strict=True):
            steps[key].append(at.timestamp() - t0)
        time.sleep(0.2)  # idle: the agents' reports of the last job are in
    if failed:
        print(f"warning: {failed} of {count} idle jobs did not succeed")
    return {"jobs": count} | {
        k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99)} for k, v in steps.items()
    }


def _ended(job_id: int) -> Job | None:
    return Job.objects.filter(pk=job_id, state__in=TERMINAL).first()


def _log_lines(stack: Stack) -> dict[str, list[str]]:
    """The lines so far of the access log and the Celery worker's log (`--count`)."""
    out = {}
    for name in ("access", "celery"):
        path = stack.logs / f"{name}.log"
        out[name] = path.read_text(errors="replace").splitlines() if path.exists() else []
    return out


def counts_per_job(before: dict[str, list[str]], after: dict[str, list[str]], jobs: int) -> str:
    """Requests by path and scheduling passes during the backlog, per job (`--count`)."""
    paths: dict[str, int] = {}
    for line in after["access"][len(before["access"]) :]:
        if m := re.search(r'"(?:GET|POST) ([^ ?"]+)', line):
            paths[m.group(1)] = paths.get(m.group(1), 0) + 1
    passes = sum(
        PASS_TASK in line and "succeeded" in line
        for line in after["celery"][len(before["celery"]) :]
    )
    parts = [f"{path} {n / jobs:.2f}" for path, n in sorted(paths.items(), key=lambda kv: -kv[1])]
    return "backlog requests per job: " + ", ".join(parts) + f"; passes per job {passes / jobs:.3f}"


def backlog(api: Api, count: int, gpus: int, stack: Stack, count_requests: bool = False) -> dict:
    """A backlog of jobs in bulk requests; the time from the first submit until all ended."""
    if count <= 0:
        return {"gpus": gpus, "jobs": 0, "seconds": 0.0, "jobs_completed_per_s": 0.0}
    cpu0 = cpu_by_part(stack)
    logs0 = _log_lines(stack) if count_requests else None
    before = Job.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    t0 = time.time()
    for start in range(0, count, BULK):
        api.post("/api/v1/jobs/bulk/", {"jobs": [JOB] * min(BULK, count - start)})
    ids = list(Job.objects.filter(pk__gt=before).values_list("pk", flat=True))
    open_ = Job.objects.filter(pk__in=ids).exclude(state__in=TERMINAL)
    wait_for(lambda: not open_.exists(), 600, "the backlog", every=0.1)
    last = max(Job.objects.filter(pk__in=ids).values_list("finished_at", flat=True))
    seconds = last.timestamp() - t0
    done = Job.objects.filter(pk__in=ids, state=Job.State.SUCCEEDED).count()
    if done != len(ids):
        print(f"warning: {len(ids) - done} of {len(ids)} backlog jobs did not succeed")
    cpu = {k: v - cpu0.get(k, 0.0) for k, v in cpu_by_part(stack).items()}
    own = cpu.pop(AGENTS_OWN, 0.0)
    print(
        "backlog CPU per job: "
        + ", ".join(f"{k} {1000 * v / max(1, done):.1f} ms" for k, v in cpu.items())
        + f" = {1000 * sum(cpu.values()) / max(1, done):.1f} ms"
        + f" (the agents' own processes {1000 * own / max(1, done):.1f} ms of theirs)"
    )
    if logs0 is not None:
        time.sleep(1)  # the last lines reach the logs
        print(counts_per_job(logs0, _log_lines(stack), max(1, done)))
    return {
        "gpus": gpus,
        "jobs": len(ids),
        "seconds": seconds,
        "jobs_completed_per_s": done / seconds,
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def machine() -> str:
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
    return f"nproc={os.cpu_count()} cpu={cpu_model()!r} python={platform.python_version()} postgres={pg}"


def table(result: dict) -> str:
    i, b = result["idle"], result["backlog"]
    rows = [f"idle cluster, {i['jobs']} jobs one at a time    p50        p99"]
    for key, label in (("submit_to_admitted_s", "admitted"), ("submit_to_running_s", "running"),
                       ("submit_to_finished_s", "finished")):  # fmt: skip
        rows.append(f"  submit → {label:<28} {i[key]['p50']:7.3f} s  {i[key]['p99']:7.3f} s")
    rows.append(
        f"backlog: {b['jobs']} jobs on {b['gpus']} GPUs in {b['seconds']:.1f} s = "
        f"{b['jobs_completed_per_s']:.1f} jobs/s completed"
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the figures here as JSON")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--idle-jobs", type=int, default=50)
    parser.add_argument("--backlog-jobs", type=int, default=2000)
    parser.add_argument("--keep", action="store_true", help="keep the stack's logs and state")
    parser.add_argument(
        "--count", action="store_true",
        help="log requests and Celery tasks; print requests by path and passes per backlog job",
    )  # fmt: skip
    args = parser.parse_args()

    gpus = args.nodes * args.gpus_per_node
    ensure_database()
    api_token, boot = populate(gpus, args.nodes)
    print(machine())
    connection.close()
    var = Path(tempfile.mkdtemp(prefix="berth-e2e-"))
    (var / "logs").mkdir()
    stack = Stack(var / "logs")
    try:
        url = start_stack(stack, args, boot, var)
        print(f"stack up: {args.nodes} agents × {args.gpus_per_node} GPUs; logs in {var / 'logs'}")
        api = Api(url, api_token)
        result = {
            "idle": idle(api, args.idle_jobs),
            "backlog": backlog(api, args.backlog_jobs, gpus, stack, args.count),
        }
        if dead := stack.dead():
            print(f"warning: these processes ended during the run: {', '.join(dead)}")
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(var, ignore_errors=True)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

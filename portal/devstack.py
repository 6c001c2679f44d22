"""`make run`: the whole product on one machine with zero setup.

Migrates the database (SQLite by default), seeds the demo, then runs the web
server, a Celery worker with an embedded beat, and six simulated GPU nodes
(the real node agent with a fake NVML and the process runtime, or with
BERTH_DEMO_RUNTIME=docker real containers when a Docker engine answers).
Prints where to open it and the logins; Ctrl-C stops everything. A notification
worker runs too (webhooks may call this machine: BERTH_NOTIFY_ALLOW_PRIVATE). The
agents' watch does not (it needs Redis, the demo has none): the nodes learn of an
admission at their next heartbeat, every few seconds, not at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BIN = Path(PYTHON).parent

# hostname, rack, block, NVML product name (which maps to a flavor), GPU memory (MiB)
H100, A100 = ("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA A100-SXM4-40GB", 40960)
DEMO_NODES = [
    ("demo-h100-1", "rack-1", "block-1", *H100),
    ("demo-h100-2", "rack-1", "block-1", *H100),
    ("demo-h100-3", "rack-2", "block-2", *H100),
    ("demo-h100-4", "rack-2", "block-2", *H100),
    ("demo-a100-1", "rack-1", "block-1", *A100),
    ("demo-a100-2", "rack-2", "block-2", *A100),
]


def free_port(preferred: int) -> int:
    for port in range(preferred, preferred + 50):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise SystemExit(f"no free port in {preferred}..{preferred + 49}")


def manage(*args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, check=True)


def wait_for_http(url: str, timeout: float = 30.0) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.3)
    return False


class Stack:
    """Child processes, each in its own process group, stopped together."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 — lives as long as the child
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.procs.append((name, proc))

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs if proc.poll() is not None]

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


PROCESS_RUNTIME = ("--runtime", "process")


def demo_runtime(environ=os.environ) -> tuple[str, ...]:
    """The demo agents' runtime flags: the process runtime, or with BERTH_DEMO_RUNTIME=docker
    the Docker runtime when an engine answers (the simulated GPUs are not requested from it)."""
    wanted = environ.get("BERTH_DEMO_RUNTIME", "process")
    if wanted not in ("process", "docker"):
        raise SystemExit(f"BERTH_DEMO_RUNTIME must be process or docker, not {wanted!r}")
    if wanted == "process":
        return PROCESS_RUNTIME
    try:
        import docker

        docker.from_env(environment=environ, timeout=5).ping()
    except Exception as exc:
        print(f"BERTH_DEMO_RUNTIME=docker: no Docker engine answers ({exc}); using processes")
        return PROCESS_RUNTIME
    print("Demo nodes run their workers as Docker containers (the demo jobs pull python:3.11).")
    return ("--runtime", "docker", "--docker-gpus", "none")


def agent_argv(
    url: str, node: tuple, var: Path, runtime: tuple[str, ...] = PROCESS_RUNTIME
) -> list[str]:
    """The command line of one demo node's agent; `node` is a DEMO_NODES entry. The
    bootstrap token is not on it (`ps` shows every command line to every user): the
    agent reads it from BERTH_BOOTSTRAP_TOKEN (agent_env)."""
    host, rack, block, product, memory_mib = node
    return [
        str(BIN / "berth-agent"),
        "--portal-url",
        url,
        "--hostname",
        host,
        "--rack",
        rack,
        "--block",
        block,
        "--nvml",
        "fake",
        "--fake-gpus",
        "8",
        "--fake-product",
        product,
        "--fake-gpu-memory-mib",
        str(memory_mib),
        *runtime,
        "--state-dir",
        str(var / "agents" / host),
        # Ctrl-C ends the demo: its agents stop their workers rather than leave them
        # running for an agent restart to re-adopt, as a real node's agent does.
        "--stop-workers-on-exit",
    ]


def agent_env(token: str) -> dict[str, str]:
    return {"BERTH_BOOTSTRAP_TOKEN": token}


def seed(var: Path) -> None:
    """Seed the demo and print its logins; warnings go to the log, not between them."""
    print("Demo logins (user, password, teams and roles):", flush=True)
    log = var / "logs" / "seed.log"
    with open(log, "ab") as errors:
        done = subprocess.run(
            [PYTHON, "manage.py", "seed_demo"], cwd=ROOT, stderr=errors, check=False
        )
    if done.returncode:
        sys.stderr.write(log.read_text(errors="replace")[-4000:])
        raise SystemExit(f"seeding the demo failed; see {log}")


def _stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM both stop the stack cleanly. SIGINT is set
    explicitly: a shell starts background jobs with it ignored, and Python then
    leaves it ignored."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def main() -> int:
    from django.conf import settings  # noqa: F401 — fail fast on bad settings

    _stop_on_signals()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    # The demo's webhooks go to receivers on this machine (docs/security.md).
    os.environ.setdefault("BERTH_NOTIFY_ALLOW_PRIVATE", "1")
    import django

    django.setup()
    var = Path(settings.VAR_DIR)
    (var / "logs").mkdir(parents=True, exist_ok=True)
    print("Berth: preparing the database …", flush=True)
    manage("migrate", "--no-input", "-v", "0")
    seed(var)
    token = json.loads((var / "demo.json").read_text())["bootstrap_token"]
    port = free_port(int(os.environ.get("BERTH_PORT", "8000")))

    stack = Stack(var / "logs")
    try:
        return _run(stack, port, token, var)
    except KeyboardInterrupt:
        print("\nstopping …", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
        print("stopped.")


def _run(stack: Stack, port: int, token: str, var: Path) -> int:
    """Start the web server, Celery and the agents, then watch them until one dies."""
    url = f"http://127.0.0.1:{port}"
    stack.start(
        "web",
        [
            str(BIN / "gunicorn"),
            "portal.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            "2",
            "--threads",
            "4",
            "--access-logfile",
            "-",
        ],
    )
    stack.start(
        "celery",
        [
            str(BIN / "celery"),
            "-A",
            "portal",
            "worker",
            "-B",
            "-c",
            "1",
            "--loglevel",
            "INFO",
            "-s",
            str(var / "celerybeat-schedule"),
        ],
    )
    # Webhooks and e-mail (the console backend: they appear in logs/notify.log), on their
    # own queue as in production, so a slow receiver never delays the demo's passes.
    stack.start(
        "notify",
        [str(BIN / "celery"), "-A", "portal", "worker", "-Q", "notifications", "-c", "1"]
        + ["-n", "notify@%h", "--loglevel", "INFO"],
    )
    if not wait_for_http(f"{url}/healthz"):
        print(f"the web server did not come up; see {var / 'logs' / 'web.log'}", file=sys.stderr)
        return 1
    runtime = demo_runtime()
    for node in DEMO_NODES:
        stack.start(f"agent-{node[0]}", agent_argv(url, node, var, runtime), env=agent_env(token))

    print(f"\nBerth is running: open {url}/  (admin: {url}/admin/, API docs: {url}/api/docs/)")
    print(f"Logs: {var / 'logs'}   Stop with Ctrl-C.\n", flush=True)
    while True:
        time.sleep(1)
        if dead := stack.dead():
            print(f"stopped unexpectedly: {', '.join(dead)} — see {var / 'logs'}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())

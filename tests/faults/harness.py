"""Real processes for the fault scenarios: a throwaway PostgreSQL cluster and Redis
server, and the system under test (gunicorn, Celery worker and beat, node agents)
each in its own process group, so a scenario can SIGKILL exactly what it means to
and clean up everything it started, whatever happens.

Nothing here imports Django: the test process talks to the system under test over
HTTP and reads its database with plain psycopg (tests/faults/invariants.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BIN = Path(sys.executable).parent
# Production-like settings for every process of the system under test (docs/deploy.md).
SECRET_KEY = "faults-" + "Zq8!rT3#kL9$wX2&mN5*pV7^bC4@hJ6-" * 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.2):
    """Poll until `predicate()` is truthy and return its value; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# --- processes -----------------------------------------------------------------------------


class Proc:
    """One child process, the leader of its own session (so of its process group),
    with stdout and stderr in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict, log: Path, cwd: Path = ROOT):
        self.name, self.argv, self.env, self.log, self.cwd = name, argv, env, log, cwd
        self.popen: subprocess.Popen | None = None
        self.starts = 0
        self.exits: list[tuple[float, int]] = []  # (monotonic, code) of unexpected exits
        self._supervisor: threading.Thread | None = None
        self._supervised = threading.Event()
        self._lock = threading.Lock()
        self._stopped: subprocess.Popen | None = None

    def supervise(self, restart_s: float = 5.0) -> Proc:
        """Restart the process when it exits with a non-zero code, `restart_s` later,
        as systemd's Restart=on-failure / RestartSec=5 does for the portal's units."""
        self._supervised.set()

        def watch() -> None:
            while self._supervised.is_set():
                with self._lock:
                    code = self.popen.poll() if self.popen else None
                    if code is not None and self._supervised.is_set():
                        self.exits.append((time.monotonic(), code))
                if code is None:
                    time.sleep(0.2)
                    continue
                if code == 0:
                    return  # on-failure: a clean exit is not restarted
                time.sleep(restart_s)
                with self._lock:
                    if self._supervised.is_set() and not self.alive:
                        self.start()

        self._supervisor = threading.Thread(
            target=watch, daemon=True, name=f"supervise-{self.name}"
        )
        self._supervisor.start()
        return self

    def unsupervise(self) -> None:
        self._supervised.clear()
        if self._supervisor is not None:
            self._supervisor.join(10)
            self._supervisor = None

    def start(self) -> Proc:
        assert not self.alive, f"{self.name} already runs"
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {self.name} at {time.time():.3f}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill_group(self, sig: int = signal.SIGKILL, wait: float = 20.0) -> None:
        """Signal the whole process group (the process and e.g. its pool children)."""
        self.unsupervise()
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(wait)

    def kill_leader(self, sig: int = signal.SIGKILL, wait: float = 20.0) -> None:
        """Signal only the process itself (an agent's workers are in their own sessions anyway)."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(wait)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the group, then SIGKILL it if it is still there after `timeout`."""
        self.unsupervise()
        if self.popen is None or self._stopped is self.popen:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # Leftover members of the group (pool children) go too, once: the group id
        # stays reserved while it has members, so this reaches only our processes.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        self._stopped = self.popen

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Processes:
    """Every process a scenario starts; `close()` ends all of them (a fixture finalizer)."""

    def __init__(self):
        self.procs: list[Proc] = []
        self.cleanups: list[Callable[[], None]] = []

    def add(self, proc: Proc) -> Proc:
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Stop everything; safe to call more than once."""
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop(timeout=10)
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()


def kill_agent_workers(root: Path) -> int:
    """SIGKILL the shims and commands of every worker under the agents' state dirs,
    found by their pid files (checked against /proc so a reused pid is left alone)."""
    killed = 0
    for pid_file in root.glob("*/workers/*/pid"):
        worker_dir = pid_file.parent
        with contextlib.suppress(Exception):
            shim = int(json.loads(pid_file.read_text())["pid"])
            cmdline = Path(f"/proc/{shim}/cmdline").read_bytes().decode(errors="replace")
            if str(worker_dir) in cmdline:
                os.kill(shim, signal.SIGKILL)
                killed += 1
        with contextlib.suppress(Exception):
            group = int((worker_dir / "child.pid").read_text())
            if Path(f"/proc/{group}/environ").read_bytes().find(b"BERTH_JOB_ID=") >= 0:
                os.killpg(group, signal.SIGKILL)
                killed += 1
    return killed


# --- PostgreSQL ----------------------------------------------------------------------------


def pg_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgCluster:
    """A throwaway PostgreSQL cluster of our own, on a free port with its socket in a
    private directory; `stop()` / `start()` are the faults. initdb refuses to run as
    root, so as root everything runs as the `postgres` user in a directory it owns."""

    def __init__(self, bindir: Path):
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="berth-faults-pg-"))
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"
        self.logfile = self.dir / "postgres.log"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run("mkdir", "-p", str(self.sock))

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        return subprocess.run(
            [*prefix, *argv], capture_output=True, text=True, timeout=timeout, check=True
        )

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200 -c full_page_writes=off"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.logfile),
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


# --- Redis ---------------------------------------------------------------------------------


class RedisServer:
    """Our own redis-server with no persistence; stopping it loses the queued tasks,
    as losing the production Redis would."""

    def __init__(self, procs: Processes, tmp: Path):
        self.port = free_port()
        argv = [
            shutil.which("redis-server") or "redis-server", "--port", str(self.port),
            "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp),
        ]  # fmt: skip
        self.proc = procs.add(Proc("redis", argv, dict(os.environ), tmp / "redis.log"))

    def start(self) -> None:
        self.proc.start()
        wait_for(lambda: port_open(self.port), 20, "redis-server to listen")

    def stop(self) -> None:
        self.proc.stop(timeout=10)
        wait_for(lambda: not port_open(self.port), 10, "redis-server to stop listening")

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


# --- databases -----------------------------------------------------------------------------


def with_dbname(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def dbname_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def recreate_database(url: str) -> None:
    """Drop and create the database named in `url` (on that server)."""
    name = dbname_of(url)
    with psycopg.connect(with_dbname(url, "postgres"), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    name = dbname_of(url)
    with psycopg.connect(with_dbname(url, "postgres"), autocommit=True, connect_timeout=5) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def query(url: str, sql: str, params=(), timeout: float = 5) -> list[tuple]:
    """One short read on its own connection (for polling from the test)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout))) as conn:
        return conn.execute(sql, params).fetchall()


# --- the system under test -----------------------------------------------------------------


def base_env(**extra: str) -> dict[str, str]:
    """The test's environment without its Django/Berth settings, plus production ones."""
    drop = ("DJANGO_", "BERTH_", "CELERY_", "DATABASE_URL", "REDIS_URL", "DB_CONN")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "BERTH_LOG_FORMAT": "text",
        "PYTHONUNBUFFERED": "1",
    }
    return env | {k: str(v) for k, v in extra.items()}


@dataclass
class Stack:
    """The portal's processes against one database and one Redis."""

    procs: Processes
    tmp: Path
    db_url: str
    redis_url: str
    settings: dict[str, str] = field(default_factory=dict)
    web_port: int = 0

    def env(self, **extra: str) -> dict[str, str]:
        (self.tmp / "var").mkdir(exist_ok=True)
        return base_env(
            DATABASE_URL=self.db_url,
            REDIS_URL=self.redis_url,
            BERTH_VAR_DIR=str(self.tmp / "var"),
            BERTH_STATIC_ROOT=str(self.tmp / "static"),
            **self.settings,
            **extra,
        )

    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}"
        return done.stdout

    def migrate(self) -> None:
        self.manage("migrate", "--no-input", "-v", "0")

    def seed(self, spec: dict, timeout: float = 300) -> dict:
        """Fill the database through the product's own actions (tests/faults/seed.py)."""
        env = self.env()
        env.pop("REDIS_URL")  # seeding must not queue passes on the scenario's broker
        env["BERTH_VAR_DIR"] = str(self.tmp / "seed-var")
        done = subprocess.run(
            [PYTHON, "-m", "tests.faults.seed"],
            cwd=ROOT,
            env=env,
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"seeding failed:\n{done.stderr[-3000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    def gunicorn(self, workers: int = 2, threads: int = 4, **extra: str) -> Proc:
        self.web_port = self.web_port or free_port()
        argv = [
            str(BIN / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "portal.wsgi",
            "-b", f"127.0.0.1:{self.web_port}", "-w", str(workers), "--threads", str(threads),
            "--access-logfile", "/dev/null", "--max-requests", "0",
        ]  # fmt: skip
        env = self.env(BERTH_LOG_LEVEL="WARNING", **extra)
        return self.procs.add(Proc("gunicorn", argv, env, self.tmp / "gunicorn.log"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def wait_web(self, timeout: float = 60) -> None:
        import requests

        def up():
            try:
                return requests.get(self.url + "/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, timeout, "gunicorn to answer /healthz")

    def celery_worker(self, name: str, concurrency: int = 1, **extra: str) -> Proc:
        argv = [
            PYTHON, "-m", "celery", "-A", "portal", "worker", "-c", str(concurrency),
            "-n", f"{name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
            "--without-heartbeat",
        ]  # fmt: skip
        return self.procs.add(Proc(name, argv, self.env(**extra), self.tmp / f"{name}.log"))

    def beat(self, name: str = "beat", **extra: str) -> Proc:
        argv = [
            PYTHON, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
            "-s", str(self.tmp / f"{name}-schedule"), "--pidfile", str(self.tmp / f"{name}.pid"),
        ]  # fmt: skip
        return self.procs.add(Proc(name, argv, self.env(**extra), self.tmp / f"{name}.log"))

    def agent(self, host: str, bootstrap: str, *, gpus: int = 4, rack: str = "r1") -> Proc:
        """A real berth-agent (fake NVML, process runtime). Its workers run in sessions
        of their own and outlive it by design; they are killed at the end by pid."""
        state = self.tmp / "agents" / host
        if not state.parent.exists():
            state.parent.mkdir()
            self.procs.cleanups.append(lambda: kill_agent_workers(state.parent))
        argv = [
            PYTHON, "-m", "agents", "--portal-url", self.url, "--bootstrap-token", bootstrap,
            "--hostname", host, "--rack", rack, "--block", rack, "--nvml", "fake",
            "--fake-gpus", str(gpus), "--fake-product", "NVIDIA H100 80GB HBM3",
            "--runtime", "process", "--state-dir", str(state), "--heartbeat-interval", "0.5",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BERTH_", "DJANGO_"))}
        return self.procs.add(Proc(f"agent-{host}", argv, env, self.tmp / f"agent-{host}.log"))

    def scheduling_passes(self) -> list[tuple]:
        """(id, started_at, duration_ms, admitted, pending) of every recorded pass."""
        return query(
            self.db_url,
            "SELECT id, started_at, duration_ms, admitted, pending FROM core_schedulingpass "
            "WHERE NOT dry_run ORDER BY id",
        )

    def pass_count(self, since=None) -> int:
        """Scheduling passes recorded (not dry runs), those started after `since` if given."""
        sql = "SELECT count(*) FROM core_schedulingpass WHERE NOT dry_run"
        if since is None:
            return query(self.db_url, sql)[0][0]
        return query(self.db_url, sql + " AND started_at > %s", [since])[0][0]

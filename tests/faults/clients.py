"""HTTP clients of the system under test: API submitters that record what they were
told (tests/faults/invariants.Accepted), and lightweight simulated node agents that
speak docs/protocol.md over HTTP from threads of the test process.

The real agent (agents/) is used where a scenario needs real workers and fencing
(test_agents.py); hundreds of real agents would not fit on a 2-core machine, so
the load and concurrency scenarios use these.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import requests

from tests.faults.invariants import Accepted

PRODUCT = "NVIDIA H100 80GB HBM3"


def job_body(name: str, *, workers: int = 1, gpus: int = 1, run_s: float = 2.0, **extra) -> dict:
    """A job for simulated agents: it "runs" for run_s seconds and exits 0."""
    return {
        "name": name,
        "image": "registry.example.com/sim:1",
        "command": ["sim"],
        "flavor": "h100-80gb",
        "workers": workers,
        "gpus_per_worker": gpus,
        "max_runtime_seconds": 3600,
        "grace_period_seconds": 1,
        "env": {"SIM_RUN_S": f"{run_s:.2f}"},
        **extra,
    }


# --- API submitters ------------------------------------------------------------------------


@dataclass
class Outcome:
    """Every answer the submitters got, for the scenario's assertions and figures."""

    statuses: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # seconds, every request
    errors: Counter = field(default_factory=Counter)  # connection errors, timeouts
    missing_retry_after: int = 0
    bad_bodies: list[str] = field(default_factory=list)
    accepted: Accepted = field(default_factory=Accepted)
    unresolved: list[str] = field(default_factory=list)  # keys never accepted
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, status: int, latency: float, response=None) -> None:
        with self.lock:
            self.statuses[status] += 1
            self.latencies.append(latency)
            self.timeline.append((time.monotonic(), status))
            if (
                response is not None
                and status in (429, 503)
                and not response.headers.get("Retry-After")
            ):
                self.missing_retry_after += 1
            if response is not None and status >= 500 and status != 503:
                self.bad_bodies.append(response.text[:300])

    def error(self, kind: str, latency: float) -> None:
        with self.lock:
            self.errors[kind] += 1
            self.latencies.append(latency)
            self.timeline.append((time.monotonic(), 0))


class Submitter:
    """Submits jobs one by one with an Idempotency-Key each and retries a key (same
    body, same key) after 503, 429, connection errors and timeouts until it is
    accepted (201, or 200 for a replay) or `deadline` passes."""

    def __init__(self, url: str, token: str, team: str, outcome: Outcome, timeout: float = 15):
        self.url, self.team, self.outcome, self.timeout = url, team, outcome, timeout
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def submit(self, key: str, body: dict, deadline: float) -> int | None:
        headers = {"Idempotency-Key": key}
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                r = self.session.post(
                    self.url + "/api/v1/jobs/", json=body, headers=headers, timeout=self.timeout
                )
            except requests.Timeout:
                self.outcome.error("timeout", time.monotonic() - started)
                continue
            except requests.ConnectionError:
                self.outcome.error("connection", time.monotonic() - started)
                time.sleep(0.5)
                continue
            self.outcome.record(r.status_code, time.monotonic() - started, r)
            if r.status_code in (200, 201):
                job_id = r.json()["id"]
                with self.outcome.lock:
                    self.outcome.accepted.add(job_id, f"{self.team}/{key}")
                return job_id
            if r.status_code in (429, 503):
                time.sleep(min(float(r.headers.get("Retry-After", 1)), 1.0))
                continue
            raise AssertionError(f"submit {key}: unexpected {r.status_code}: {r.text[:500]}")
        with self.outcome.lock:
            self.outcome.unresolved.append(f"{self.team}/{key}")
        return None

    def submit_bulk(self, bodies: list[dict], deadline: float) -> list[int]:
        """The bulk endpoint has no Idempotency-Key: a retry after an unclear failure
        could submit twice, so this retries only answers that say nothing was stored."""
        while time.monotonic() < deadline:
            started = time.monotonic()
            r = self.session.post(
                self.url + "/api/v1/jobs/bulk/", json={"jobs": bodies}, timeout=120
            )
            self.outcome.record(r.status_code, time.monotonic() - started, r)
            if r.status_code == 201:
                ids = r.json()["ids"]
                assert len(ids) == len(bodies), r.text[:300]
                with self.outcome.lock:
                    for job_id in ids:
                        self.outcome.accepted.add(job_id)
                return ids
            if r.status_code == 429:
                time.sleep(1)
                continue
            raise AssertionError(f"bulk submit: unexpected {r.status_code}: {r.text[:500]}")
        return []


def submit_many(
    url: str,
    tokens: dict[str, str],
    count: int,
    *,
    threads: int,
    deadline: float,
    outcome: Outcome,
    body=lambda i: job_body(f"job-{i}"),
    prefix: str = "k",
    pause: float = 0.0,
    stop: threading.Event | None = None,
) -> None:
    """`count` single submissions from `threads` threads over the teams' tokens."""
    counter = itertools.count()
    teams = sorted(tokens)

    def run(t: int) -> None:
        team = teams[t % len(teams)]
        submitter = Submitter(url, tokens[team], team, outcome)
        while not (stop and stop.is_set()):
            i = next(counter)
            if i >= count or time.monotonic() > deadline:
                return
            submitter.submit(f"{prefix}-{i}", body(i), deadline)
            if pause:
                time.sleep(pause)

    pool = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(max(1.0, deadline - time.monotonic() + 30))


# --- simulated node agents -----------------------------------------------------------------


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class SimWorker:
    key: str
    started: float  # wall clock
    ends: float  # monotonic
    exit_code: int
    state: str = "running"
    finished: float | None = None


@dataclass
class SimAgent:
    host: str
    rack: str
    gpus: int
    token: str = ""
    workers: dict[str, SimWorker] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    due: float = 0.0
    stopped: bool = False  # a "dead" agent sends nothing

    def inventory(self) -> list[dict]:
        return [
            {
                "index": i,
                "uuid": f"GPU-{self.host}-{i}",
                "name": PRODUCT,
                "memory_total_mib": 81559,
                "memory_used_mib": 0,
                "utilization_pct": 0.0,
                "temperature_c": 40.0,
                "power_w": 100.0,
                "health": "healthy",
                "health_reason": "",
            }
            for i in range(self.gpus)
        ]


@dataclass
class SimStats:
    heartbeats: int = 0
    statuses: Counter = field(default_factory=Counter)
    started: int = 0
    exited: int = 0
    stopped: int = 0
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class SimCluster:
    """`count` simulated agents heartbeating every `interval` s from `threads` threads.

    Each behaves as docs/protocol.md says an agent does: it starts the workers in
    `run` it does not have (never an acknowledged one again), reports them running,
    then exited after their job's SIM_RUN_S with SIM_EXIT_CODE (0); it stops those
    in `stop` or in neither list (exit 143); it reports exits until acknowledged;
    and it drops workers a 400 names as not this node's.
    """

    def __init__(self, url, bootstrap, count, *, gpus=8, interval=2.0, threads=16, per_rack=16):
        self.url, self.bootstrap, self.interval = url, bootstrap, interval
        self.agents = [
            SimAgent(host=f"sim-{i:04d}", rack=f"r{i // per_rack}", gpus=gpus) for i in range(count)
        ]
        self.threads = threads
        self.stats = SimStats()
        self._stop = threading.Event()
        self._pool: list[threading.Thread] = []

    def register(self) -> None:
        def reg(chunk: list[SimAgent]) -> None:
            session = requests.Session()
            for agent in chunk:
                body = {
                    "bootstrap_token": self.bootstrap,
                    "hostname": agent.host,
                    "rack": agent.rack,
                    "block": agent.rack,
                    "agent_version": "sim",
                    "gpus": agent.inventory(),
                }
                for _ in range(20):
                    r = session.post(self.url + "/api/agent/v1/register", json=body, timeout=30)
                    if r.status_code == 201:
                        agent.token = r.json()["node_token"]
                        break
                    time.sleep(0.5)
                assert agent.token, f"{agent.host} could not register: {r.status_code} {r.text}"

        chunks = [self.agents[i :: self.threads] for i in range(self.threads)]
        pool = [threading.Thread(target=reg, args=(c,)) for c in chunks]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()

    def start(self) -> None:
        now = time.monotonic()
        for agent in self.agents:
            agent.due = now + random.uniform(0, self.interval)
        for t in range(self.threads):
            chunk = self.agents[t :: self.threads]
            thread = threading.Thread(target=self._loop, args=(chunk,), daemon=True)
            thread.start()
            self._pool.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._pool:
            thread.join(30)
        self._pool.clear()
        self._stop.clear()

    def _loop(self, agents: list[SimAgent]) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            now = time.monotonic()
            for agent in agents:
                if agent.due <= now and not agent.stopped and not self._stop.is_set():
                    self.heartbeat(agent, session)
                    agent.due = max(agent.due + self.interval, time.monotonic())
            nxt = min((a.due for a in agents), default=now + 1)
            self._stop.wait(max(0.01, min(nxt - time.monotonic(), 0.5)))

    def heartbeat(self, agent: SimAgent, session: requests.Session) -> None:
        now = time.monotonic()
        for w in agent.workers.values():
            if w.state == "running" and now >= w.ends:
                w.state, w.finished = "exited", time.time()
                with self.stats.lock:
                    self.stats.exited += 1
        body = {
            "agent_version": "sim",
            "gpus": agent.inventory(),
            "workers": [_report(w) for w in agent.workers.values()],
        }
        started = time.monotonic()
        try:
            r = session.post(
                self.url + "/api/agent/v1/heartbeat",
                json=body,
                headers={"Authorization": f"Bearer {agent.token}"},
                timeout=15,
            )
        except requests.RequestException:
            with self.stats.lock:
                self.stats.statuses["error"] += 1
            return
        with self.stats.lock:
            self.stats.heartbeats += 1
            self.stats.statuses[r.status_code] += 1
            self.stats.latencies.append(time.monotonic() - started)
        if r.status_code == 200:
            self._reconcile(agent, r.json())
        elif r.status_code == 400:
            for text in r.json().get("error", {}).get("fields", {}).get("workers", []):
                agent.workers.pop(text.rsplit(" ", 1)[-1], None)

    def _reconcile(self, agent: SimAgent, reply: dict) -> None:
        for key in reply.get("ack", []):
            w = agent.workers.get(key)
            if w and w.state == "exited":
                del agent.workers[key]
                agent.acked.add(key)
        run = {e["key"]: e for e in reply.get("run", [])}
        stop = {e["key"] for e in reply.get("stop", [])}
        now = time.monotonic()
        for key, entry in run.items():
            if key not in agent.workers and key not in agent.acked:
                env = entry.get("env", {})
                agent.workers[key] = SimWorker(
                    key=key,
                    started=time.time(),
                    ends=now + float(env.get("SIM_RUN_S", "2")),
                    exit_code=int(env.get("SIM_EXIT_CODE", "0")),
                )
                with self.stats.lock:
                    self.stats.started += 1
        for key, w in agent.workers.items():
            if w.state == "running" and (key in stop or key not in run):
                w.state, w.exit_code, w.finished = "exited", 143, time.time()
                with self.stats.lock:
                    self.stats.stopped += 1


def _report(w: SimWorker) -> dict:
    return {
        "key": w.key,
        "state": w.state,
        "exit_code": w.exit_code if w.state == "exited" else None,
        "started_at": _iso(w.started),
        "finished_at": _iso(w.finished) if w.finished else None,
    }

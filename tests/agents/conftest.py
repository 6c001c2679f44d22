"""Shared helpers for the node-agent tests: specs, waiting, a fake portal, and a running agent."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from agents.agent import Agent
from agents.backoff import Backoff
from agents.config import AgentConfig
from agents.gpu import FakeGpuBackend
from agents.portal import PortalClient
from agents.runtimes.base import Runtime
from agents.runtimes.process import ProcessRuntime
from agents.state import NodeTokenFile
from agents.workers import WorkerSpec
from tests.agents.fake_portal import FakePortal


def make_spec(key: str = "42.0.0", command: tuple[str, ...] = ("true",), **fields) -> WorkerSpec:
    job, attempt, rank = (int(part) for part in key.split("."))
    defaults = dict(
        key=key,
        job_id=job,
        attempt=attempt,
        rank=rank,
        world_size=rank + 1,
        image="busybox",
        command=tuple(command),
        gpu_uuids=("GPU-aaaa", "GPU-bbbb"),
        master_addr="gpu-node-05",
        master_port=29500,
    )
    defaults.update(fields)
    return WorkerSpec(**defaults)


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition"
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def kill_all(runtime: Runtime) -> None:
    """Leave no test process behind."""
    for status in runtime.list():
        if status.live:
            runtime.stop(status.key, signal.SIGKILL, 0)
    wait_until(lambda: not any(s.live for s in runtime.poll()), 10, "workers to die")


@pytest.fixture
def portal() -> Iterator[FakePortal]:
    server = FakePortal()
    yield server
    server.close()


@dataclass
class RunningAgent:
    agent: Agent
    runtime: Runtime
    gpus: FakeGpuBackend
    config: AgentConfig
    thread: threading.Thread
    result: list[int] = field(default_factory=list)

    def stop(self, timeout: float = 20.0) -> int | None:
        self.agent.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "agent did not stop"
        return self.result[0] if self.result else None

    @property
    def exit_code(self) -> int | None:
        return self.result[0] if self.result else None


@pytest.fixture
def start_agent(tmp_path: Path, portal: FakePortal) -> Iterator[Callable[..., RunningAgent]]:
    """Start an agent thread against the fake portal: fake GPUs, the process runtime, fast timings."""
    started: list[RunningAgent] = []

    def start(runtime: Runtime | None = None, **overrides) -> RunningAgent:
        config = AgentConfig(
            portal_url=portal.url,
            state_dir=tmp_path / "state",
            node_token="bnt_good",
            heartbeat_interval_s=0.1,
            hostname="gpu-node-07",
            nvml="fake",
            fake_gpus=2,
        )
        config = replace(config, **overrides)
        gpus = FakeGpuBackend(config.fake_gpus, node=config.hostname)
        runtime = runtime or ProcessRuntime(config.state_dir)
        agent = Agent(
            config,
            gpus=gpus,
            runtime=runtime,
            portal=PortalClient(config.portal_url, timeout_s=2.0),
            token_file=NodeTokenFile(config.token_path),
            backoff=Backoff(base_s=0.05, cap_s=0.4),
        )
        running = RunningAgent(agent, runtime, gpus, config, threading.Thread(target=lambda: None))
        running.thread = threading.Thread(
            target=lambda: running.result.append(agent.run()), daemon=True
        )
        running.thread.start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.agent.request_stop()
        running.thread.join(20)
        kill_all(running.runtime)

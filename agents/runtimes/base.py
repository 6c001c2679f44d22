"""The runtime interface every way of running workers implements.

A runtime is the agent's memory of its workers: it reports every worker it
knows (live or exited, including those started before an agent restart) until
``forget`` is called after the portal acknowledged the exit. That is what makes
re-adoption and "no exit code is lost" work without a database.
"""

from __future__ import annotations

import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agents.state import ensure_dir, read_json, write_json
from agents.workers import LOG_TAIL_BYTES, WorkerSpec, WorkerStatus, valid_key


class StartFailed(Exception):
    """The worker could not be started; it is reported as ``failed_to_start``."""

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code


class RuntimeUnavailable(Exception):
    """The runtime cannot work on this node at all (for example, no Docker engine)."""


@dataclass(frozen=True)
class StopRecord:
    signal: str
    kill_at: float
    killed: bool = False


class StopBook:
    """Stops in progress: which signal was sent and when the grace period ends.

    Kept on disk (when given a directory) so an agent restarted in the middle of
    a grace period still kills the worker on time instead of signalling it again.
    """

    def __init__(self, directory: Path | None = None):
        self._dir = ensure_dir(directory) if directory is not None else None
        self._records: dict[str, StopRecord] = {}
        self._lock = threading.Lock()
        if self._dir is not None:
            self._load()

    def _load(self) -> None:
        for path in self._dir.glob("*.json"):
            data = read_json(path)
            if valid_key(path.stem) and isinstance(data, dict):
                self._records[path.stem] = StopRecord(**data)

    def get(self, key: str) -> StopRecord | None:
        with self._lock:
            return self._records.get(key)

    def put(self, key: str, record: StopRecord) -> None:
        with self._lock:
            self._records[key] = record
            if self._dir is not None:
                write_json(self._dir / f"{key}.json", record.__dict__)

    def discard(self, key: str) -> None:
        with self._lock:
            self._records.pop(key, None)
            if self._dir is not None:
                (self._dir / f"{key}.json").unlink(missing_ok=True)


class Runtime(ABC):
    """Start, observe, stop and forget workers.

    ``stop`` only sends the signal and notes the deadline; ``poll`` (called on
    every agent tick) kills workers whose grace period has run out. So a long
    grace period never blocks the heartbeat loop.
    """

    name = "runtime"

    def __init__(self, stops: StopBook, clock: Callable[[], float] = time.time):
        self._stops = stops
        self._clock = clock
        # Called (from any thread, with the worker's key) when a worker this runtime
        # started may have ended, so the agent reports the exit at once rather than at
        # its next tick. A runtime that cannot tell leaves it uncalled.
        self.on_exit: Callable[[str], None] | None = None

    @abstractmethod
    def start(self, spec: WorkerSpec) -> None:
        """Start the worker; raise StartFailed when it cannot run. May block (image pulls)."""

    @abstractmethod
    def list(self) -> list[WorkerStatus]:
        """Return every worker this runtime knows, including exited ones not yet forgotten."""

    @abstractmethod
    def log_tail(self, key: str, limit: int = LOG_TAIL_BYTES) -> str:
        """Return the last lines of the worker's output (at most ``limit`` UTF-8 bytes)."""

    @abstractmethod
    def forget(self, key: str) -> None:
        """Remove all trace of an exited worker (after the portal acknowledged it); no-op if unknown."""

    @abstractmethod
    def _signal(self, key: str, sig: signal.Signals) -> None:
        """Deliver ``sig`` to the worker's processes; ignore a worker that is already gone."""

    @abstractmethod
    def _kill(self, key: str) -> None:
        """SIGKILL the worker's processes; ignore a worker that is already gone."""

    def stopping(self, key: str) -> bool:
        return self._stops.get(key) is not None

    def stop(self, key: str, sig: signal.Signals, grace_s: float) -> None:
        """Send ``sig`` now and kill after ``grace_s``. A second call for the same worker does nothing,
        so a checkpoint signal is delivered once even though stop orders repeat every heartbeat."""
        if self.stopping(key):
            return
        self._stops.put(key, StopRecord(signal=sig.name, kill_at=self._clock() + grace_s))
        if sig == signal.SIGKILL or grace_s <= 0:
            self._kill_now(key)
        else:
            self._signal(key, sig)

    def poll(self) -> list[WorkerStatus]:
        """Kill live workers whose grace period is over, then return ``list()``."""
        statuses = self.list()
        now = self._clock()
        for status in statuses:
            record = self._stops.get(status.key)
            if status.live and record is not None and now >= record.kill_at:
                self._kill_now(status.key)
        return statuses

    def _kill_now(self, key: str) -> None:
        record = self._stops.get(key)
        if record is not None and not record.killed:
            self._stops.put(key, StopRecord(record.signal, record.kill_at, killed=True))
        self._kill(key)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release client resources; workers keep running."""

"""An in-memory runtime for demos with many simulated nodes on one machine.

Nothing is executed. A worker "runs" for ``BERTH_FAKE_RUN_S`` seconds from
its job env (forever when absent) and then exits with ``BERTH_FAKE_EXIT_CODE``
(default 0); a stop signal ends it at once with 128 + signal unless
``BERTH_FAKE_IGNORE_SIGNALS=1``, in which case only the kill after the grace
period does. ``BERTH_FAKE_START_ERROR`` makes the start fail with that message.
State lives in memory, so there is no re-adoption across agent restarts.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from agents.runtimes.base import Runtime, StartFailed, StopBook
from agents.workers import (
    EXITED,
    LOG_TAIL_BYTES,
    RUNNING,
    STOPPING,
    WorkerSpec,
    WorkerStatus,
    key_order,
    utc_iso,
)


@dataclass(frozen=True)
class _FakeWorker:
    spec: WorkerSpec
    started: float
    ends_at: float | None
    exit_code: int | None = None
    finished: float | None = None


class FakeRuntime(Runtime):
    name = "fake"

    def __init__(self, clock: Callable[[], float] = time.time):
        super().__init__(StopBook(), clock)
        self._workers: dict[str, _FakeWorker] = {}
        self._lock = threading.Lock()

    def start(self, spec: WorkerSpec) -> None:
        error = spec.env.get("BERTH_FAKE_START_ERROR")
        if error:
            raise StartFailed(error)
        now = self._clock()
        run_s = spec.env.get("BERTH_FAKE_RUN_S")
        ends_at = now + float(run_s) if run_s else None
        with self._lock:
            self._workers.setdefault(spec.key, _FakeWorker(spec, now, ends_at))

    def list(self) -> list[WorkerStatus]:
        with self._lock:
            self._finish_due()
            return [
                self._status(w)
                for _, w in sorted(self._workers.items(), key=lambda kv: key_order(kv[0]))
            ]

    def _finish_due(self) -> None:
        now = self._clock()
        for key, worker in self._workers.items():
            if worker.exit_code is None and worker.ends_at is not None and now >= worker.ends_at:
                code = int(worker.spec.env.get("BERTH_FAKE_EXIT_CODE", "0"))
                self._workers[key] = replace(worker, exit_code=code, finished=worker.ends_at)

    def _status(self, worker: _FakeWorker) -> WorkerStatus:
        key = worker.spec.key
        if worker.exit_code is not None:
            return WorkerStatus(
                key, EXITED, worker.exit_code, utc_iso(worker.started), utc_iso(worker.finished)
            )
        return WorkerStatus(
            key, STOPPING if self.stopping(key) else RUNNING, started_at=utc_iso(worker.started)
        )

    def _end(self, key: str, code: int) -> None:
        with self._lock:
            worker = self._workers.get(key)
            if worker is not None and worker.exit_code is None:
                self._workers[key] = replace(worker, exit_code=code, finished=self._clock())

    def _signal(self, key: str, sig: signal.Signals) -> None:
        worker = self._workers.get(key)
        if worker is not None and worker.spec.env.get("BERTH_FAKE_IGNORE_SIGNALS") != "1":
            self._end(key, 128 + sig)

    def _kill(self, key: str) -> None:
        self._end(key, 128 + signal.SIGKILL)

    def log_tail(self, key: str, limit: int = LOG_TAIL_BYTES) -> str:
        worker = self._workers.get(key)
        if worker is None:
            return ""
        return f"fake worker {key}: {' '.join(worker.spec.command)}\n"[-limit:]

    def forget(self, key: str) -> None:
        with self._lock:
            worker = self._workers.get(key)
            if worker is not None and worker.exit_code is not None:
                del self._workers[key]
        self._stops.discard(key)

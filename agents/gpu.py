"""GPUs behind one small interface, with a scriptable fake for tests and demos.

The real backend (``agents.nvml``) reads NVML; ``FakeGpuBackend`` simulates a
node so the whole system runs on a laptop. Both report ``GpuInfo`` with a
health of ``healthy``, ``unhealthy`` (XID, uncorrected ECC) or ``lost``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
LOST = "lost"
_SEVERITY = {HEALTHY: 0, UNHEALTHY: 1, LOST: 2}

# XIDs caused by the application, not the GPU: the GPU stays schedulable.
# Same list as NVIDIA's k8s-device-plugin (internal/rm/health.go,
# "Application errors: the GPU should still be healthy"): 13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing, 45
# preemptive cleanup, 68 video processor exception, 109 context switch timeout.
BENIGN_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class GpuUnavailable(Exception):
    """The GPU backend cannot work on this node (no driver, no library, no permission)."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as reported in the heartbeat; telemetry is None when the GPU does not report it."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    health: str = HEALTHY
    health_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        # Plain values only: a shallow copy (asdict deep-copies, every beat, every GPU).
        return dict(self.__dict__)


@dataclass(frozen=True)
class Workload:
    """What one GPU is busy with: the worker of a running job that holds it.

    `utilization_pct` pins a simulated GPU's load (the job's
    BERTH_FAKE_UTILIZATION variable, read only by the fake backend), so a demo
    can show a job that holds GPUs and leaves them idle.
    """

    job_id: int
    rank: int = 0
    utilization_pct: int | None = None


# The one job variable the fake backend reads; real GPUs report their own load.
FAKE_UTILIZATION_ENV = "BERTH_FAKE_UTILIZATION"


def worse(health: str, reason: str, current: tuple[str, str]) -> tuple[str, str]:
    """Return the more severe of two (health, reason) pairs; the first reason of a level sticks."""
    return (health, reason) if _SEVERITY[health] > _SEVERITY[current[0]] else current


class GpuBackend(ABC):
    @abstractmethod
    def inventory(self) -> list[GpuInfo]:
        """Return every GPU with fresh telemetry and its health. Never raises once started."""

    def observe_workload(self, busy: Mapping[str, Workload]) -> None:  # noqa: B027 - optional
        """The GPUs (by UUID) the node's running workers hold. Real GPUs measure their own
        load; the fake backend simulates telemetry from it."""

    def start(self) -> None:  # noqa: B027 - optional hook, most backends need none
        """Start background health watching (the NVML XID event thread)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop background work and release the library."""


def fake_uuid(node: str, index: int) -> str:
    """A stable NVML-style UUID per (node, index), so simulated nodes never share a GPU."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'berth-fake/{node}/{index}')}"


# Simulated telemetry: a free GPU idles cool at its idle power; a busy one runs at
# its job's level (stable per job, 62-95 %) with a slow wobble, holds memory,
# warms up and draws power towards its board limit.
IDLE_TEMPERATURE_C = 30
IDLE_POWER_W = 70.0
BOARD_POWER_W = {"H100": 700.0, "A100": 400.0}
DEFAULT_BOARD_POWER_W = 300.0
WOBBLE_PCT = 6
WOBBLE_PERIOD_S = 90.0


def simulated_telemetry(
    work: Workload, index: int, name: str, memory_total_mib: int, now: float
) -> dict[str, Any]:
    """Plausible NVML readings of a GPU working for `work` at time `now` (seconds)."""
    spread = (work.job_id * 2654435761) % 97  # a stable per-job number, 0..96
    if work.utilization_pct is not None:
        util = max(0, min(100, work.utilization_pct))
    else:
        level = 62 + spread % 34
        phase = 2 * math.pi * now / WOBBLE_PERIOD_S + index + work.rank
        util = max(0, min(100, round(level + WOBBLE_PCT * math.sin(phase))))
    # Memory is held whether or not the GPU computes (a notebook keeps its tensors).
    memory_share = 0.30 + 0.6 * (spread / 96)
    board = next((w for key, w in BOARD_POWER_W.items() if key in name), DEFAULT_BOARD_POWER_W)
    return {
        "utilization_pct": util,
        "memory_used_mib": int(memory_total_mib * memory_share),
        "temperature_c": IDLE_TEMPERATURE_C + 6 + util * 44 // 100,
        "power_w": round(IDLE_POWER_W + 15 + (board - IDLE_POWER_W - 15) * util / 100, 1),
    }


class FakeGpuBackend(GpuBackend):
    """Simulated GPUs with scriptable faults and workload-driven telemetry.

    A GPU held by a running worker (observe_workload) reports the load of
    simulated_telemetry; a free one idles. Scripted utilization wins over both.

    Tests call ``inject_xid``/``inject_ecc``/``mark_lost``/``set_utilization``.
    A running agent can be scripted through a JSON faults file, re-read when it
    changes; its content replaces all earlier faults, so emptying it heals:
    ``{"gpus": {"0": {"xid": 79}, "1": {"ecc": 2}, "2": {"lost": true},
    "3": {"utilization_pct": 90, "memory_used_mib": 40000}}}``.
    """

    def __init__(
        self,
        count: int = 8,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_mib: int = 81559,
        *,
        node: str = "fake-node",
        faults_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self._base = [
            GpuInfo(i, fake_uuid(node, i), name, memory_mib, 0, 0, IDLE_TEMPERATURE_C, IDLE_POWER_W)
            for i in range(count)
        ]
        self._gpus = list(self._base)
        self._lock = threading.Lock()
        self._faults_file = faults_file
        self._faults_mtime: float | None = None
        self._clock = clock
        self._busy: dict[str, Workload] = {}
        self._scripted: set[int] = set()  # GPUs whose utilization a test or faults file set

    def observe_workload(self, busy: Mapping[str, Workload]) -> None:
        with self._lock:
            self._busy = dict(busy)

    def inventory(self) -> list[GpuInfo]:
        self._reload_faults()
        now = self._clock()
        with self._lock:
            return [self._with_load(gpu, now) for gpu in self._gpus]

    def _with_load(self, gpu: GpuInfo, now: float) -> GpuInfo:
        work = self._busy.get(gpu.uuid)
        if work is None or gpu.index in self._scripted or gpu.health == LOST:
            return gpu
        return replace(
            gpu, **simulated_telemetry(work, gpu.index, gpu.name, gpu.memory_total_mib, now)
        )

    def _update(self, index: int, **changes: Any) -> None:
        with self._lock:
            self._gpus[index] = replace(self._gpus[index], **changes)

    def _degrade(self, index: int, health: str, reason: str) -> None:
        with self._lock:
            gpu = self._gpus[index]
            health, reason = worse(health, reason, (gpu.health, gpu.health_reason))
            self._gpus[index] = replace(gpu, health=health, health_reason=reason)

    def inject_xid(self, index: int, xid: int) -> None:
        """Simulate an XID critical error event; benign XIDs leave the GPU healthy, as with NVML."""
        if xid in BENIGN_XIDS:
            log.info("ignoring benign XID %d on GPU %d", xid, index)
            return
        self._degrade(index, UNHEALTHY, f"XID {xid}")

    def inject_ecc(self, index: int, count: int) -> None:
        if count > 0:
            self._degrade(index, UNHEALTHY, f"uncorrected ECC errors: {count}")

    def mark_lost(self, index: int) -> None:
        self._degrade(index, LOST, "GPU is lost")
        self._update(
            index, memory_used_mib=None, utilization_pct=None, temperature_c=None, power_w=None
        )

    def set_utilization(self, index: int, pct: int, memory_used_mib: int | None = None) -> None:
        gpu = self._gpus[index]
        used = gpu.memory_total_mib * pct // 100 if memory_used_mib is None else memory_used_mib
        self._scripted.add(index)
        self._update(
            index,
            utilization_pct=pct,
            memory_used_mib=used,
            temperature_c=30 + pct // 2,
            power_w=70.0 + 6.3 * pct,
        )

    def heal(self, index: int) -> None:
        self._scripted.discard(index)
        self._update(index, **{k: v for k, v in asdict(self._base[index]).items() if k != "index"})

    def _reload_faults(self) -> None:
        if self._faults_file is None:
            return
        try:
            mtime = self._faults_file.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._faults_mtime:
            return
        self._faults_mtime = mtime
        try:
            faults = json.loads(self._faults_file.read_text()) if mtime is not None else {}
            self._apply_faults(faults.get("gpus", {}))
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("ignoring bad fake GPU faults file %s: %s", self._faults_file, exc)

    def _apply_faults(self, gpus: dict[str, Any]) -> None:
        for index in range(len(self._gpus)):
            self.heal(index)
        for index_text, fault in gpus.items():
            index = int(index_text)
            if not 0 <= index < len(self._gpus):
                raise ValueError(f"no GPU {index} on this fake node")
            if "utilization_pct" in fault:
                self.set_utilization(
                    index, int(fault["utilization_pct"]), fault.get("memory_used_mib")
                )
            if fault.get("xid"):
                self.inject_xid(index, int(fault["xid"]))
            if fault.get("ecc"):
                self.inject_ecc(index, int(fault["ecc"]))
            if fault.get("lost"):
                self.mark_lost(index)
        log.info("applied fake GPU faults from %s", self._faults_file)

"""GPUs behind one small interface, with a scriptable fake for tests and demos.

The real backend (``agents.nvml``) reads NVML; ``FakeGpuBackend`` simulates a
node so the whole system runs on a laptop. Both report ``GpuInfo`` with a
health of ``healthy``, ``unhealthy`` (XID, uncorrected ECC) or ``lost``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from abc import ABC, abstractmethod
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
        return asdict(self)


def worse(health: str, reason: str, current: tuple[str, str]) -> tuple[str, str]:
    """Return the more severe of two (health, reason) pairs; the first reason of a level sticks."""
    return (health, reason) if _SEVERITY[health] > _SEVERITY[current[0]] else current


class GpuBackend(ABC):
    @abstractmethod
    def inventory(self) -> list[GpuInfo]:
        """Return every GPU with fresh telemetry and its health. Never raises once started."""

    def start(self) -> None:  # noqa: B027 - optional hook, most backends need none
        """Start background health watching (the NVML XID event thread)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop background work and release the library."""


def fake_uuid(node: str, index: int) -> str:
    """A stable NVML-style UUID per (node, index), so simulated nodes never share a GPU."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'berth-fake/{node}/{index}')}"


class FakeGpuBackend(GpuBackend):
    """Simulated GPUs with scriptable faults.

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
    ):
        self._base = [
            GpuInfo(i, fake_uuid(node, i), name, memory_mib, 0, 0, 30, 70.0) for i in range(count)
        ]
        self._gpus = list(self._base)
        self._lock = threading.Lock()
        self._faults_file = faults_file
        self._faults_mtime: float | None = None

    def inventory(self) -> list[GpuInfo]:
        self._reload_faults()
        with self._lock:
            return list(self._gpus)

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
        self._update(
            index,
            utilization_pct=pct,
            memory_used_mib=used,
            temperature_c=30 + pct // 2,
            power_w=70.0 + 6.3 * pct,
        )

    def heal(self, index: int) -> None:
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

"""A stand-in for the ``pynvml`` module with scriptable GPUs, for NvmlGpuBackend tests.

It reuses the real module's constants and NVMLError class (so errors map to
the same subclasses and values) and mirrors the real functions' signatures;
``test_nvml.py`` checks that the signatures match.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml as real

NVMLError = real.NVMLError
CONSTANTS = (
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_UNKNOWN",
    "NVML_TEMPERATURE_GPU",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "nvmlEventTypeXidCriticalError",
    "nvmlEventTypeDoubleBitEccError",
)
MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_mib: int = 81559
    memory_used_mib: int = 1024
    utilization: int = 0
    temperature: int = 40
    power_mw: int = 75_000
    ecc_uncorrected: int = 0
    lost: bool = False
    events_supported: bool = True
    unsupported: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Handle:
    index: int


class FakePynvml:
    """Module-like object: pass it to NvmlGpuBackend(nvml=...)."""

    def __init__(self, gpus: list[FakeGpu] | None = None):
        for name in CONSTANTS:
            setattr(self, name, getattr(real, name))
        self.NVMLError = NVMLError
        self.gpus = (
            gpus
            if gpus is not None
            else [FakeGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd") for i in range(2)]
        )
        self.init_error: int | None = None
        self.wait_error: int | None = None
        self.initialized = False
        self.shut_down = False
        self.event_sets: list[queue.Queue] = []
        self.registered: dict[int, int] = {}
        self.freed = 0

    # -- scripting ----------------------------------------------------------

    def emit_xid(self, index: int | None, xid: int) -> None:
        """Queue an XID critical error event; index None gives a handle NVML cannot resolve."""
        handle = Handle(index if index is not None else 99)
        data = SimpleNamespace(
            device=handle,
            eventType=self.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
        for event_set in self.event_sets:
            event_set.put(data)

    def _gpu(self, handle: Handle, query: str = "") -> FakeGpu:
        if handle.index >= len(self.gpus):
            raise NVMLError(self.NVML_ERROR_UNKNOWN)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        if query in gpu.unsupported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # -- the pynvml surface NvmlGpuBackend uses -------------------------------

    def nvmlInit(self):
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return Handle(index)

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._gpu(handle, "memory")
        total, used = gpu.memory_total_mib * MIB, gpu.memory_used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self._gpu(handle, "utilization").utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._gpu(handle, "temperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu(handle, "power").power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        assert (errorType, counterType) == (
            self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            self.NVML_VOLATILE_ECC,
        )
        return self._gpu(handle, "ecc").ecc_uncorrected

    def nvmlEventSetCreate(self):
        event_set = queue.Queue()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        gpu = self._gpu(handle)
        if not gpu.events_supported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.nvmlEventTypeXidCriticalError | self.nvmlEventTypeDoubleBitEccError

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._gpu(handle)
        self.registered[handle.index] = eventTypes

    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        if self.wait_error is not None:
            raise NVMLError(self.wait_error)
        try:
            return eventSet.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise NVMLError(self.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, eventSet):
        self.freed += 1

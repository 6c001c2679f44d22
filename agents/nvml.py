"""The real GPU backend: NVML through nvidia-ml-py (module ``pynvml``).

Health rules (a GPU only ever gets worse until the agent restarts, as in
NVIDIA's k8s-device-plugin, which has "no way to recover from the Unhealthy
state"):

1. NVML_ERROR_GPU_IS_LOST from any query -> ``lost``.
2. An XID critical error event whose XID is not in ``BENIGN_XIDS`` ->
   ``unhealthy`` ("XID 79"). Events arrive on a background thread waiting on
   an NVML event set (nvmlEventSetCreate / nvmlDeviceRegisterEvents /
   nvmlEventSetWait_v2), the way k8s-device-plugin's health check does.
3. Volatile uncorrected ECC errors > 0 -> ``unhealthy``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agents.gpu import (
    BENIGN_XIDS,
    HEALTHY,
    LOST,
    UNHEALTHY,
    GpuBackend,
    GpuInfo,
    GpuUnavailable,
    worse,
)

log = logging.getLogger(__name__)

EVENT_WAIT_MS = 1000
_MIB = 1024 * 1024
HINT = "use --nvml fake for a simulated node"


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:
        raise GpuUnavailable(
            "NVML unavailable: the nvidia-ml-py package (module pynvml) is not installed — "
            f"pip install nvidia-ml-py, or {HINT}"
        ) from exc
    return pynvml


def _text(value: str | bytes) -> str:
    """Older pynvml versions return bytes."""
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str
    memory_total_mib: int


class NvmlGpuBackend(GpuBackend):
    """GPU inventory and health from NVML. ``nvml`` is injectable so tests can pass a fake module."""

    def __init__(self, nvml: ModuleType | None = None, *, event_wait_ms: int = EVENT_WAIT_MS):
        self._nvml = nvml if nvml is not None else _import_pynvml()
        self._event_wait_ms = event_wait_ms
        self._init()
        self._devices = self._discover()
        self._health: dict[int, tuple[str, str]] = {d.index: (HEALTHY, "") for d in self._devices}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # index -> whether XID events could be registered (for diagnostics and the GPU check).
        self.xid_events: dict[int, bool] = {}

    # -- errors -------------------------------------------------------------

    def _is(self, exc: BaseException, name: str) -> bool:
        return getattr(exc, "value", None) == getattr(self._nvml, name, object())

    def _init(self) -> None:
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise GpuUnavailable(self._init_message(exc)) from exc

    def _init_message(self, exc: BaseException) -> str:
        if self._is(exc, "NVML_ERROR_LIBRARY_NOT_FOUND"):
            return f"NVML unavailable: libnvidia-ml.so.1 not found — is the NVIDIA driver installed? {HINT}"
        if self._is(exc, "NVML_ERROR_DRIVER_NOT_LOADED"):
            return f"NVML unavailable: the NVIDIA kernel driver is not loaded — {HINT}"
        if self._is(exc, "NVML_ERROR_NO_PERMISSION"):
            return f"NVML unavailable: no permission to open the NVIDIA devices — {HINT}"
        return f"NVML unavailable: {exc} — {HINT}"

    # -- discovery ----------------------------------------------------------

    def _discover(self) -> list[_Device]:
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML unavailable: cannot count GPUs: {exc} — {HINT}") from exc
        devices = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                devices.append(
                    _Device(
                        index,
                        handle,
                        _text(nvml.nvmlDeviceGetUUID(handle)),
                        _text(nvml.nvmlDeviceGetName(handle)),
                        memory.total // _MIB,
                    )
                )
            except nvml.NVMLError as exc:
                # Without its UUID the GPU cannot be reported; the portal marks
                # GPUs missing from the report as lost.
                log.error("GPU %d is not usable and is left out of the inventory: %s", index, exc)
        if not devices:
            log.warning("NVML reports no usable GPUs on this node")
        return devices

    # -- inventory ----------------------------------------------------------

    def _mark(self, index: int, health: str, reason: str) -> None:
        with self._lock:
            before = self._health[index]
            self._health[index] = worse(health, reason, before)
        if self._health[index] != before:
            log.error("GPU %d is now %s: %s", index, *self._health[index])

    def _query(self, device: _Device, fn: str, *args: Any) -> Any:
        """Call one NVML query; None when unsupported or failing, marking the GPU lost when it is.
        A function this nvidia-ml-py no longer has (some are deprecated) also reads as None."""
        query = getattr(self._nvml, fn, None)
        if query is None:
            return None
        try:
            return query(device.handle, *args)
        except self._nvml.NVMLError as exc:
            if self._is(exc, "NVML_ERROR_GPU_IS_LOST"):
                self._mark(device.index, LOST, "GPU is lost")
            elif not self._is(exc, "NVML_ERROR_NOT_SUPPORTED"):
                log.debug("GPU %d: %s failed: %s", device.index, fn, exc)
            return None

    def _read(self, device: _Device) -> GpuInfo:
        nvml = self._nvml
        memory = self._query(device, "nvmlDeviceGetMemoryInfo")
        utilization = self._query(device, "nvmlDeviceGetUtilizationRates")
        temperature = self._query(device, "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._query(device, "nvmlDeviceGetPowerUsage")
        ecc = self._query(
            device,
            "nvmlDeviceGetTotalEccErrors",
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        if ecc:
            self._mark(device.index, UNHEALTHY, f"uncorrected ECC errors: {ecc}")
        health, reason = self._health[device.index]
        return GpuInfo(
            index=device.index,
            uuid=device.uuid,
            name=device.name,
            memory_total_mib=device.memory_total_mib,
            memory_used_mib=memory.used // _MIB if memory is not None else None,
            utilization_pct=utilization.gpu if utilization is not None else None,
            temperature_c=temperature,
            power_w=round(power_mw / 1000, 1) if power_mw is not None else None,
            health=health,
            health_reason=reason,
        )

    def inventory(self) -> list[GpuInfo]:
        return [self._read(device) for device in self._devices]

    # -- XID events ---------------------------------------------------------

    def start(self) -> None:
        if self._thread is None and self._devices:
            event_set = self._register_events()
            if event_set is not None:
                self._thread = threading.Thread(
                    target=self._watch, args=(event_set,), name="berth-nvml-events", daemon=True
                )
                self._thread.start()

    def _register_events(self) -> Any | None:
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("XID health watching disabled: cannot create an NVML event set: %s", exc)
            return None
        for device in self._devices:
            self.xid_events[device.index] = self._register(device, event_set)
        return event_set

    def _register(self, device: _Device, event_set: Any) -> bool:
        """Register for XID critical errors. A GPU that cannot report them stays healthy (unlike
        k8s-device-plugin, which marks it unhealthy): ECC and lost checks still cover it."""
        nvml = self._nvml
        try:
            supported = nvml.nvmlDeviceGetSupportedEventTypes(device.handle)
            mask = supported & nvml.nvmlEventTypeXidCriticalError
            if mask:
                nvml.nvmlDeviceRegisterEvents(device.handle, mask, event_set)
                return True
        except nvml.NVMLError as exc:
            if self._is(exc, "NVML_ERROR_GPU_IS_LOST"):
                self._mark(device.index, LOST, "GPU is lost")
                return False
            if not self._is(exc, "NVML_ERROR_NOT_SUPPORTED"):
                log.warning("GPU %d: cannot register for XID events: %s", device.index, exc)
                return False
        log.warning(
            "GPU %d does not report XID events; only ECC and lost checks apply", device.index
        )
        return False

    def _watch(self, event_set: Any) -> None:
        nvml = self._nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        try:
            while not self._stop.is_set():
                try:
                    data = wait(event_set, self._event_wait_ms)
                except nvml.NVMLError as exc:
                    if self._is(exc, "NVML_ERROR_TIMEOUT"):
                        continue
                    self._wait_failed(exc)
                    return
                self._on_event(data)
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(event_set)

    def _wait_failed(self, exc: BaseException) -> None:
        """k8s-device-plugin marks every device unhealthy when the event wait fails; so do we, once,
        and stop watching rather than spin on a broken event set."""
        health = LOST if self._is(exc, "NVML_ERROR_GPU_IS_LOST") else UNHEALTHY
        log.error("NVML event wait failed (%s): marking all GPUs %s", exc, health)
        for device in self._devices:
            self._mark(device.index, health, f"NVML event wait failed: {exc}")

    def _on_event(self, data: Any) -> None:
        nvml = self._nvml
        if data.eventType != nvml.nvmlEventTypeXidCriticalError:
            return
        xid = int(data.eventData)
        if xid in BENIGN_XIDS:
            log.info("ignoring application XID %d (the GPU stays healthy)", xid)
            return
        for device in self._devices_of(data.device):
            self._mark(device.index, UNHEALTHY, f"XID {xid}")

    def _devices_of(self, handle: Any) -> list[_Device]:
        """The GPU an event is about, found by UUID; all GPUs when NVML cannot say which
        (k8s-device-plugin does the same); none when it is not one of ours."""
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(handle))
        except self._nvml.NVMLError:
            return list(self._devices)
        return [d for d in self._devices if d.uuid == uuid]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._event_wait_ms / 1000)
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

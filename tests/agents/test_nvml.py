"""The real NVML backend against a fake pynvml module: mapping, errors and health rules."""

from __future__ import annotations

import inspect
import sys

import pynvml
import pytest

from agents.gpu import HEALTHY, LOST, UNHEALTHY, GpuUnavailable
from agents.nvml import NvmlGpuBackend
from tests.agents.conftest import wait_until
from tests.agents.fake_pynvml import FakeGpu, FakePynvml

UUID0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
UUID1 = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"


@pytest.fixture
def nvml():
    return FakePynvml(
        [
            FakeGpu(UUID0, memory_used_mib=2048, utilization=97, temperature=61, power_mw=512_345),
            FakeGpu(UUID1),
        ]
    )


@pytest.fixture
def backend(nvml):
    b = NvmlGpuBackend(nvml, event_wait_ms=20)
    yield b
    b.close()


def health(backend):
    return [(g.health, g.health_reason) for g in backend.inventory()]


def test_fake_pynvml_mirrors_the_real_signatures():
    for name, fn in inspect.getmembers(FakePynvml, inspect.isfunction):
        if name.startswith("nvml"):
            fake = list(inspect.signature(fn).parameters)[1:]  # without self
            assert fake == list(inspect.signature(getattr(pynvml, name)).parameters), name


def test_inventory_maps_nvml_readings(backend):
    gpu = backend.inventory()[0]
    assert gpu.to_json() == {
        "index": 0,
        "uuid": UUID0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "memory_used_mib": 2048,
        "utilization_pct": 97,
        "temperature_c": 61,
        "power_w": 512.3,
        "health": "healthy",
        "health_reason": "",
    }
    assert len(backend.inventory()) == 2


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            "NVML_ERROR_LIBRARY_NOT_FOUND",
            "libnvidia-ml.so.1 not found — is the NVIDIA driver installed?",
        ),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "driver is not loaded"),
        ("NVML_ERROR_NO_PERMISSION", "no permission"),
        ("NVML_ERROR_UNKNOWN", "NVML unavailable: Unknown Error"),
    ],
)
def test_nvml_failing_to_initialise_is_one_clear_error(nvml, error, message):
    nvml.init_error = getattr(pynvml, error)
    with pytest.raises(GpuUnavailable, match=message) as caught:
        NvmlGpuBackend(nvml)
    assert "--nvml fake" in str(caught.value)


def test_real_pynvml_without_a_driver_gives_the_clear_error():
    try:
        NvmlGpuBackend().close()
    except GpuUnavailable as exc:
        assert "NVML unavailable" in str(exc)
    else:
        pytest.skip("this machine has a working NVIDIA driver")


def test_missing_pynvml_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(GpuUnavailable, match="nvidia-ml-py package"):
        NvmlGpuBackend()


def test_unsupported_readings_are_none_and_the_gpu_stays_healthy(nvml, backend):
    nvml.gpus[1].unsupported = {"utilization", "power", "ecc", "temperature"}
    gpu = backend.inventory()[1]
    assert (gpu.utilization_pct, gpu.power_w, gpu.temperature_c) == (None, None, None)
    assert gpu.health == HEALTHY


def test_gpu_is_lost_marks_it_lost_and_stays_lost(nvml, backend):
    nvml.gpus[1].lost = True
    gpu = backend.inventory()[1]
    assert (gpu.health, gpu.health_reason, gpu.memory_used_mib) == (LOST, "GPU is lost", None)
    assert gpu.uuid == UUID1  # still reported, so the portal keeps the row
    nvml.gpus[1].lost = False
    assert backend.inventory()[1].health == LOST


def test_uncorrected_ecc_errors_make_the_gpu_unhealthy(nvml, backend):
    nvml.gpus[0].ecc_uncorrected = 2
    assert health(backend)[0] == (UNHEALTHY, "uncorrected ECC errors: 2")


def test_xid_event_makes_only_that_gpu_unhealthy(nvml, backend):
    backend.start()
    assert backend.xid_events == {0: True, 1: True}
    assert nvml.registered == {
        0: nvml.nvmlEventTypeXidCriticalError,
        1: nvml.nvmlEventTypeXidCriticalError,
    }
    nvml.emit_xid(1, 79)
    wait_until(lambda: health(backend)[1] == (UNHEALTHY, "XID 79"), 5, "XID 79")
    assert health(backend)[0] == (HEALTHY, "")


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_xids_leave_the_gpu_healthy(nvml, backend, xid):
    backend.start()
    nvml.emit_xid(0, xid)
    nvml.emit_xid(1, 48)  # a real fault after it proves the benign one was processed
    wait_until(lambda: health(backend)[1][0] == UNHEALTHY, 5, "XID 48")
    assert health(backend)[0] == (HEALTHY, "")


def test_xid_on_a_device_nvml_cannot_name_marks_all_gpus(nvml, backend):
    backend.start()
    nvml.emit_xid(None, 79)
    wait_until(lambda: all(h == (UNHEALTHY, "XID 79") for h in health(backend)), 5, "all unhealthy")


def test_gpu_without_event_support_stays_healthy(nvml):
    nvml.gpus[1].events_supported = False
    backend = NvmlGpuBackend(nvml, event_wait_ms=20)
    backend.start()
    assert backend.xid_events == {0: True, 1: False}
    assert health(backend)[1] == (HEALTHY, "")
    backend.close()


def test_failing_event_wait_marks_all_unhealthy_once_and_stops_watching(nvml, backend):
    nvml.wait_error = pynvml.NVML_ERROR_UNKNOWN
    backend.start()
    wait_until(lambda: not backend._thread.is_alive(), 5, "watcher to stop")
    assert all(h[0] == UNHEALTHY and "event wait failed" in h[1] for h in health(backend))
    assert nvml.freed == 1


def test_close_stops_the_watcher_and_shuts_nvml_down(nvml):
    backend = NvmlGpuBackend(nvml, event_wait_ms=20)
    backend.start()
    backend.close()
    assert not backend._thread.is_alive()
    assert nvml.shut_down and nvml.freed == 1


def test_gpu_lost_at_discovery_is_left_out(nvml):
    nvml.gpus[0].lost = True
    backend = NvmlGpuBackend(nvml)
    assert [g.uuid for g in backend.inventory()] == [UUID1]

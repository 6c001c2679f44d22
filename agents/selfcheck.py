"""Check a real GPU node end to end: NVML inventory and health, then one worker on a GPU's UUID.

Run by ``bench/gpu_check.sh`` (``python -m agents.selfcheck``). Prints one JSON
report on stdout and exits 1 if anything failed. Needs only the standard
library and nvidia-ml-py, so it runs on a bare GPU machine.

The worker is a small Python probe started by the process runtime with
``CUDA_VISIBLE_DEVICES`` set to one GPU UUID. Through the CUDA driver API
(libcuda, part of the driver) it lists the devices it can see: exactly that
one GPU proves CUDA accepts the UUID form the agent uses.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents.gpu import HEALTHY, GpuUnavailable
from agents.nvml import NvmlGpuBackend
from agents.runtimes.process import ProcessRuntime
from agents.workers import WorkerSpec

PROBE_MARK = "BERTH_PROBE "
PROBE = r"""
import ctypes, json, os
out = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "MASTER_ADDR")}
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    count = ctypes.c_int(0)
    if rc == 0:
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    uuids = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = (ctypes.c_ubyte * 16)()
        cuda.cuDeviceGetUuid(raw, dev)
        h = bytes(raw).hex()
        uuids.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    out["cuda_init"] = rc
    out["cuda_devices"] = uuids
except OSError as exc:
    out["cuda_error"] = str(exc)
print("BERTH_PROBE " + json.dumps(out), flush=True)
"""


def check_gpus(backend: NvmlGpuBackend, report: dict[str, Any]) -> list[Any]:
    gpus = backend.inventory()
    report["gpus"] = [gpu.to_json() for gpu in gpus]
    report["xid_events_registered"] = {str(k): v for k, v in backend.xid_events.items()}
    if not gpus:
        report["errors"].append("NVML reports no GPUs")
    for gpu in gpus:
        if gpu.health != HEALTHY:
            report["errors"].append(f"GPU {gpu.index} is {gpu.health}: {gpu.health_reason}")
    return gpus


def run_probe(uuid: str, state_dir: Path, timeout_s: float) -> dict[str, Any]:
    """Start the probe through the process runtime and wait for its exit."""
    runtime = ProcessRuntime(state_dir)
    spec = WorkerSpec(
        key="0.0.0",
        job_id=0,
        attempt=0,
        rank=0,
        world_size=1,
        command=(sys.executable, "-c", PROBE),
        gpu_uuids=(uuid,),
        master_addr="127.0.0.1",
        master_port=29500,
    )
    runtime.start(spec)
    deadline = time.monotonic() + timeout_s
    status = runtime.poll()[0]
    while status.live and time.monotonic() < deadline:
        time.sleep(0.1)
        status = runtime.poll()[0]
    return {
        "state": status.state,
        "exit_code": status.exit_code,
        "log_tail": runtime.log_tail(spec.key),
    }


def judge_probe(worker: dict[str, Any], uuid: str, report: dict[str, Any]) -> None:
    if worker["exit_code"] != 0:
        report["errors"].append(
            f"probe worker ended {worker['state']} with exit code {worker['exit_code']}"
        )
        return
    line = next((ln for ln in worker["log_tail"].splitlines() if ln.startswith(PROBE_MARK)), None)
    if line is None:
        report["errors"].append("probe printed no result")
        return
    probe = json.loads(line[len(PROBE_MARK) :])
    worker["probe"] = probe
    if probe.get("CUDA_VISIBLE_DEVICES") != uuid:
        report["errors"].append(
            f"CUDA_VISIBLE_DEVICES was {probe.get('CUDA_VISIBLE_DEVICES')!r}, not {uuid}"
        )
    if "cuda_error" in probe:
        report["warnings"].append(
            f"libcuda not loadable, CUDA visibility not checked: {probe['cuda_error']}"
        )
    elif probe.get("cuda_devices") != [uuid]:
        report["errors"].append(
            f"CUDA saw {probe.get('cuda_devices')} (cuInit {probe.get('cuda_init')}), not [{uuid}]"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.selfcheck", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the probe worker"
    )
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"ok": False, "gpus": [], "worker": None, "errors": [], "warnings": []}
    try:
        backend = NvmlGpuBackend()
    except GpuUnavailable as exc:
        print(f"gpu check: {exc}", file=sys.stderr)
        report["errors"].append(str(exc))
        print(json.dumps(report, indent=2))
        return 1
    try:
        backend.start()
        time.sleep(1.0)  # let the XID watcher register and pick up anything pending
        gpus = check_gpus(backend, report)
        if gpus:
            with tempfile.TemporaryDirectory(prefix="berth-gpu-check-") as tmp:
                report["worker"] = run_probe(gpus[0].uuid, Path(tmp), args.timeout)
            judge_probe(report["worker"], gpus[0].uuid, report)
    finally:
        backend.close()
    report["ok"] = not report["errors"]
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""CPU a trivial worker costs the node in the process runtime: start (shim ready), exit
seen (on_exit), list, forget — one worker at a time, the command `true`.

    .venv/bin/python bench/bench_worker_start.py [N]

Prints the agent's own CPU and its children's (the shims and what they start) per worker,
from getrusage. No portal, no database: the node's share of a job, measured alone.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.runtimes.process import ProcessRuntime  # noqa: E402
from agents.workers import WorkerSpec  # noqa: E402


def spec(key: str) -> WorkerSpec:
    return WorkerSpec.from_json(
        {
            "key": key,
            "job_id": int(key.split(".")[0]),
            "attempt": 0,
            "rank": 0,
            "world_size": 1,
            "gpu_uuids": ["GPU-x"],
            "image": "none",
            "command": ["true"],
            "env": {},
            "master_addr": "localhost",
            "master_port": 29500,
        }
    )


def cpu() -> tuple[float, float]:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as d:
        rt = ProcessRuntime(Path(d), base_env={"PATH": os.environ["PATH"]})
        done = threading.Semaphore(0)
        rt.on_exit = lambda key: done.release()
        # A lease far in the future, in both clocks (the shim polls it while the command runs).
        (Path(d) / "lease.json").write_text(
            '{"valid_until": 9e12, "valid_until_uptime_cs": 999999999999}'
        )
        own0, kids0 = cpu()
        t0 = time.time()
        for i in range(1, n + 1):
            key = f"{i}.0.0"
            rt.start(spec(key))
            done.acquire()
            rt.list()
            rt.forget(key)
        own1, kids1 = cpu()
        wall = time.time() - t0
    agent, shims = 1000 * (own1 - own0) / n, 1000 * (kids1 - kids0) / n
    print(
        f"{n} workers: agent {agent:.2f} ms + shims {shims:.2f} ms = {agent + shims:.2f} ms "
        f"of CPU a worker; {n / wall:.0f} workers/s one at a time"
    )


if __name__ == "__main__":
    main()

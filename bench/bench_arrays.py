"""Benchmark a job-array submission: one POST /api/v1/arrays/ of 10,000 tasks, over
HTTP to gunicorn on PostgreSQL, authenticated, validated and committed before its 201.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench_arrays \\
    REDIS_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/bench_arrays.py [--tasks 10000] [--rounds 7]

Each round submits one array (`0-9999%8`, `{index}` in the name and the command) and,
alternating with it, the same 10,000 jobs as two bulk requests of 5,000 (the bulk
API's largest), so the two are measured side by side on a noisy machine. Between
rounds the pending jobs are moved on (to `succeeded`), as a running cluster keeps its
queues short. Reports the wall time of each request from the first byte sent to the
last byte of the 201 read, and the median and spread.

Target (issue 17): a 10,000-task array submits in ≤ 2 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench_arrays")

from django.db import connection  # noqa: E402

from bench.bench_api import JOB, ensure_database, machine, populate, start_server  # noqa: E402

TASK = JOB | {
    "name": "shard-{index}",
    "command": ["python", "eval.py", "--shard", "{index}"],
    "workers": 1,
    "gpus_per_worker": 1,
}


def post(port: int, token: str, path: str, body: bytes) -> tuple[int, float, dict]:
    """POST and read the whole answer; (status, seconds, JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.perf_counter()
    conn.request("POST", path, body, headers)
    response = conn.getresponse()
    data = response.read()
    took = time.perf_counter() - start
    conn.close()
    return response.status, took, json.loads(data)


def drain() -> None:
    with connection.cursor() as cur:
        cur.execute("UPDATE core_job SET state = 'succeeded' WHERE state = 'pending'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8793)
    args = parser.parse_args()

    ensure_database()
    (token,) = populate(1)
    print(machine())
    server = start_server(args.port, args.workers, 1, "gunicorn", "sync")
    array = json.dumps(TASK | {"array": f"0-{args.tasks - 1}%8"}).encode()
    half = args.tasks // 2
    bulks = [
        json.dumps({"jobs": [JOB | {"name": f"sweep-{i}"} for i in range(k, k + half)]}).encode()
        for k in (0, half)
    ]
    times: dict[str, list[float]] = {"array": [], "bulk": []}
    try:
        post(args.port, token, "/api/v1/arrays/", json.dumps(TASK | {"array": "0-9"}).encode())
        for round_ in range(args.rounds):
            drain()
            status, took, body = post(args.port, token, "/api/v1/arrays/", array)
            assert status == 201 and body["size"] == args.tasks, (status, body)
            times["array"].append(took)
            drain()
            total = 0.0
            for bulk in bulks:
                status, took, body = post(args.port, token, "/api/v1/jobs/bulk/", bulk)
                assert status == 201, (status, body)
                total += took
            times["bulk"].append(total)
            print(
                f"round {round_ + 1}: array {times['array'][-1]:.3f} s, bulk 2×{half} {total:.3f} s"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    for what, values in times.items():
        print(
            f"{what}: median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
            f"max {max(values):.3f} s over {len(values)} rounds ({args.tasks:,} jobs)"
        )
    ratio = statistics.median(times["array"]) / statistics.median(times["bulk"])
    print(f"array / bulk (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()

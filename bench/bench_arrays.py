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
last byte of the 201 read, and the CPU it cost (the gunicorn workers and their
PostgreSQL sessions, from /proc): on a shared machine the wall time is mostly the
neighbours', the CPU time much less so, and on an idle one the request's wall time is
about its CPU time (one worker, then one PostgreSQL session, one after the other).

    .venv/bin/python bench/bench_arrays.py --core [--rounds 7]

measures the scheduling core instead (no database): bench/bench_core.py's 10,000
pending jobs on 1,000 nodes, as plain jobs and, alternating, as the tasks of 100 arrays
of 100 with `%8` (the same jobs, each team's own), so the `%N` step's cost shows.

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

from bench.bench_api import (  # noqa: E402
    JOB,
    ensure_database,
    machine,
    populate,
    server_cpu,
    start_server,
)

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


def core(rounds: int) -> None:
    """The pass over 10,000 pending jobs, plain and as array tasks, alternating."""
    from dataclasses import replace

    from bench.bench_core import build_snapshot, time_pass

    plain = build_snapshot(10_000)
    by_team: dict[str, list] = {}
    for job in plain.pending:
        by_team.setdefault(job.team, []).append(job)
    tasks, ids = [], {}
    for team_jobs in by_team.values():  # arrays of 100 within a team
        for i, job in enumerate(team_jobs):
            array_id = ids.setdefault((job.team, i // 100), len(ids) + 1)
            tasks.append(replace(job, array_id=array_id, array_limit=8))
    arrays = replace(plain, pending=tuple(tasks))
    cpu: dict[str, list[float]] = {"plain": [], "arrays": []}
    for _ in range(rounds):
        for name, snapshot in (("plain", plain), ("arrays", arrays)):
            _, _, took, plan = time_pass(snapshot, 1)
            cpu[name].append(took)
    held = int(plan.stats["array_limit"])
    for name, values in cpu.items():
        print(
            f"core, {name}: CPU median {statistics.median(values):.3f} s, min {min(values):.3f} s"
        )
    ratio = statistics.median(cpu["arrays"]) / statistics.median(cpu["plain"])
    print(f"arrays / plain (medians): {ratio:.2f}; {held:,} tasks held by their %8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8793)
    parser.add_argument("--core", action="store_true", help="the scheduling core, no database")
    args = parser.parse_args()
    if args.core:
        return core(args.rounds)

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
    cpu: dict[str, list[float]] = {"array": [], "bulk": []}

    def timed(what: str, path: str, bodies: list[bytes]) -> None:
        """POST the bodies one after the other; record their wall and CPU time."""
        drain()
        before, wall = server_cpu(server.pid), 0.0
        for body in bodies:
            status, took, answer = post(args.port, token, path, body)
            assert status == 201, (status, answer)
            wall += took
        after = server_cpu(server.pid)
        times[what].append(wall)
        cpu[what].append(sum(after[k] - before[k] for k in after))

    try:
        post(args.port, token, "/api/v1/arrays/", json.dumps(TASK | {"array": "0-9"}).encode())
        for round_ in range(args.rounds):
            timed("array", "/api/v1/arrays/", [array])
            timed("bulk", "/api/v1/jobs/bulk/", bulks)
            print(
                f"round {round_ + 1}: array {times['array'][-1]:.3f} s "
                f"(CPU {cpu['array'][-1]:.3f} s), bulk 2×{half} {times['bulk'][-1]:.3f} s "
                f"(CPU {cpu['bulk'][-1]:.3f} s)"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    for what, values in times.items():
        print(
            f"{what}: wall median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
            f"max {max(values):.3f} s; CPU median {statistics.median(cpu[what]):.3f} s, "
            f"min {min(cpu[what]):.3f} s; {len(values)} rounds of {args.tasks:,} jobs"
        )
    for name, series in (("wall", times), ("CPU", cpu)):
        ratio = statistics.median(series["array"]) / statistics.median(series["bulk"])
        print(f"array / bulk, {name} (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()

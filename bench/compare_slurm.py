"""The measuring half of bench/compare_slurm.sh (which installs, configures, starts
and stops the private Slurm): the three Slurm figures, and the side-by-side table.

    python bench/compare_slurm.py slurm --json OUT --client BIN --pids PID,... \\
        [--duration 20] [--clients 16] [--idle-jobs 50] [--backlog-jobs 2000]
    python bench/compare_slurm.py table --slurm S.json [--api A.json] [--e2e E.json]

`slurm` measures, in this order, on a cluster of 8 `slurmd -N` × 8 fake GPUs:

1. submit→running latency on an idle cluster: jobs submitted one at a time by a
   long-running libslurm client (bench/slurm_submit.c), each writing its own start
   time (`date +%s.%N`) as its first command; latency = that time − the time just
   before the submit call; the next job is submitted after the previous started;
2. trivial 1-GPU jobs (`true`) executed to completion per second with a backlog:
   the partition is set DOWN, the backlog submitted, the partition set UP, and the
   clock runs until the jobcomp log has a line for every backlog job;
3. single submissions per second from long-running clients: `--clients` processes,
   each a closed loop of slurm_submit_batch_job into a DOWN partition (accepted,
   stored, never run: the stand-in for bench_api.py's drainer), `--duration`
   seconds after 3 s of warm-up; server CPU (slurmctld, munged, the slurmd) and
   client CPU per submission read from /proc and getrusage.

Standard library only: it runs with any Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its reaped children; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, stdout=subprocess.DEVNULL)


def count_active(partition: str) -> int:
    out = subprocess.run(
        ["squeue", "-h", "-p", partition, "-t", "PD,R,CG,CF", "-o", "%i"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return len(out.split())


def jobcomp_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def measure_idle(client: str, partition: str, jobs: int, gap: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="slurm-idle-") as d:
        os.chmod(d, 0o777)
        out = subprocess.run(
            [client, "idle", partition, str(jobs), d, str(gap)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        latencies, missing = [], 0
        for line in out.split("\n"):
            if not line.strip():
                continue
            job_id, submitted = line.split()
            try:
                started = float(Path(d, f"{job_id}.start").read_text())
            except (OSError, ValueError):
                missing += 1
                continue
            latencies.append(started - float(submitted))
    return {
        "jobs": jobs,
        "started": len(latencies),
        "not_started": missing,
        "submit_to_running_s": {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99)},
        "max_s": max(latencies, default=float("nan")),
    }


def measure_backlog(client: str, partition: str, jobs: int, gpus: int, jobcomp: Path) -> dict:
    scontrol("update", f"PartitionName={partition}", "State=DOWN")
    out = subprocess.run(
        [client, "batch", partition, str(jobs)], check=True, capture_output=True, text=True
    ).stdout.split()
    ok, err, submit_s = int(out[0]), int(out[1]), float(out[2])
    done_before = jobcomp_lines(jobcomp)
    start = time.perf_counter()
    scontrol("update", f"PartitionName={partition}", "State=UP")
    deadline = start + max(300.0, jobs / 2.0)
    while jobcomp_lines(jobcomp) - done_before < ok and time.perf_counter() < deadline:
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    completed = jobcomp_lines(jobcomp) - done_before
    return {
        "gpus": gpus,
        "jobs": ok,
        "submit_errors": err,
        "submitted_in_s": submit_s,
        "completed": completed,
        "still_active": count_active(partition),
        "seconds": seconds,
        "jobs_completed_per_s": completed / seconds,
    }


def measure_rate(
    client: str, partition: str, clients: int, duration: float, pids: list[int]
) -> dict:
    warmup = 3.0
    start = time.time() + 0.5
    measure_from, until = start + warmup, start + warmup + duration
    with tempfile.TemporaryDirectory(prefix="slurm-rate-") as d:
        procs = [
            subprocess.Popen(
                [client, "rate", partition, f"{measure_from:.6f}", f"{until:.6f}", f"{d}/{i}"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(clients)
        ]
        time.sleep(max(0.0, measure_from - time.time()))
        before = sum(proc_cpu(p) for p in pids)
        time.sleep(max(0.0, until - time.time()))
        after = sum(proc_cpu(p) for p in pids)
        ok = err = 0
        client_cpu = 0.0
        for p in procs:
            o, e, c = p.communicate(timeout=60)[0].split()
            ok, err, client_cpu = ok + int(o), err + int(e), client_cpu + float(c)
        latencies = [
            int(x) / 1e6 for i in range(clients) for x in Path(d, str(i)).read_text().split()
        ]
    subprocess.run(["scancel", "-p", partition], check=False)
    return {
        "clients": clients,
        "seconds": duration,
        "ok": ok,
        "errors": err,
        "per_s": ok / duration,
        "latency_ms": {"p50": 1000 * pct(latencies, 0.5), "p99": 1000 * pct(latencies, 0.99)},
        "server_cpu_ms": 1000 * (after - before) / max(1, ok),
        "client_cpu_ms": 1000 * client_cpu / max(1, ok),
    }


def slurm_main(args: argparse.Namespace) -> None:
    pids = [int(p) for p in args.pids.split(",") if p]
    jobcomp = Path(args.jobcomp)
    result = {
        "version": subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()
    }
    print(f"slurm: {result['version']}; {args.nodes} nodes × {args.gpus_per_node} GPUs", flush=True)
    gpus = args.nodes * args.gpus_per_node
    if args.idle_jobs:
        idle = measure_idle(args.client, args.partition, args.idle_jobs, args.gap)
        result["idle"] = idle
        print(
            f"slurm idle: {idle['started']}/{idle['jobs']} jobs; submit→running "
            f"p50 {idle['submit_to_running_s']['p50']:.3f} s, "
            f"p99 {idle['submit_to_running_s']['p99']:.3f} s, max {idle['max_s']:.3f} s",
            flush=True,
        )
    if args.backlog_jobs:
        backlog = measure_backlog(args.client, args.partition, args.backlog_jobs, gpus, jobcomp)
        result["backlog"] = backlog
        print(
            f"slurm backlog: {backlog['completed']}/{backlog['jobs']} jobs on {gpus} GPUs "
            f"in {backlog['seconds']:.1f} s = {backlog['jobs_completed_per_s']:.1f} jobs/s "
            f"(submitted in {backlog['submitted_in_s']:.1f} s, "
            f"{backlog['submit_errors']} errors, {backlog['still_active']} left)",
            flush=True,
        )
    if args.duration:
        rate = measure_rate(args.client, args.sink, args.clients, args.duration, pids)
        result["submit"] = rate
        print(
            f"slurm single submit, {rate['clients']} clients: {rate['per_s']:,.0f}/s over "
            f"{rate['seconds']:g} s ({rate['errors']} errors); p50 {rate['latency_ms']['p50']:.1f} ms, "
            f"p99 {rate['latency_ms']['p99']:.1f} ms; CPU per submission: server "
            f"(slurmctld, munged, slurmd) {rate['server_cpu_ms']:.2f} ms, "
            f"clients {rate['client_cpu_ms']:.2f} ms",
            flush=True,
        )
    Path(args.json).write_text(json.dumps(result, indent=2))


def _load(path: str | None) -> dict:
    if not path or not Path(path).exists():
        return {}
    return json.loads(Path(path).read_text())


def _single_run(api: dict) -> dict:
    for run in api.get("runs", []):
        if run.get("kind") == "single":
            return run
    return {}


def table_main(args: argparse.Namespace) -> None:
    slurm, api_doc, e2e = _load(args.slurm), _load(args.api), _load(args.e2e)
    api = _single_run(api_doc)
    sub, idle, backlog = slurm.get("submit", {}), slurm.get("idle", {}), slurm.get("backlog", {})
    b_idle, b_backlog = e2e.get("idle", {}), e2e.get("backlog", {})
    b_cpu = api.get("cpu_ms", {})
    b_server = (b_cpu.get("web server", 0) + b_cpu.get("postgres", 0)) if b_cpu else None

    def get(d: dict, *keys):
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d

    # (metric, Slurm, Berth, format, higher is better)
    rows = [
        ("single submissions/s, long-running clients", get(sub, "per_s"), api.get("per_s"), "{:,.0f}", True),
        ("  server CPU per submission, ms", get(sub, "server_cpu_ms"), b_server, "{:.2f}", False),
        ("  submission latency p99, ms", get(sub, "latency_ms", "p99"), get(api, "latency_ms", "p99"), "{:.1f}", False),
        (f"trivial 1-GPU jobs completed/s, {get(backlog, 'gpus') or 64} GPUs, backlog",
         get(backlog, "jobs_completed_per_s"), get(b_backlog, "jobs_completed_per_s"), "{:.1f}", True),
        ("submit→running p50 (idle), s", get(idle, "submit_to_running_s", "p50"),
         get(b_idle, "submit_to_running_s", "p50"), "{:.3f}", False),
        ("submit→running p99 (idle), s", get(idle, "submit_to_running_s", "p99"),
         get(b_idle, "submit_to_running_s", "p99"), "{:.3f}", False),
    ]  # fmt: skip
    lines = [
        "| metric | Slurm | Berth | ratio (≥ 1.0: Berth at least as good) |",
        "| --- | --- | --- | --- |",
    ]
    for name, s, b, fmt, higher in rows:
        ratio = "n/a"
        if s and b:
            ratio = f"{(b / s) if higher else (s / b):.2f}×"
        lines.append(
            f"| {name} | {fmt.format(s) if s is not None else 'not measured'} | "
            f"{fmt.format(b) if b is not None else 'not measured'} | {ratio} |"
        )
    print("\n".join(lines))
    if sub and api:
        print(
            f"\nclients: Slurm {sub['clients']} libslurm processes; Berth {api_doc.get('clients')} "
            f"raw-socket HTTP processes ({api_doc.get('server')}, {api_doc.get('workers')} workers × "
            f"{api_doc.get('threads')} threads)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("slurm", help="measure the running private Slurm")
    s.add_argument("--json", required=True, help="write the figures here")
    s.add_argument("--client", required=True, help="the built bench/slurm_submit.c")
    s.add_argument(
        "--pids", default="", help="server pids whose CPU counts (slurmctld, munged, slurmd)"
    )
    s.add_argument("--jobcomp", required=True, help="slurm.conf's JobCompLoc (jobcomp/filetxt)")
    s.add_argument("--partition", default="gpu", help="where jobs run")
    s.add_argument("--sink", default="sink", help="a DOWN partition: submissions stay pending")
    s.add_argument("--nodes", type=int, default=8)
    s.add_argument("--gpus-per-node", type=int, default=8)
    s.add_argument(
        "--duration", type=float, default=20.0, help="measured seconds of submissions (0: skip)"
    )
    s.add_argument(
        "--clients", type=int, default=16, help="concurrent long-running client processes"
    )
    s.add_argument("--idle-jobs", type=int, default=50, help="0: skip")
    s.add_argument(
        "--gap", type=float, default=0.5, help="idle: seconds between a start and the next submit"
    )
    s.add_argument("--backlog-jobs", type=int, default=2000, help="0: skip")
    t = commands.add_parser("table", help="print the side-by-side table")
    t.add_argument("--slurm", required=True)
    t.add_argument("--api", help="bench_api.py --json output")
    t.add_argument("--e2e", help="bench_e2e.py --json output")
    args = parser.parse_args()
    {"slurm": slurm_main, "table": table_main}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

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
   client CPU per submission read from /proc and getrusage. The jobs stay there:
   compare_slurm.sh restarts the controller (-c) after each round.

Standard library only: it runs with any Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def capacity(server_ms: float | None, client_ms: float | None) -> float | None:
    """Submissions/s this machine's cores would sustain at this CPU cost a submission
    (server and clients) with nothing else running: the figure a shared machine's
    neighbours move least."""
    if not server_ms:
        return None
    return (os.cpu_count() or 1) * 1000 / (server_ms + (client_ms or 0))


def _cell(values: list[float], fmt: str) -> tuple[str, float | None]:
    """'median (min–max)' of a metric over the rounds, and the median."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return "not measured", None
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    if n == 1:
        return fmt.format(median), median
    return f"{fmt.format(median)} ({fmt.format(values[0])}–{fmt.format(values[-1])})", median


def table_main(args: argparse.Namespace) -> None:
    """Slurm's and Berth's figures side by side; where there are several rounds
    (submissions), each cell is the median (min–max) and the ratio is of medians."""
    slurms = [_load(p) for p in args.slurm]
    apis = [_load(p) for p in args.api or []]
    e2e = _load(args.e2e)
    subs = [d["submit"] for d in slurms if d.get("submit")]
    idle = next((d["idle"] for d in slurms if d.get("idle")), {})
    backlog = next((d["backlog"] for d in slurms if d.get("backlog")), {})
    singles = [r for d in apis for r in d.get("runs", []) if r.get("kind") == "single"]
    b_server = [_get(r, "cpu_ms", "web server") + _get(r, "cpu_ms", "postgres") for r in singles]

    # (metric, Slurm's values, Berth's values, format, higher is better)
    rows = [
        ("single submissions/s, long-running clients",
         [s["per_s"] for s in subs], [r["per_s"] for r in singles], "{:,.0f}", True),
        ("  server CPU per submission, ms",
         [s["server_cpu_ms"] for s in subs], b_server, "{:.2f}", False),
        (f"  what {os.cpu_count()} idle cores sustain at that CPU cost (clients' too), /s",
         [capacity(s["server_cpu_ms"], s["client_cpu_ms"]) for s in subs],
         [capacity(b, _get(r, "cpu_ms", "clients")) for b, r in zip(b_server, singles, strict=True)],
         "{:,.0f}", True),
        ("  submission latency p99, ms",
         [_get(s, "latency_ms", "p99") for s in subs],
         [_get(r, "latency_ms", "p99") for r in singles], "{:.1f}", False),
        (f"trivial 1-GPU jobs completed/s, {_get(backlog, 'gpus') or 64} GPUs, backlog",
         [_get(backlog, "jobs_completed_per_s")],
         [_get(e2e, "backlog", "jobs_completed_per_s")], "{:.1f}", True),
        ("submit→running p50, idle cluster, s", [_get(idle, "submit_to_running_s", "p50")],
         [_get(e2e, "idle", "submit_to_running_s", "p50")], "{:.3f}", False),
        ("submit→running p99, idle cluster, s", [_get(idle, "submit_to_running_s", "p99")],
         [_get(e2e, "idle", "submit_to_running_s", "p99")], "{:.3f}", False),
    ]  # fmt: skip
    lines = [
        "| metric | Slurm | Berth | ratio (≥ 1.0: Berth at least as good) |",
        "| --- | --- | --- | --- |",
    ]
    for name, s_values, b_values, fmt, higher in rows:
        (s_text, s), (b_text, b) = _cell(s_values, fmt), _cell(b_values, fmt)
        ratio = f"{(b / s) if higher else (s / b):.2f}×" if s and b else "n/a"
        lines.append(f"| {name} | {s_text} | {b_text} | {ratio} |")
    print("\n".join(lines))
    notes = []
    if subs:
        notes.append(
            f"Slurm: {subs[0]['clients']} libslurm client processes, {len(subs)} round(s) of "
            f"{subs[0]['seconds']:g} s; server CPU = slurmctld + munged + the slurmd."
        )
    if singles:
        a = apis[0]
        notes.append(
            f"Berth: {a.get('clients')} raw-socket HTTP client processes, {a.get('server')} "
            f"{a.get('workers')} workers × {a.get('threads')} threads, {len(singles)} round(s); "
            "server CPU = web server + its PostgreSQL sessions."
        )
    for i, sub in enumerate(subs):
        if sub.get("errors"):
            notes.append(
                f"WARNING: Slurm's submission round {i + 1} had {sub['errors']} failed submissions "
                f"(p99 {sub['latency_ms']['p99']:.0f} ms): the controller stalled; see its log."
            )
    for i, run in enumerate(singles):
        failed = sum(v for k, v in run.get("statuses", {}).items() if not k.startswith("2"))
        if failed:
            notes.append(f"WARNING: Berth's round {i + 1} had {failed} failed submissions.")
    if idle:
        notes.append(
            f"idle: {idle['started']} of {idle['jobs']} jobs; backlog: {backlog.get('jobs')} jobs."
        )
    if notes:
        print("\n" + "\n".join(notes))


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
    t.add_argument("--slurm", action="append", required=True, help="repeatable")
    t.add_argument("--api", action="append", help="bench_api.py --json output; repeatable")
    t.add_argument("--e2e", help="bench_e2e.py --json output")
    args = parser.parse_args()
    # A TERM (compare_slurm.sh interrupted) unwinds, so the temp dirs go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    {"slurm": slurm_main, "table": table_main}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

"""Scan the whole Philly trace in two-week windows: where does fair share do worst?

    .venv/bin/python bench/scan_traces.py                          # every window, loads 0.7 and 0.8
    .venv/bin/python bench/scan_traces.py --load 0.8 --windows 2,5 --policy fairshare \\
        --reuse docs/simulation/scan.json --json /tmp/scan.json --worst 5

Each window of `--weeks` weeks (from the trace's first Monday) is replayed on
clusters sized so that its mean GPU demand (GPU-seconds submitted / window
length) is `--load` of the GPUs (or on fixed `--gpus`), under each policy, in
one process: the trace is read once. The table has one row per window and
size; the checks are the scheduling-quality goal of ../shared/DESIGN.md, fair
share against FIFO and FIFO + backfill:

    mean   fair share's mean wait <= 1/2 of FIFO's
    p99    its p99 wait <= both FIFO's and FIFO + backfill's
    max    its longest wait <= both
    util   its utilization (arrivals) >= both (to 0.1 point)
    jain   its Jain index >= 0.9

then the windows where fair share is worst on tail and fairness. `--reuse`
takes the runs of an earlier JSON (same window, GPUs and policy) instead of
replaying them, except those of the policies named with --policy: FIFO and
FIFO + backfill need not be replayed to check a fair-share change. `--worst N` prints fair share's N longest waits per run
(team, gang, run time, preemptions, the team's nominal quota) to find causes.
`--jobs N` replays in N processes (default 1: the machine is shared).
`--compare BEFORE AFTER` prints fair share of two --json outputs side by side
with FIFO and FIFO + backfill (from AFTER), without replaying.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler import PolicyConfig  # noqa: E402
from scheduler.model import AGE_WEIGHT, BACKFILL_RESERVATIONS, MAX_AGE_S, MAX_WAIT_S  # noqa: E402
from scheduler.sim import POLICY_NAMES, SimConfig, Simulator  # noqa: E402
from scheduler.sim.cluster import homogeneous, quota_teams  # noqa: E402
from scheduler.sim.results import HEADLINE_KEYS, duration, summarize  # noqa: E402
from scheduler.sim.trace import load  # noqa: E402

HERE = Path(__file__).resolve()
# ../shared/traces beside the checkout (a worktree may sit one level deeper).
TRACE = next(
    (
        d / "shared" / "traces" / "philly.csv"
        for d in HERE.parents
        if (d / "shared" / "traces").is_dir()
    ),
    HERE.parents[2] / "shared" / "traces" / "philly.csv",
)
DAY = 86400.0
KEYS = ("jobs", *HEADLINE_KEYS, "reclaim_latency_p99_s", "sim_wall_s")
GPUS_PER_NODE = 8

_JOBS: tuple = ()  # the whole trace, set once per process


def windows(jobs, weeks: int) -> list[tuple[float, float]]:
    """Return [start, end) windows of `weeks` weeks from the Monday before the first job."""
    first = min(j.submitted_at for j in jobs)
    last = max(j.submitted_at for j in jobs)
    day0 = datetime.fromtimestamp(first, UTC).replace(hour=0, minute=0, second=0)
    start = day0.timestamp() - day0.weekday() * DAY
    out, span = [], weeks * 7 * DAY
    while start <= last:
        out.append((start, start + span))
        start += span
    return out


def day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def sizes(jobs, lo: float, hi: float, loads: list[float], gpus: list[int]) -> list[int]:
    """Return cluster sizes in GPUs (whole nodes): fixed, or mean demand / load."""
    if gpus:
        return gpus
    last = min(hi, max(j.submitted_at for j in jobs))
    demand = sum(j.gpus * j.duration for j in jobs) / max(1.0, last - lo)
    out = []
    for share in loads:
        nodes = max(1, round(demand / share / GPUS_PER_NODE))
        out.append(nodes * GPUS_PER_NODE)
    return out


def replay(task: tuple) -> tuple[tuple, dict, list]:
    """Replay one (window, GPUs, policy); return its key, summary figures and worst waits."""
    lo, hi, gpus, policy, worst, extra = task
    jobs = [j for j in _JOBS if lo <= j.submitted_at < hi]
    nodes = homogeneous(gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    jobs = [replace(j, flavor=nodes[0].flavor) for j in jobs]
    teams = quota_teams(jobs, nodes)
    config = SimConfig(policy=PolicyConfig(policy=policy, explain=False, **extra))
    started = time.perf_counter()
    sim = Simulator(jobs, nodes, teams, config).run()
    s = summarize(sim, time.perf_counter() - started).summary
    nominal = {t.name: sum(q.nominal for q in t.quotas.values()) for t in teams}
    done = sorted((r for r in sim.recs.values() if r.finished is not None), key=lambda r: -r.waited)
    top = [
        {
            "id": r.job.id,
            "team": r.job.team,
            "nominal": nominal.get(r.job.team, 0),
            "gpus": r.job.gpus,
            "duration_s": r.job.duration,
            "wait_s": round(r.waited),
            "preempted": r.preempted,
            "submitted": datetime.fromtimestamp(r.job.submitted_at, UTC).strftime("%m-%d %H:%M"),
        }
        for r in done[:worst]
    ]
    return (day(lo), gpus, policy), {k: s.get(k) for k in KEYS}, top


def _init(path: str) -> None:
    global _JOBS
    _JOBS = load(path, "philly").jobs


def check(fs: dict, fifo: dict, fb: dict) -> dict[str, bool]:
    """Return the goal's checks for fair share against FIFO and FIFO + backfill."""
    return {
        "mean": fs["avg_wait_s"] <= 0.5 * fifo["avg_wait_s"],
        "p99": fs["p99_wait_s"] <= min(fifo["p99_wait_s"], fb["p99_wait_s"]),
        "max": fs["max_wait_s"] <= min(fifo["max_wait_s"], fb["max_wait_s"]),
        "util": fs["utilization_arrivals"]
        >= max(fifo["utilization_arrivals"], fb["utilization_arrivals"]) - 0.001,
        "jain": fs["jain_fairness"] >= 0.9,
    }


def report(results: dict[tuple, dict], loads: dict[tuple, float]) -> str:
    """Return the table of every window and size, then the worst windows for fair share."""
    rows, worst = [], []
    heads = ["window", "GPUs", "load", "jobs"]
    for p in POLICY_NAMES:
        heads += [f"{p} mean", "p99", "max"]
    heads += ["FS util", "FS Jain", "FS preempt", "FS lost GPU-h", "reclaim p99", "failed"]
    for key in sorted({(w, g) for w, g, _ in results}):
        runs = {p: results.get((*key, p)) for p in POLICY_NAMES}
        row = [key[0], str(key[1]), f"{loads.get(key, 0):.2f}"]
        row.append(f"{next(r for r in runs.values() if r)['jobs']:,}")
        for p in POLICY_NAMES:
            r = runs[p]
            row += [
                duration(r[k]) if r else "-" for k in ("avg_wait_s", "p99_wait_s", "max_wait_s")
            ]
        fs, fifo, fb = runs["fairshare"], runs["fifo"], runs["fifo-backfill"]
        if fs:
            rl = fs.get("reclaim_latency_p99_s")
            row += [
                f"{fs['utilization_arrivals']:.1%}",
                f"{fs['jain_fairness']:.3f}",
                f"{fs['preemptions']:,}",
                f"{fs['lost_gpu_hours']:,.0f}",
                "-" if rl is None else duration(rl),
            ]
        else:
            row += ["-"] * 5
        if fs and fifo and fb:
            failed = [k for k, ok in check(fs, fifo, fb).items() if not ok]
            row.append(", ".join(failed) or "none")
            worst.append(
                (
                    fs["max_wait_s"] / max(1.0, min(fifo["max_wait_s"], fb["max_wait_s"])),
                    fs["p99_wait_s"] / max(1.0, min(fifo["p99_wait_s"], fb["p99_wait_s"])),
                    fs["jain_fairness"],
                    key,
                )
            )
        else:
            row.append("-")
        rows.append(row)
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if worst:
        lines.append("")
        for label, i, rev in (("max wait / best baseline", 0, True), ("p99", 1, True)):
            top = sorted(worst, key=lambda w: w[i], reverse=rev)[:3]
            text = ", ".join(f"{w[3][0]} {w[3][1]} GPUs {w[i]:.2f}x" for w in top)
            lines.append(f"fair share worst on {label}: {text}")
        top = sorted(worst, key=lambda w: w[2])[:3]
        lines.append(
            "fair share lowest Jain: "
            + ", ".join(f"{w[3][0]} {w[3][1]} GPUs {w[2]:.3f}" for w in top)
        )
    return "\n".join(lines)


def compare(before: dict[tuple, dict], after: dict[tuple, dict]) -> str:
    """Return fair share before and after a change beside FIFO and FIFO + backfill, per run."""
    heads = ["window", "GPUs", "run", "mean", "p99", "max", "util", "Jain", "preempt"]
    heads += ["lost GPU-h", "reclaim p99", "failed"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for w, g in sorted({(w, g) for w, g, p in after if p == "fairshare"}):
        fifo, fb = after.get((w, g, "fifo")), after.get((w, g, "fifo-backfill"))
        runs = [("fifo", fifo), ("fifo-backfill", fb)]
        runs += [("fairshare before", before.get((w, g, "fairshare")))]
        runs.append(("fairshare after", after[(w, g, "fairshare")]))
        for label, r in runs:
            if r is None:
                continue
            failed = "-"
            if label.startswith("fairshare") and fifo and fb:
                failed = ", ".join(k for k, ok in check(r, fifo, fb).items() if not ok) or "none"
            rl = r.get("reclaim_latency_p99_s")
            cells = [w, str(g), label, *(duration(r[k]) for k in ("avg_wait_s", "p99_wait_s"))]
            cells += [duration(r["max_wait_s"]), f"{r['utilization_arrivals']:.1%}"]
            cells += [f"{r['jain_fairness']:.3f}", f"{r['preemptions']:,}"]
            cells += [f"{r['lost_gpu_hours']:,.0f}", "-" if rl is None else duration(rl), failed]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_runs(path: str) -> dict[tuple, dict]:
    """Return (window, GPUs, policy) -> figures from a --json output."""
    runs = json.loads(Path(path).read_text())["runs"]
    return {(r["window"], r["gpus"], r["policy"]): r["figures"] for r in runs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--weeks", type=int, default=2)
    p.add_argument("--load", default="0.7,0.8", help="mean demand / GPUs, comma-separated")
    p.add_argument("--gpus", default="", help="fixed cluster sizes in GPUs instead of --load")
    p.add_argument("--windows", default="", help="window numbers to replay (0-based), e.g. 2,5")
    p.add_argument("--min-jobs", type=int, default=1000, help="skip windows with fewer jobs")
    p.add_argument("--policy", action="append", choices=POLICY_NAMES)
    p.add_argument("--age-weight", type=float, default=AGE_WEIGHT, help="PolicyConfig.age_weight")
    p.add_argument("--max-age", type=float, default=MAX_AGE_S, help="PolicyConfig.max_age, s")
    p.add_argument(
        "--backfill-reservations", type=int, default=BACKFILL_RESERVATIONS, help="per flavor"
    )
    p.add_argument("--reclaim-backoff", action="store_true", help="PolicyConfig.reclaim_backoff")
    p.add_argument("--max-wait", type=float, default=MAX_WAIT_S, help="PolicyConfig.max_wait, s")
    p.add_argument("--half-life", type=float, default=None, help="PolicyConfig.half_life, s")
    p.add_argument("--reuse", help="take runs from this earlier --json output")
    p.add_argument(
        "--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="print fair share before/after"
    )
    p.add_argument("--json", dest="json_out", help="write every run's figures here")
    p.add_argument("--worst", type=int, default=0, help="print fair share's N longest waits")
    p.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    args = p.parse_args()

    _init(args.trace)
    loads = [float(x) for x in args.load.split(",") if x]
    fixed = [int(x) for x in args.gpus.split(",") if x]
    chosen = {int(x) for x in args.windows.split(",") if x}
    policies = args.policy or list(POLICY_NAMES)
    if args.compare:
        print(compare(read_runs(args.compare[0]), read_runs(args.compare[1])))
        return 0
    old = read_runs(args.reuse) if args.reuse else {}
    extra = {
        "age_weight": args.age_weight,
        "max_age": args.max_age,
        "backfill_reservations": args.backfill_reservations,
        "reclaim_backoff": args.reclaim_backoff,
        "max_wait": args.max_wait,
    }
    if args.half_life is not None:
        extra["half_life"] = args.half_life
    tasks, load_of, results = [], {}, {}
    for i, (lo, hi) in enumerate(windows(_JOBS, args.weeks)):
        if chosen and i not in chosen:
            continue
        jobs = [j for j in _JOBS if lo <= j.submitted_at < hi]
        if len(jobs) < max(1, args.min_jobs):
            continue
        last = min(hi, max(j.submitted_at for j in jobs))
        demand = sum(j.gpus * j.duration for j in jobs) / max(1.0, last - lo)
        for gpus in sizes(jobs, lo, hi, loads, fixed):
            load_of[(day(lo), gpus)] = demand / gpus
            for policy in POLICY_NAMES:
                key = (day(lo), gpus, policy)
                if key in old and not (args.policy and policy in args.policy):
                    results[key] = old[key]
                elif policy in policies:
                    tasks.append((lo, hi, gpus, policy, args.worst, extra))
    print(f"{len(tasks)} replays, {len(results)} reused", file=sys.stderr)
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, initializer=_init, initargs=(args.trace,)) as ex:
            done = list(ex.map(replay, tasks))
    else:
        done = []
        for task in tasks:
            done.append(replay(task))
            key, fig, _ = done[-1]
            print(f"  {key}: {fig['sim_wall_s']:.1f} s", file=sys.stderr)
    tops = {}
    for key, fig, top in done:
        results[key] = fig
        tops[key] = top
    print(report(results, load_of))
    for key, top in sorted(tops.items()):
        if top and key[2] == "fairshare":
            print(f"\n{key[0]} {key[1]} GPUs, fair share's longest waits:")
            for t in top:
                print(
                    f"  job {t['id']} {t['team']} (nominal {t['nominal']}) {t['gpus']} GPUs "
                    f"{duration(t['duration_s'])} submitted {t['submitted']}: "
                    f"waited {duration(t['wait_s'])}, preempted {t['preempted']}x"
                )
    if args.json_out:
        runs = [
            {
                "window": k[0],
                "gpus": k[1],
                "policy": k[2],
                "load": round(load_of[k[:2]], 3),
                "figures": v,
            }
            for k, v in sorted(results.items())
            if k[:2] in load_of
        ]
        Path(args.json_out).write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

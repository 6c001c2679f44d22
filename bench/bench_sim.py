"""Benchmark the trace simulator on the whole Philly trace.

    .venv/bin/python bench/bench_sim.py                       # fairshare, 125 x 8 GPUs
    .venv/bin/python bench/bench_sim.py --policy all          # each policy in turn
    .venv/bin/python bench/bench_sim.py --profile             # cProfile, top 30 by own time

The target (../shared/DESIGN.md): the whole trace (82,247 jobs, 108 days) on a
1,000-GPU cluster replays in <= 60 s on a 2-core machine with the fair-share
policy. Reported per run: wall and CPU seconds (on a shared machine trust CPU
time), scheduling passes and their rate, and the process's peak RSS
(resource.getrusage), which covers the trace and every run so far.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cpu_model  # noqa: E402
from scheduler import PolicyConfig  # noqa: E402
from scheduler.sim import POLICY_NAMES, SimConfig, simulate  # noqa: E402
from scheduler.sim.cluster import homogeneous, quota_teams  # noqa: E402
from scheduler.sim.trace import load  # noqa: E402

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly.csv"


def machine() -> str:
    cpu = cpu_model()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--nodes", type=int, default=125)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--policy", default="fairshare", choices=(*POLICY_NAMES, "all"))
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()

    print(f"machine: {machine()}")
    t = time.perf_counter()
    trace = load(args.trace, "philly")
    nodes = homogeneous(args.nodes, args.gpus_per_node)
    jobs = [replace(j, flavor=nodes[0].flavor) for j in trace.jobs]
    teams = quota_teams(jobs, nodes)
    print(
        f"trace: {len(jobs):,} jobs read in {time.perf_counter() - t:.1f} s; "
        f"cluster {args.nodes} x {args.gpus_per_node} = {args.nodes * args.gpus_per_node:,} GPUs"
    )
    policies = POLICY_NAMES if args.policy == "all" else (args.policy,)
    for name in policies:
        config = SimConfig(policy=PolicyConfig(policy=name, explain=False))
        cpu, wall = time.process_time(), time.perf_counter()
        if args.profile:
            prof = cProfile.Profile()
            result = prof.runcall(simulate, jobs, nodes, teams, config)
        else:
            result = simulate(jobs, nodes, teams, config)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        s = result.summary
        print(
            f"{name:>13}: {wall:6.1f} s wall, {cpu:6.1f} s CPU, {s['passes']:,} passes "
            f"({s['passes'] / cpu:,.0f}/s CPU), {s['jobs']:,} jobs done, "
            f"mean wait {s['avg_wait_s']:,.0f} s, utilization {s['utilization']:.1%}, "
            f"peak RSS {peak_rss_mib():.0f} MiB"
        )
        if args.profile:
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

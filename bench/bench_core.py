"""Benchmark the pure scheduling core on a synthetic cluster.

    .venv/bin/python bench/bench_core.py                 # the table below
    .venv/bin/python bench/bench_core.py --profile 10000 # cProfile one pass
    .venv/bin/python bench/bench_core.py --one fairshare # one pass, timed in one process
    .venv/bin/python bench/bench_core.py --one fragmented --priorities 64  # victims of 64 priorities
    .venv/bin/python bench/bench_core.py --one far-reservation  # long gangs behind a reservation

The cluster: 1,000 nodes x 8 GPUs in two flavors (racks of 16 nodes, blocks of
32), 50 teams in 5 cohorts with quotas, about 70% of the GPUs held by running
gangs, and N pending gangs of 1, 2, 4, 8, 16 and 32 GPUs. Each row is the
median (and best) wall time and the median CPU time of `schedule()` over
several runs; the snapshot is built once, outside the timing. On a shared
machine trust CPU time: wall time also counts other processes. The target
(../shared/DESIGN.md): <= 0.5 s per pass for 10,000 pending on a 2-core
machine, near-linear up to 100,000.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cpu_model  # noqa: E402
from scheduler import (  # noqa: E402
    Budget,
    Node,
    PendingJob,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    WorkerPlacement,
    schedule,
)

NOW = 1_700_000_000.0
HOUR = 3600.0
FLAVORS = ("h100-80gb", "a100-40gb")
# GPUs per gang -> (workers, GPUs per worker), and how common each size is.
SHAPES = {1: (1, 1), 2: (1, 2), 4: (1, 4), 8: (1, 8), 16: (2, 8), 32: (4, 8)}
SIZE_WEIGHTS = {1: 40, 2: 15, 4: 15, 8: 15, 16: 10, 32: 5}
RUNTIMES = (HOUR, 4 * HOUR, 12 * HOUR, 24 * HOUR, 72 * HOUR)


def build_nodes(count: int) -> list[dict]:
    """Nodes n0000.., half of each flavor; racks of 16 and blocks of 32 nodes."""
    nodes = []
    for i in range(count):
        flavor = FLAVORS[i * len(FLAVORS) // count]
        ids = [f"n{i:04d}/{g}" for g in range(8)]
        nodes.append(
            {
                "name": f"n{i:04d}",
                "flavor": flavor,
                "free": ids,
                "rack": f"r{i // 16}",
                "block": f"b{i // 32}",
            }
        )
    return nodes


def build_teams(rng: random.Random, count: int, nodes: int) -> list[Team]:
    """Teams in cohorts of 10; nominal quotas add up to about the cluster's capacity."""
    per_flavor = nodes * 8 // len(FLAVORS)
    teams = []
    for i in range(count):
        quotas = {}
        for f in FLAVORS:
            nominal = int(per_flavor / count * rng.uniform(0.5, 1.5))
            quotas[f] = Quota(
                nominal,
                rng.choice([None, None, nominal // 2]),
                rng.choice([None, None, None, nominal // 2]),
            )
        decayed = {f: rng.uniform(0, 2e8) for f in FLAVORS}
        teams.append(
            Team(f"team{i:02d}", rng.choice([1.0, 1.0, 2.0]), f"cohort{i // 10}", quotas, decayed)
        )
    return teams


def gang_size(rng: random.Random) -> int:
    return rng.choices(list(SIZE_WEIGHTS), weights=list(SIZE_WEIGHTS.values()))[0]


def build_running(
    rng: random.Random, nodes: list[dict], teams: list[Team], busy: float
) -> list[RunningJob]:
    """Fill about `busy` of the GPUs with gangs, first-fit in a shuffled node order.

    Each gang goes to a team that stays within its quota, borrowing at most a
    quarter above nominal, and no cohort uses more than its total nominal: the
    steady state the scheduler itself would keep.
    """
    total = sum(len(n["free"]) for n in nodes)
    by_flavor = {f: [n for n in nodes if n["flavor"] == f] for f in FLAVORS}
    usage: dict[tuple[str, str], int] = {}
    running, used, jid = [], 0, 1_000_000
    while used < busy * total:
        size, flavor = gang_size(rng), rng.choice(FLAVORS)
        team = _team_with_room(rng, teams, usage, flavor, size)
        workers, per_worker = SHAPES[size]
        pool = by_flavor[flavor]
        hosts = [n for n in rng.sample(pool, min(40, len(pool))) if len(n["free"]) >= per_worker]
        if team is None or len(hosts) < workers:
            continue
        running.append(_start(rng, jid, team, flavor, hosts[:workers], per_worker))
        for key in ((team.name, flavor), (team.cohort, flavor)):
            usage[key] = usage.get(key, 0) + size
        used += size
        jid += 1
    return running


def _team_with_room(rng, teams, usage, flavor, size) -> Team | None:
    for team in rng.sample(teams, 5):
        nominal = team.quotas[flavor].nominal
        cohort = sum(t.quotas[flavor].nominal for t in teams if t.cohort == team.cohort)
        if (
            usage.get((team.name, flavor), 0) + size <= 1.25 * nominal
            and usage.get((team.cohort, flavor), 0) + size <= cohort
        ):
            return team
    return None


def _start(rng, jid, team, flavor, hosts, per_worker) -> RunningJob:
    placement = []
    for n in hosts:
        placement.append(WorkerPlacement(len(placement), n["name"], tuple(n["free"][:per_worker])))
        del n["free"][:per_worker]
    runtime = rng.choice(RUNTIMES)
    started = NOW - rng.uniform(0, runtime)
    return RunningJob(
        jid, team.name, "default", flavor, per_worker * len(hosts), rng.randint(0, 3),
        started - 60, started, runtime, tuple(placement), rng.random() > 0.2,
        rng.random() < 0.01, None, 30.0,
    )  # fmt: skip


def build_pending(rng: random.Random, teams: list[Team], count: int) -> list[PendingJob]:
    jobs = []
    for j in range(count):
        size = gang_size(rng)
        workers, per_worker = SHAPES[size]
        team = rng.choice(teams).name
        jobs.append(
            PendingJob(
                j,
                team,
                rng.choice(("default", "batch")),
                rng.choice(FLAVORS),
                workers,
                per_worker,
                rng.randint(0, 3),
                NOW - rng.uniform(0, 86_400),
                rng.choice(RUNTIMES),
                rng.random() > 0.2,
            )
        )
    return jobs


def build_snapshot(
    pending: int, nodes: int = 1000, teams: int = 50, busy: float = 0.7, seed: int = 7, **config
) -> Snapshot:
    rng = random.Random(seed)
    node_specs = build_nodes(nodes)
    team_list = build_teams(rng, teams, nodes)
    running = build_running(rng, node_specs, team_list, busy)
    built = tuple(
        Node(n["name"], n["flavor"], tuple(n["free"]), 8, n["rack"], n["block"]) for n in node_specs
    )
    return Snapshot(
        NOW,
        built,
        tuple(team_list),
        tuple(running),
        tuple(build_pending(rng, team_list, pending)),
        PolicyConfig(**config),
    )


def build_fragmented(
    gangs: int, workers: int = 1, pending: int = 0, nodes: int = 1000, priorities: int = 1
) -> Snapshot:
    """The worst case of placement-aware reclaim: team b borrows every GPU of the
    cluster as 1-GPU jobs (eight on each node, of mixed ages) and team a, with half the
    cluster as nominal quota and nothing running, has `gangs` gangs of `workers` x 8
    GPUs waiting; each must preempt whole nodes. `pending` 1-GPU jobs of b wait too.
    `priorities` > 1: b's running jobs get priorities 0..priorities-1 at random (the
    victim search goes class by class of priority: scheduler.preemption._classes)."""
    rng = random.Random(7)
    prio = random.Random(priorities)
    built, running, jid = [], [], 1_000_000
    for i in range(nodes):
        built.append(Node(f"n{i:04d}", FLAVORS[0], (), 8, f"r{i // 16}", f"b{i // 32}"))
        for g in range(8):
            runtime = rng.choice(RUNTIMES)
            started = NOW - rng.uniform(0, runtime * 0.9)
            placed = (WorkerPlacement(0, f"n{i:04d}", (f"n{i:04d}/{g}",)),)
            level = prio.randrange(priorities) if priorities > 1 else 0
            running.append(
                RunningJob(jid, "b", "default", FLAVORS[0], 1, level, started - 60, started,
                           runtime, placed, True, False, None, 30.0)
            )  # fmt: skip
            jid += 1
    half = Quota(nodes * 4, None, None)
    teams = (
        Team("a", 1.0, "c", {FLAVORS[0]: half}, {}),
        Team("b", 1.0, "c", {FLAVORS[0]: half}, {}),
    )
    jobs = [
        PendingJob(j, "a", "default", FLAVORS[0], workers, 8, 0, NOW - 60 - j, HOUR, True)
        for j in range(gangs)
    ] + [
        PendingJob(gangs + j, "b", "default", FLAVORS[0], 1, 1, 0, NOW - 3600 - j, HOUR, True)
        for j in range(pending)
    ]
    return Snapshot(NOW, tuple(built), teams, tuple(running), tuple(jobs), PolicyConfig())


def build_far_reservation(nodes: int = 1000, reservations: int = 1) -> Snapshot:
    """Every GPU busy with 1-GPU jobs ending at random over 100 h; team a's 8-GPU job
    gets the flavor's reservation and five 100-hour gangs of 2-6 x 8 GPUs wait behind
    it: each gang's estimate (and, with `reservations` > 1, its reservation) is planned
    around the first reservation's GPUs for the whole time it would run (a review's
    case: replayed through that time at every candidate start, such a pass took 1.8 s
    at 4,000 running jobs)."""
    rng = random.Random(1)
    built, running, jid = [], [], 1_000_000
    for i in range(nodes):
        built.append(Node(f"n{i:04d}", FLAVORS[0], (), 8, f"r{i // 16}", f"b{i // 32}"))
        for g in range(8):
            placed = (WorkerPlacement(0, f"n{i:04d}", (f"n{i:04d}/{g}",)),)
            runtime = 10 + rng.uniform(0, 100 * HOUR)
            running.append(
                RunningJob(jid, "e", "default", FLAVORS[0], 1, 0, NOW - 60, NOW - 10,
                           runtime, placed, True, False, None, 30.0)
            )  # fmt: skip
            jid += 1
    big = Quota(nodes * 8, None, None)
    teams = (
        Team("a", 1.0, None, {FLAVORS[0]: big}, {}),
        Team("e", 1.0, None, {FLAVORS[0]: big}, {}),
    )
    jobs = [PendingJob(1, "a", "default", FLAVORS[0], 1, 8, 10, NOW - 60, 100 * HOUR, True)]
    jobs += [
        PendingJob(10 + k, "a", "default", FLAVORS[0], 2 + k, 8, 0, NOW - 60, 100 * HOUR, True)
        for k in range(5)
    ]
    config = PolicyConfig(backfill_reservations=reservations)
    return Snapshot(NOW, tuple(built), teams, tuple(running), tuple(jobs), config)


def with_budgets(snapshot: Snapshot) -> Snapshot:
    """The snapshot with a GPU-hour budget for every team and flavor: every third one
    used up, the others with room (docs/scheduling.md, "GPU-hour budgets")."""
    flavors = sorted({n.flavor for n in snapshot.nodes})
    budgets = tuple(
        Budget(t.name, f, 10_000.0, 10_000.0 if i % 3 == 0 else 1_000.0, "month", NOW + 86400)
        for i, (t, f) in enumerate((t, f) for t in snapshot.teams for f in flavors)
    )
    return replace(snapshot, budgets=budgets)


def time_pass(snapshot: Snapshot, repeat: int) -> tuple[float, float, float, object]:
    """Return (median wall, best wall, median CPU) seconds of schedule(snapshot), and the plan.

    CPU time (time.process_time) is what the pass itself used; on a shared
    machine the wall time also counts the time other processes ran.
    """
    walls, cpus, plan = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        plan = schedule(snapshot)
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls), min(walls), statistics.median(cpus), plan


def row(label: str, snapshot: Snapshot, repeat: int) -> None:
    median, best, cpu, plan = time_pass(snapshot, repeat)
    n = len(snapshot.pending)
    print(
        f"{label:<24} {n:>8,} {median:>9.3f} {best:>9.3f} {cpu:>9.3f} "
        f"{cpu / n * 1e6:>7.1f} {len(plan.admissions):>6} {len(plan.preemptions):>6}"
    )


def machine() -> str:
    return f"{os.cpu_count()} CPUs, {cpu_model()}, Python {sys.version.split()[0]}"


def small_overhead(repeat: int) -> None:
    """Per-pass cost on a small snapshot, as the trace simulator calls it."""
    snap = build_snapshot(50, nodes=20, teams=5, explain=False)
    median, _, cpu, _ = time_pass(snap, repeat)
    print(
        f"small pass (20 nodes, 5 teams, {len(snap.running)} running, 50 pending, explain off): "
        f"{median * 1e6:,.0f} us wall, {cpu * 1e6:,.0f} us CPU, median of {repeat}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 20_000, 50_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", type=int, metavar="PENDING", help="profile one pass instead")
    parser.add_argument(
        "--one",
        choices=("fairshare", "fragmented", "far-reservation"),
        help="time only this pass (10,000 pending, 10 x 2x8 on a fragmented cluster, or "
        "five long gangs behind a far reservation on 8,000 busy GPUs), in one process "
        "after a warm-up: CPU median and best of --repeat",
    )
    parser.add_argument(
        "--priorities",
        type=int,
        default=1,
        help="with --one fragmented: spread the borrower's jobs over this many priorities",
    )
    args = parser.parse_args()
    if args.one:
        snap = {
            "fairshare": lambda: build_snapshot(10_000),
            "fragmented": lambda: build_fragmented(10, 2, priorities=args.priorities),
            "far-reservation": build_far_reservation,
        }[args.one]()
        schedule(snap)
        times = []
        for _ in range(args.repeat):
            start = time.process_time()
            schedule(snap)
            times.append(time.process_time() - start)
        print(f"{args.one}: median {statistics.median(times):.3f} s, best {min(times):.3f} s CPU")
        return
    if args.profile:
        import cProfile
        import pstats

        snap = build_snapshot(args.profile)
        cProfile.runctx("schedule(snap)", globals(), {"snap": snap}, "/tmp/bench_core.prof")
        pstats.Stats("/tmp/bench_core.prof").sort_stats("cumulative").print_stats(30)
        return
    print(machine())
    ref = build_snapshot(0)
    held = sum(r.gpus for r in ref.running)
    gpus = sum(n.total_gpus for n in ref.nodes)
    print(
        f"cluster: {len(ref.nodes):,} nodes, {gpus:,} GPUs, {len(ref.teams)} teams; "
        f"{len(ref.running):,} running gangs hold {held:,} GPUs ({held / gpus:.0%})"
    )
    print(
        f"{'pass':<24} {'pending':>8} {'wall med':>9} {'wall best':>9} {'CPU med':>9} "
        f"{'us/job':>7} {'admit':>6} {'preempt':>6}"
    )
    for n in args.sizes:
        row(
            "fairshare", build_snapshot(n), args.repeat if n <= 20_000 else max(1, args.repeat // 2)
        )
    row("fairshare, explain off", build_snapshot(10_000, explain=False), args.repeat)
    row("fairshare, 100 budgets", with_budgets(build_snapshot(10_000)), args.repeat)
    row("fifo-backfill", build_snapshot(10_000, policy="fifo-backfill"), args.repeat)
    row("fifo", build_snapshot(10_000, policy="fifo"), args.repeat)
    # placement-aware reclaim on a cluster fragmented everywhere (issue 13)
    row("fragmented, 10 x 1x8", build_fragmented(10), args.repeat)
    row("fragmented, 10 x 2x8", build_fragmented(10, workers=2), args.repeat)
    row("fragmented, 100 x 1x8", build_fragmented(100, pending=10_000), args.repeat)
    small_overhead(1000)


if __name__ == "__main__":
    main()

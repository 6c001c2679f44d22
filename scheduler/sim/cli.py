"""python -m scheduler.sim: replay a trace under one or more policies, print a table.

    python -m scheduler.sim --trace PATH [--format philly|openb|berth] [--start ISO] [--end ISO]
        --nodes N --gpus-per-node G [--racks R] [--policy fifo|fifo-backfill|fairshare|all]...
        [--quota proportional|equal] [--runtime-estimate exact|double|queue-max|declared]
        [--budget TEAM[:FLAVOR]=GPU_HOURS]...
        [--json OUT.json] [--plots DIR]

These flags and the JSON keys are stable: scripts depend on them. With one
policy the JSON is that run's object; with several it is one object per
policy, keyed by policy name.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

from scheduler.model import (
    AGE_WEIGHT,
    BACKFILL_RESERVATIONS,
    MAX_AGE_S,
    MAX_WAIT_S,
    PolicyConfig,
)
from scheduler.requeue import DEFAULT_BASE_S, DEFAULT_MAX_S

from . import POLICY_NAMES, simulate
from .budgets import budget_arg
from .cluster import (
    QUOTA_MODES,
    assign_flavors,
    homogeneous,
    quota_teams,
    read_berth_cluster,
    read_openb_nodes,
)
from .engine import ESTIMATES, QUEUE_MAX_S, SimConfig
from .results import SimResult, estimate_line, table, team_table
from .trace import FORMATS, Trace, load, parse_time

DEFAULTS = PolicyConfig()  # what a flag left out means (its half-life: 7 days)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scheduler.sim",
        description="Replay a GPU-cluster trace through Berth's scheduling core.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the simulator's options (manage.py simulate adds the same ones)."""
    p.add_argument("--trace", help="trace file (required unless the caller brings its own jobs)")
    p.add_argument("--format", choices=FORMATS, default="philly")
    p.add_argument(
        "--start", help="keep jobs submitted at or after this time (ISO 8601 or epoch s)"
    )
    p.add_argument("--end", help="keep jobs submitted before this time")
    p.add_argument("--nodes", type=int, help="nodes (openb: keep this many of the trace's nodes)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (not for openb)")
    p.add_argument("--racks", type=int, default=1, help="racks; a multi-node gang stays in one")
    p.add_argument(
        "--policy",
        action="append",
        choices=(*POLICY_NAMES, "all"),
        help="repeat, or 'all', to compare policies (default fairshare)",
    )
    p.add_argument("--quota", choices=QUOTA_MODES, default="proportional")
    p.add_argument("--runtime-estimate", choices=ESTIMATES, default="exact")
    p.add_argument("--queue-max", type=float, default=QUEUE_MAX_S, help="seconds, for queue-max")
    p.add_argument("--grace", type=float, default=30.0, help="preemption grace period, seconds")
    p.add_argument(
        "--requeue-backoff",
        type=backoff_arg,
        default=(DEFAULT_BASE_S, DEFAULT_MAX_S),
        metavar="BASE[,MAX]",
        help="a preempted job's requeue backoff: BASE x 2^(requeues-1) s, at most MAX "
        f"(default {DEFAULT_BASE_S:g},{DEFAULT_MAX_S:g}, the portal's; 0 turns it off)",
    )
    p.add_argument(
        "--half-life",
        type=float,
        default=None,
        help="fair-share half-life, s (default 7 days; manage.py simulate --from-db: the portal's)",
    )
    p.add_argument(
        "--age-weight",
        type=float,
        default=AGE_WEIGHT,
        help=f"fair share: weight of the age factor (default {AGE_WEIGHT:g}; 0 turns it off)",
    )
    p.add_argument(
        "--max-age",
        type=float,
        default=MAX_AGE_S,
        help=f"fair share: wait in s at which the age factor is full (default {MAX_AGE_S:g})",
    )
    p.add_argument(
        "--max-wait",
        type=float,
        default=MAX_WAIT_S,
        help="fair share: starvation bound in s, jobs waiting longer go first (0: off)",
    )
    p.add_argument(
        "--backfill-reservations",
        type=int,
        default=BACKFILL_RESERVATIONS,
        help="blocked jobs per flavor that get a backfill reservation "
        f"(default {BACKFILL_RESERVATIONS})",
    )
    p.add_argument(
        "--reclaim-backoff",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fair share: after a team's borrowing of a flavor is reclaimed, it may not borrow "
        "it again for 60 s, doubling per reclaim in a row up to an hour (Kueue KEP-14468; "
        f"default {'on' if DEFAULTS.reclaim_backoff else 'off'}; manage.py simulate --from-db: the "
        "portal's)",
    )
    p.add_argument(
        "--budget",
        action="append",
        type=budget_arg,
        default=[],
        metavar="TEAM[:FLAVOR]=GPU_HOURS",
        help="a GPU-hour budget per calendar month (UTC) for a team ('*': every team) and "
        "flavor (default every flavor); repeat for more; jobs past it wait (budget_exhausted)",
    )
    p.add_argument(
        "--node-file", help="openb: the nodes CSV (default: openb_gpu_nodes.csv beside the trace)"
    )
    p.add_argument(
        "--openb-flavors",
        choices=("model", "single"),
        default="model",
        help="openb: one flavor per GPU model, or all nodes in one flavor",
    )
    p.add_argument("--json", dest="json_out", help="write the results as JSON here")
    p.add_argument("--plots", help="write PNG plots into this folder")
    p.add_argument("--teams", action="store_true", help="also print the per-team table")
    p.add_argument("--check", action="store_true", help="verify every plan (slow; for debugging)")
    p.add_argument(
        "--estimates",
        action="store_true",
        help="explain every pass, as the portal does, and report how far each job's first "
        "estimated start was from its start (slower)",
    )


def backoff_arg(text: str) -> tuple[float, float]:
    """Parse --requeue-backoff BASE[,MAX] (seconds); MAX defaults to the portal's."""
    parts = text.split(",")
    try:
        base = float(parts[0])
        most = float(parts[1]) if len(parts) > 1 else max(DEFAULT_MAX_S, base)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BASE[,MAX] in seconds, got {text!r}") from None
    if len(parts) > 2 or base < 0 or most < base:
        raise argparse.ArgumentTypeError(f"expected 0 <= BASE <= MAX, got {text!r}")
    return base, most


def policies(chosen: list[str] | None) -> list[str]:
    if not chosen:
        return ["fairshare"]
    if "all" in chosen:
        return list(POLICY_NAMES)
    return list(dict.fromkeys(chosen))


def build_cluster(args: argparse.Namespace, trace: Trace):
    """Return (nodes, jobs with flavors, notes, teams or None) for the trace and flags.

    A Berth JSON export brings its own nodes and teams unless --nodes is given.
    """
    notes = list(trace.notes)
    if args.format == "openb":
        node_file = args.node_file or str(Path(args.trace).with_name("openb_gpu_nodes.csv"))
        nodes = read_openb_nodes(
            node_file, limit=args.nodes, single_flavor=args.openb_flavors == "single"
        )
        jobs = assign_flavors(trace.jobs, nodes)
        if args.openb_flavors == "model":
            notes.append(
                "openb: pods have no GPU model, so each gets one in proportion to capacity"
            )
        return nodes, jobs, notes, None
    if args.format == "berth" and not args.nodes:
        carried = read_berth_cluster(args.trace)
        if carried is not None:
            nodes, teams = carried
            notes.append("berth: nodes and teams from the export")
            return nodes, list(trace.jobs), notes, teams or None
    if not args.nodes or not args.gpus_per_node:
        raise SystemExit("--nodes and --gpus-per-node are required for this trace format")
    nodes = homogeneous(args.nodes, args.gpus_per_node, args.racks)
    flavor = nodes[0].flavor
    renamed = sum(1 for j in trace.jobs if j.flavor not in (None, flavor))
    if renamed:
        notes.append(f"{renamed} jobs of named flavors run on the one flavor of this cluster")
    jobs = [replace(j, flavor=flavor) for j in trace.jobs]
    return nodes, jobs, notes, None


def run(args: argparse.Namespace) -> dict[str, SimResult]:
    """Load the trace, build the cluster and teams, and simulate each policy."""
    if not args.trace:
        raise SystemExit("--trace is required")
    start = parse_time(args.start) if args.start else None
    end = parse_time(args.end) if args.end else None
    worker_gpus = min(8, args.gpus_per_node or 8)
    trace = load(args.trace, args.format, start=start, end=end, worker_gpus=worker_gpus)
    if not trace.jobs:
        raise SystemExit("no jobs in the trace window")
    nodes, jobs, notes, teams = build_cluster(args, trace)
    if teams is None:
        teams = quota_teams(jobs, nodes, args.quota)
    return run_policies(args, jobs, nodes, teams, notes)


def run_policies(args: argparse.Namespace, jobs, nodes, teams, notes) -> dict[str, SimResult]:
    """Simulate the jobs under each policy of --policy."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    results = {}
    for name in policies(args.policy):
        config = SimConfig(
            policy=PolicyConfig(
                policy=name,
                half_life=DEFAULTS.half_life if args.half_life is None else args.half_life,
                explain=False,
                age_weight=args.age_weight,
                max_age=args.max_age,
                backfill_reservations=args.backfill_reservations,
                reclaim_backoff=_reclaim_backoff(args),
                max_wait=args.max_wait,
            ),
            runtime_estimate=args.runtime_estimate,
            queue_max_s=args.queue_max,
            grace_period_s=args.grace,
            requeue_backoff_s=args.requeue_backoff[0],
            requeue_backoff_max_s=args.requeue_backoff[1],
            check=args.check,
            budgets=tuple(getattr(args, "budget", ())),
            estimates=getattr(args, "estimates", False),
        )
        result = simulate(jobs, nodes, teams, config, progress=Progress(name, jobs))
        result.summary["peak_rss_mib"] = round(peak_rss_mib(), 1)
        result.summary["setup"] = setup(args, nodes, jobs, notes)
        results[name] = result
    return results


class Progress:
    """A long replay's progress on stderr: simulated day, jobs submitted, time left.

    Quiet for the first FIRST_AFTER_S (a short replay prints nothing); then one
    line rewritten in place on a terminal, or a new line every EVERY_S in a log.
    The simulator reports the share of arrivals replayed (Simulator.run).
    """

    FIRST_AFTER_S = 2.0
    EVERY_S = 10.0

    def __init__(self, policy: str, jobs, stream=None, clock=time.monotonic):
        self.policy = policy
        self.arrivals = sorted(j.submitted_at for j in jobs)
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.clock = clock
        self.started = clock()
        self.shown: float | None = None

    def __call__(self, share: float) -> None:
        now = self.clock()
        if share >= 1.0:
            if self.shown is not None:
                self._write(self.line(share, now - self.started), end=True)
            return
        wait = self.FIRST_AFTER_S if self.shown is None else (0.5 if self.tty else self.EVERY_S)
        if now - (self.shown or self.started) >= wait and share > 0:
            self.shown = now
            self._write(self.line(share, now - self.started))

    def line(self, share: float, elapsed: float) -> str:
        n, first = len(self.arrivals), self.arrivals[0]
        done = min(n, round(share * n))
        day = (self.arrivals[max(0, done - 1)] - first) / 86400
        days = (self.arrivals[-1] - first) / 86400
        text = (
            f"{self.policy}: simulated day {day:.1f} of {days:.1f}, {done:,} of {n:,} jobs "
            f"submitted ({share:.0%}), {elapsed:.0f} s"
        )
        if share >= 1.0:
            return text + " elapsed; finishing the running jobs"
        left = elapsed * (1 - share) / share
        return text + f" elapsed, about {_span(left)} left"

    def _write(self, text: str, end: bool = False) -> None:
        if self.tty:
            self.stream.write(f"\r\033[K{text}" + ("\n" if end else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def setup(args: argparse.Namespace, nodes, jobs, notes) -> dict:
    """Return what was simulated, for the JSON."""
    return {
        "trace": str(args.trace),
        "format": args.format,
        "start": args.start,
        "end": args.end,
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "racks": args.racks if args.format != "openb" else None,
        "quota": args.quota,
        "runtime_estimate": args.runtime_estimate,
        "grace_s": args.grace,
        "requeue_backoff_s": list(args.requeue_backoff),
        "age_weight": args.age_weight,
        "max_age_s": args.max_age,
        "backfill_reservations": args.backfill_reservations,
        "reclaim_backoff": _reclaim_backoff(args),
        "max_wait_s": args.max_wait,
        "budgets": [f"{b.team}:{b.flavor}={b.gpu_hours:g}" for b in getattr(args, "budget", ())],
        "trace_jobs": len(jobs),
        "notes": notes,
    }


def peak_rss_mib() -> float:
    """Return this process's peak resident memory (Linux reports KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 1024 / 1024


def write_json(path: str, results: dict[str, SimResult]) -> None:
    if len(results) == 1:
        data = next(iter(results.values())).summary
    else:
        data = {name: r.summary for name, r in results.items()}
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    report(run(args), args, started)
    return 0


def report(results: dict[str, SimResult], args: argparse.Namespace, started: float) -> None:
    """Print the table (and per-team tables), write the JSON and the plots."""
    print(table([r.summary for r in results.values()]))
    if args.teams:
        for name, r in results.items():
            print(f"\n{name}:\n{team_table(r.summary)}")
    if getattr(args, "estimates", False):
        print()
        for name, r in results.items():
            print(f"{name}: {estimate_line(r.summary)}")
    if args.json_out:
        write_json(args.json_out, results)
    if args.plots:
        from .plots import write_plots  # matplotlib only when asked

        for path in write_plots(results, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    print(
        f"total {time.perf_counter() - started:.1f} s, peak RSS {peak_rss_mib():.0f} MiB",
        file=sys.stderr,
    )


def _reclaim_backoff(args: argparse.Namespace) -> bool:
    """--reclaim-backoff / --no-reclaim-backoff, else the default (PolicyConfig's)."""
    return DEFAULTS.reclaim_backoff if args.reclaim_backoff is None else args.reclaim_backoff

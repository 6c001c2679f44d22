"""A finished simulation's numbers: the JSON summary, per-team figures and the table.

Definitions (docs/simulation.md):

- wait: seconds a job spent pending, over all its attempts (a requeued job
  waits again); JCT: completion - submission.
- utilization: allocated GPU-time / (GPUs x makespan), makespan from the first
  arrival to the last completion. Allocated includes work later lost to a
  preemption and grace periods.
- jain_fairness: Jain's index over the teams' received / entitled GPU-time
  (scheduler.sim.metrics).
- utilization_arrivals: the same from the first to the last arrival (no tail).
- idle_while_waiting: time-averaged share of GPUs free while some job waited.
- fragmentation: time-averaged share of free GPUs (of its flavor) in pieces too
  small for a worker of the first waiting gang in pass order, over the time a
  gang waited and GPUs of its flavor were free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .engine import Simulator
from .metrics import jain, percentile

HOUR = 3600.0
# The figures that comparisons of policies and rules quote (docs/simulation.md).
HEADLINE_KEYS = (
    "avg_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "utilization_arrivals",
    "jain_fairness",
    "preemptions",
    "lost_gpu_hours",
)


@dataclass
class SimResult:
    """The summary (JSON keys), and the series the plots need."""

    summary: dict
    waits: list[float] = field(default_factory=list)  # per completed job, submit order
    utilization: list[float] = field(default_factory=list)  # per time bin
    bin_s: float = HOUR
    start: float = 0.0
    last_arrival_s: float = 0.0  # seconds from the first arrival to the last


def _round(x: float, nd: int = 1) -> float:
    return round(float(x), nd)


def _dist(values: list[float], prefix: str) -> dict:
    s = sorted(values)
    return {
        f"avg_{prefix}_s": _round(sum(s) / len(s)) if s else 0.0,
        f"median_{prefix}_s": _round(percentile(s, 50)),
        f"p90_{prefix}_s": _round(percentile(s, 90)),
        f"p99_{prefix}_s": _round(percentile(s, 99)),
        f"max_{prefix}_s": _round(s[-1]) if s else 0.0,
    }


def summarize(sim: Simulator, wall_s: float) -> SimResult:
    """Return the result of a finished run."""
    recs = list(sim.recs.values())
    done = [r for r in recs if r.finished is not None]
    waits = [r.waited for r in done]
    jcts = [r.finished - r.job.submitted_at for r in done]
    rec = sim.rec
    t0 = rec.t0 if rec.t0 is not None else 0.0
    makespan = max(0.0, sim.end - t0)
    cap = rec.total * makespan
    ratios = rec.ratios()
    summary = {
        "policy": sim.policy.policy,
        "jobs": len(done),
        "unfinished": len(recs) - len(done),
        **_dist(jcts, "jct"),
        **_dist(waits, "wait"),
        "utilization": round(rec.alloc_s / cap, 4) if cap else 0.0,
        "utilization_arrivals": round(_arrivals_utilization(sim), 4),
        "idle_while_waiting": round(rec.idle_while_waiting(), 4),
        "jain_fairness": round(jain(list(ratios.values())), 4),
        "preemptions": sim.preemptions,
        "lost_gpu_hours": _round(sum(r.lost_s for r in recs) / HOUR),
        "fragmentation": round(rec.fragmentation(), 4),
        "reclaim_jobs": len(sim.reclaim_latency),
        "reclaim_latency_p99_s": _round(percentile(sorted(sim.reclaim_latency), 99)),
        "makespan_s": _round(makespan),
        "sim_wall_s": round(wall_s, 2),
        "passes": sim.passes,
        "gpus": rec.total,
        "gpu_hours": _round(rec.alloc_s / HOUR),
        "per_team": per_team(sim, ratios),
        "wait_by_gpus": wait_by_gpus(done),
    }
    if sim.config.estimates:
        summary.update(estimate_figures(done))
    if sim.budgets is not None:  # --budget: how many jobs waited for a budget at least once
        summary["budget_blocked_jobs"] = len(sim.budgets.blocked)
    last = sim.arrivals[-1].job.submitted_at - t0 if sim.arrivals else 0.0
    return SimResult(summary, waits, rec.utilization_series(), rec.bin_s, t0, last)


# A start this much later than the first estimate counts as late, earlier as early.
ESTIMATE_SLACK_S = 600.0


def estimate_figures(done) -> dict:
    """How well the first estimated start a waiting job was told matched its first start.

    Over the completed jobs that got a verdict before their first start (jobs
    admitted in their first pass were told nothing): how many got no estimate,
    the median and p90 of |first start - estimate|, and the shares that started
    more than ESTIMATE_SLACK_S after (late) or before (early) the estimate.
    """
    told = [r for r in done if r.told and r.first_start is not None]
    errors = sorted(r.first_start - r.estimate for r in told if r.estimate is not None)
    n = len(errors)
    off = sorted(abs(e) for e in errors)

    def share(count: int) -> float:
        return round(count / n, 4) if n else 0.0

    return {
        "estimate_jobs": len(told),
        "estimate_none": len(told) - n,
        "estimate_abs_error_p50_s": _round(percentile(off, 50)),
        "estimate_abs_error_p90_s": _round(percentile(off, 90)),
        "estimate_late_share": share(sum(e > ESTIMATE_SLACK_S for e in errors)),
        "estimate_early_share": share(sum(e < -ESTIMATE_SLACK_S for e in errors)),
        "estimate_late_p90_s": _round(percentile([max(0.0, e) for e in errors], 90)),
    }


def estimate_line(summary: dict) -> str:
    """Return 'first estimates of 1,234 waiting jobs: median 4m off, p90 2.1h; 12% late ...'."""
    s = summary
    return (
        f"first estimates of {s['estimate_jobs']:,} waiting jobs ({s['estimate_none']:,} none): "
        f"off by {duration(s['estimate_abs_error_p50_s'])} (median), "
        f"{duration(s['estimate_abs_error_p90_s'])} (p90); "
        f"{s['estimate_late_share']:.0%} started over {duration(ESTIMATE_SLACK_S)} late "
        f"(p90 lateness {duration(s['estimate_late_p90_s'])}), "
        f"{s['estimate_early_share']:.0%} that much early"
    )


def _arrivals_utilization(sim: Simulator) -> float:
    """Return allocated GPU-time / capacity from the first to the last arrival.

    The makespan also covers the tail after the last arrival, when the longest
    jobs of the window run alone; this figure leaves it out.
    """
    rec = sim.rec
    if rec.t0 is None or rec.alloc_s_at_last_arrival is None or not sim.arrivals:
        return 0.0
    span = sim.arrivals[-1].job.submitted_at - rec.t0
    return rec.alloc_s_at_last_arrival / (rec.total * span) if span > 0 and rec.total else 0.0


def per_team(sim: Simulator, ratios: dict[str, float]) -> dict[str, dict]:
    """Return each team's jobs, waits, GPU-hours received and entitled, and their ratio."""
    rec = sim.rec
    by_team: dict[str, list] = {}
    for r in sim.recs.values():
        by_team.setdefault(r.job.team, []).append(r)
    out = {}
    for team in sorted(set(by_team) | {t.name for t in sim.teams}):
        recs = by_team.get(team, [])
        waits = sorted(r.waited for r in recs if r.finished is not None)
        out[team] = {
            "jobs": len(waits),
            "mean_wait_s": _round(sum(waits) / len(waits)) if waits else 0.0,
            "p90_wait_s": _round(percentile(waits, 90)),
            "max_wait_s": _round(waits[-1]) if waits else 0.0,
            "gpu_hours": _round(rec.team_alloc_s.get(team, 0.0) / HOUR),
            "entitled_gpu_hours": _round(rec.team_entitled_s.get(team, 0.0) / HOUR),
            "share_ratio": round(ratios[team], 4) if team in ratios else None,
            "preempted": sum(r.preempted for r in recs),
            "lost_gpu_hours": _round(sum(r.lost_s for r in recs) / HOUR),
        }
    return out


def wait_by_gpus(done: list) -> dict[str, dict]:
    """Return wait statistics per gang size (GPUs), to show no gang size starves."""
    sizes: dict[int, list[float]] = {}
    for r in done:
        sizes.setdefault(r.job.gpus, []).append(r.waited)
    out = {}
    for gpus in sorted(sizes):
        s = sorted(sizes[gpus])
        out[str(gpus)] = {
            "jobs": len(s),
            "mean_wait_s": _round(sum(s) / len(s)),
            "p99_wait_s": _round(percentile(s, 99)),
            "max_wait_s": _round(s[-1]),
        }
    return out


# --- the table -----------------------------------------------------------------------

COLUMNS = (
    ("policy", "policy", "{}"),
    ("jobs", "jobs", "{:,}"),
    ("avg_wait_s", "mean wait", "dur"),
    ("median_wait_s", "median wait", "dur"),
    ("p99_wait_s", "p99 wait", "dur"),
    ("max_wait_s", "max wait", "dur"),
    ("avg_jct_s", "mean JCT", "dur"),
    ("utilization", "util", "{:.1%}"),
    ("utilization_arrivals", "util (arrivals)", "{:.1%}"),
    ("idle_while_waiting", "idle|wait", "{:.1%}"),
    ("jain_fairness", "Jain", "{:.3f}"),
    ("preemptions", "preempt", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.0f}"),
    ("fragmentation", "frag", "{:.1%}"),
    ("sim_wall_s", "wall", "{:.1f} s"),
)


def duration(seconds: float) -> str:
    """Return 3,760 s as '1.0 h': seconds, minutes, hours or days."""
    s = float(seconds)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    if s < 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _cell(summary: dict, key: str, fmt: str) -> str:
    value = summary[key]
    return duration(value) if fmt == "dur" else fmt.format(value)


def table(summaries: list[dict], markdown: bool = False) -> str:
    """Return one row per policy, as aligned text or a Markdown table."""
    heads = [h for _, h, _ in COLUMNS]
    rows = [[_cell(s, k, f) for k, _, f in COLUMNS] for s in summaries]
    if markdown:
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*heads)] + [fmt.format(*r) for r in rows])


def team_table(summary: dict) -> str:
    """Return the per-team figures of one run as aligned text."""
    heads = ("team", "jobs", "mean wait", "p90 wait", "GPU-h", "entitled", "ratio")
    rows = []
    for team, t in summary["per_team"].items():
        ratio = "-" if t["share_ratio"] is None else f"{t['share_ratio']:.2f}"
        rows.append(
            (
                team,
                f"{t['jobs']:,}",
                duration(t["mean_wait_s"]),
                duration(t["p90_wait_s"]),
                f"{t['gpu_hours']:,.0f}",
                f"{t['entitled_gpu_hours']:,.0f}",
                ratio,
            )
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)
    ]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*heads)] + [fmt.format(*r) for r in rows])

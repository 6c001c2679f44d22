"""PNG plots of simulation results (matplotlib, Agg backend; imported only for --plots).

- wait_cdf.png: CDF of job wait per policy (log time axis);
- utilization.png: allocated share of GPUs over time per policy (daily means);
- team_shares.png: per team, received / entitled GPU-time per policy.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .results import SimResult  # noqa: E402

DPI = 80
SIZE = (7.5, 4.0)


def write_plots(results: dict[str, SimResult], folder: str | Path) -> list[Path]:
    """Write the three plots into `folder`; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [
        wait_cdf(results, folder / "wait_cdf.png"),
        utilization(results, folder / "utilization.png"),
        team_shares(results, folder / "team_shares.png"),
    ]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def wait_cdf(results: dict[str, SimResult], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=SIZE)
    for name, r in results.items():
        waits = sorted(r.waits)
        n = len(waits)
        if not n:
            continue
        # Waits of 0 s sit at 1 s on the log axis.
        xs = [max(1.0, w) for w in waits]
        ys = [(i + 1) / n for i in range(n)]
        ax.step(xs, ys, where="post", label=f"{name} (mean {r.summary['avg_wait_s']:,.0f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, log scale; 0 shown as 1)")
    ax.set_ylabel("share of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("Job wait, CDF")
    return _save(fig, path)


def _daily(series: list[float], bin_s: float) -> list[float]:
    per_day = max(1, round(86400 / bin_s))
    return [
        sum(series[i : i + per_day]) / len(series[i : i + per_day])
        for i in range(0, len(series), per_day)
    ]


def utilization(results: dict[str, SimResult], path: Path) -> Path:
    return _save(utilization_figure(results), path)


def utilization_figure(results: dict[str, SimResult]):
    fig, ax = plt.subplots(figsize=SIZE)
    for name, r in results.items():
        daily = _daily(r.utilization, r.bin_s)
        ax.plot(range(len(daily)), daily, label=f"{name} ({r.summary['utilization']:.1%} overall)")
    last = next(iter(results.values())).last_arrival_s / 86400
    ax.axvline(last, color="grey", linestyle="--", linewidth=0.8)
    # The label goes on the side of the line with room: the last arrival is usually near
    # the right edge, where a label to its right was cut off.
    left, right = ax.get_xlim()
    before = last > (left + right) / 2
    ax.annotate(
        "last arrival",
        (last, 0.97),
        xytext=(-3 if before else 3, 0),
        textcoords="offset points",
        fontsize=8,
        color="grey",
        ha="right" if before else "left",
        va="top",
    )
    ax.set_xlabel("day since the first arrival")
    ax.set_ylabel("GPUs allocated (daily mean)")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    ax.set_title("Utilization over time")
    return fig


def team_shares(results: dict[str, SimResult], path: Path) -> Path:
    first = next(iter(results.values())).summary["per_team"]
    teams = [t for t, v in first.items() if v["share_ratio"] is not None]
    fig, ax = plt.subplots(figsize=(max(7.5, 0.55 * len(teams) + 2), 4.0))
    width = 0.8 / max(1, len(results))
    for k, (name, r) in enumerate(results.items()):
        per = r.summary["per_team"]
        ratios = [per[t]["share_ratio"] or 0.0 for t in teams]
        xs = [i + (k - (len(results) - 1) / 2) * width for i in range(len(teams))]
        ax.bar(xs, ratios, width, label=f"{name} (Jain {r.summary['jain_fairness']:.3f})")
    ax.axhline(1.0, color="black", linewidth=0.8)
    top = max(
        [1.0]
        + [r.summary["per_team"][t]["share_ratio"] or 0.0 for r in results.values() for t in teams]
    )
    ax.set_ylim(0, top * 1.3)
    ax.set_xticks(range(len(teams)))
    ax.set_xticklabels(teams, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("received / entitled GPU-time")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper center", fontsize=8, ncol=len(results))
    ax.set_title("Received vs entitled share per team")
    return _save(fig, path)

"""Print the Markdown tables of docs/simulation.md from the JSON results in this folder.

.venv/bin/python docs/simulation/tables.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from scheduler.sim.results import duration  # noqa: E402

COLUMNS = (
    ("policy", "policy", "{}"),
    ("avg_wait_s", "mean wait", "dur"),
    ("median_wait_s", "median", "dur"),
    ("p99_wait_s", "p99 wait", "dur"),
    ("max_wait_s", "max wait", "dur"),
    ("avg_jct_s", "mean JCT", "dur"),
    ("utilization_arrivals", "util (arrivals)", "{:.1%}"),
    ("utilization", "util (makespan)", "{:.1%}"),
    ("idle_while_waiting", "idle while waiting", "{:.1%}"),
    ("jain_fairness", "Jain", "{:.3f}"),
    ("preemptions", "preemptions", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.0f}"),
    ("fragmentation", "frag", "{:.1%}"),
    ("sim_wall_s", "sim time", "{:.0f} s"),
)


def cell(s: dict, key: str, fmt: str) -> str:
    return duration(s[key]) if fmt == "dur" else fmt.format(s[key])


def table(path: Path) -> str:
    data = json.loads(path.read_text())
    runs = [data] if "jobs" in data else list(data.values())
    lines = ["| " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(s, k, f) for k, _, f in COLUMNS) + " |" for s in runs]
    setup = runs[0].get("setup", {})
    head = (
        f"**{path.stem}** — {setup.get('trace_jobs', runs[0]['jobs']):,} jobs, "
        f"{setup.get('gpus', runs[0]['gpus'])} GPUs ({setup.get('nodes')} nodes), "
        f"quota {setup.get('quota')}, runtime estimate {setup.get('runtime_estimate')}"
    )
    return head + "\n\n" + "\n".join(lines)


def teams(path: Path) -> str:
    data = json.loads(path.read_text())
    runs = data if "jobs" not in data else {data["policy"]: data}
    names = list(next(iter(runs.values()))["per_team"])
    head = "| team | jobs | " + " | ".join(f"{p} mean wait | {p} ratio" for p in runs) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(runs))]
    for t in names:
        cells = [t, f"{next(iter(runs.values()))['per_team'][t]['jobs']:,}"]
        for s in runs.values():
            pt = s["per_team"][t]
            ratio = "-" if pt["share_ratio"] is None else f"{pt['share_ratio']:.2f}"
            cells += [duration(pt["mean_wait_s"]), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for path in sorted(HERE.glob("*.json")):
        if path.name.startswith("ablation"):
            continue
        print(table(path), end="\n\n")
    main = HERE / "philly-oct02-80n.json"
    if main.exists():
        print(teams(main))

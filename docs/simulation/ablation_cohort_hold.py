"""Replay a window with and without cohort holds (scheduler/backfill.py), for docs/simulation.md.

    .venv/bin/python docs/simulation/ablation_cohort_hold.py --nodes 80 --out docs/simulation/ablation-80n.json

Same trace, cluster and policies; the only difference is Backfill._hold_cohort
switched off, as it was before the hold existed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scheduler.backfill import Backfill  # noqa: E402
from scheduler.sim.cli import main as sim_main  # noqa: E402
from scheduler.sim.results import HEADLINE_KEYS  # noqa: E402

KEYS = HEADLINE_KEYS


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=80)
    p.add_argument("--start", default="2017-10-02")
    p.add_argument("--end", default="2017-10-16")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    common = [
        "--trace",
        str(Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly.csv"),
        "--start",
        args.start,
        "--end",
        args.end,
        "--nodes",
        str(args.nodes),
        "--gpus-per-node",
        "8",
        "--policy",
        "fifo-backfill",
        "--policy",
        "fairshare",
    ]
    results = {}
    for label in ("with_hold", "without_hold"):
        if label == "without_hold":
            Backfill._hold_cohort = lambda self, p, job: None
        out = Path(args.out).with_suffix(f".{label}.tmp.json")
        sim_main([*common, "--json", str(out)])
        data = json.loads(out.read_text())
        out.unlink()
        results[label] = {policy: {k: s[k] for k in KEYS} for policy, s in data.items()}
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

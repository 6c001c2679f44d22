#!/usr/bin/env python3
"""Cut the demo's history out of the Philly trace: 30 days, thinned to the demo's 48 GPUs.

    python scripts/make-demo-trace.py /work/shared/traces/philly.csv > portal/whatif/data/philly-30d.csv

Keeps the jobs submitted from 2017-10-09 for 30 days that ask for at most 16 GPUs
(the demo's largest topology block), 14 % of the multi-GPU jobs and 3 % of the
single-GPU ones (deterministic: a fixed seed over the rows in file order), and
writes them in Philly's own columns, so the seed reads them with
scheduler.sim.trace.read_philly. See portal/whatif/data/README.md.
"""

import csv
import random
import sys
from datetime import datetime, timedelta

START = datetime(2017, 10, 9)
END = START + timedelta(days=30)
MAX_GPUS = 16
KEEP = {"multi": 0.14, "single": 0.03}


def main(path: str) -> None:
    rng = random.Random(16)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        out = csv.DictWriter(sys.stdout, reader.fieldnames, lineterminator="\n")
        out.writeheader()
        for row in reader:
            draw = rng.random()
            when = datetime.fromisoformat(row["timestamp"])
            gpus = int(row["num_gpus"])
            if not START <= when < END or gpus > MAX_GPUS:
                continue
            if draw < KEEP["multi" if gpus > 1 else "single"]:
                out.writerow(row)


if __name__ == "__main__":
    main(sys.argv[1])

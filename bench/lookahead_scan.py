"""Several teams within their nominal quota reclaim in one pass: how often does one wait?

    .venv/bin/python bench/lookahead_scan.py --seeds 400 --jobs 2 3

Random clusters of 3-6 eight-GPU nodes in 1-3 blocks, every GPU held by borrower b's
preemptible 1-, 2- and 4-GPU jobs of mixed ages; `jobs` teams, each with a nominal
quota the size of its one job (1x4, 1x8, 2x4 or 2x8), submit in the same pass. Only
cases where the jobs can all be placed together count (brute force,
tests/scheduler/test_reclaim_lookahead.py). A case fails when a job has not started
within two grace periods (passes 30 s apart). docs/scheduling.md ("Known limits")
gives the figures; with one job at a time each preemptor took its cheapest target and
could spoil the place of a later one (scheduler.preemption.choose's look-ahead).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim  # noqa: E402
from tests.scheduler.test_reclaim_lookahead import _jointly_placeable  # noqa: E402

GRACE = 30.0
SHAPES = ((1, 4), (1, 8), (2, 4), (2, 8))


def case(seed: int, jobs: int) -> Cluster | None:
    """Return the seed's cluster, or None if its jobs cannot all be placed together."""
    rng = random.Random(seed)
    blocks, count = rng.randint(1, 3), rng.randint(3, 6)
    c = Cluster()
    domains: list[list[str]] = [[] for _ in range(blocks)]
    for i in range(count):
        b = rng.randrange(blocks)
        c.node(f"n{i}", gpus=8, block=f"b{b}", rack=f"r{b}")
        domains[b].append(f"n{i}")
    jid = 100
    for i in range(count):
        left = 8
        while left:
            k = min(left, rng.choice([1, 2, 4]))
            started = NOW - rng.randint(60, 5 * 3600)
            c.run(jid, "b", on={f"n{i}": k}, started=started, runtime=100 * HOUR)
            jid, left = jid + 1, left - k
    shapes = [rng.choice(SHAPES) for _ in range(jobs)]
    if not _jointly_placeable([d for d in domains if d], shapes):
        return None
    teams = [f"t{i}" for i in range(jobs)]
    for team, (w, g) in zip(teams, shapes, strict=True):
        c.team(team, nominal=w * g, cohort="c")
    c.team("b", nominal=0, cohort="c")
    order = list(range(jobs))
    rng.shuffle(order)
    for k, i in enumerate(order):
        w, g = shapes[i]
        c.job(i + 1, teams[i], workers=w, gpus=g, submitted=NOW + k, runtime=100 * HOUR)
    return c


def waits(c: Cluster, jobs: int) -> bool:
    """Return whether a job has not started within two grace periods."""
    sim = Sim(c, preemption=True)
    for step in range(4):
        sim.step(NOW + GRACE * step)
    started = sim.started
    return not set(range(1, jobs + 1)) <= set(started) or max(started.values()) > NOW + 2 * GRACE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--jobs", type=int, nargs="*", default=[2, 3])
    args = parser.parse_args()
    for jobs in args.jobs:
        tried = failed = 0
        for seed in range(args.seeds):
            c = case(seed, jobs)
            if c is None:
                continue
            tried += 1
            failed += waits(c, jobs)
        print(f"{jobs} within-nominal jobs in one pass: {failed} of {tried} placeable cases wait")


if __name__ == "__main__":
    main()

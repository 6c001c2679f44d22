"""Trace-driven simulation: real cluster traces replayed through the scheduling core.

    python -m scheduler.sim --trace philly.csv --nodes 64 --gpus-per-node 8 --policy all

The simulator drives scheduler.schedule() itself, with a simulated clock: no
separate simulation policy exists, so what it measures is what the portal
runs. The portal's what-if (portal/whatif) uses `simulate` on the database's
own job history. See docs/simulation.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from scheduler.model import PolicyConfig, Team

from .cluster import NodeSpec, assign_flavors, homogeneous, quota_teams, read_openb_nodes
from .engine import ESTIMATES, SimConfig, SimError, Simulator
from .results import SimResult, summarize
from .trace import Trace, TraceJob, load, record_to_job, records_to_jobs

POLICY_NAMES = ("fifo", "fifo-backfill", "fairshare")


def simulate(
    jobs: Sequence[TraceJob],
    nodes: Sequence[NodeSpec],
    teams: Sequence[Team],
    config: SimConfig | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Replay the jobs on the nodes and return the summary and series."""
    started = time.perf_counter()
    sim = Simulator(jobs, nodes, teams, config).run(progress)
    return summarize(sim, time.perf_counter() - started)


__all__ = [
    "ESTIMATES",
    "POLICY_NAMES",
    "NodeSpec",
    "PolicyConfig",
    "SimConfig",
    "SimError",
    "SimResult",
    "Simulator",
    "Trace",
    "TraceJob",
    "assign_flavors",
    "homogeneous",
    "load",
    "quota_teams",
    "read_openb_nodes",
    "record_to_job",
    "records_to_jobs",
    "simulate",
]

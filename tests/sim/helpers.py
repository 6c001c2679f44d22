"""Small traces for simulator tests: jobs, clusters and a run helper (no Django)."""

from __future__ import annotations

from scheduler import PolicyConfig, Quota, Team
from scheduler.sim import SimConfig, Simulator
from scheduler.sim.cluster import homogeneous, quota_teams
from scheduler.sim.results import summarize
from scheduler.sim.trace import TraceJob, gang_shape

T0 = 1_500_000_000.0
FLAVOR = "gpu"
POLICIES = ("fifo", "fifo-backfill", "fairshare")


def job(id, team="a", at=0.0, duration=100.0, gpus=1, per_worker=8, **kw) -> TraceJob:
    """A trace job submitted `at` seconds after T0; gangs above `per_worker` GPUs split."""
    workers, each = gang_shape(gpus, per_worker)
    return TraceJob(id, team, T0 + at, float(duration), workers, each, FLAVOR, **kw)


def config(policy="fairshare", **kw) -> SimConfig:
    return SimConfig(policy=PolicyConfig(policy=policy, explain=False), check=True, **kw)


def run(jobs, nodes=2, gpus=8, policy="fairshare", teams=None, racks=1, **kw):
    """Simulate with every invariant checked; return (Simulator, summary dict)."""
    cluster = homogeneous(nodes, gpus, racks)
    teams = quota_teams(jobs, cluster) if teams is None else teams
    sim = Simulator(jobs, cluster, teams, config(policy, **kw)).run()
    return sim, summarize(sim, 0.0).summary


def team(name, nominal, cohort="c", **kw) -> Team:
    return Team(name, 1.0, cohort, {FLAVOR: Quota(nominal, **kw)})

"""The simulated cluster: node shapes, GPU flavors for jobs that have none, team quotas."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from scheduler.model import Quota, Team

from .trace import TraceJob

DEFAULT_FLAVOR = "gpu"
COHORT = "trace"
QUOTA_MODES = ("proportional", "equal")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    flavor: str
    gpus: int
    rack: str = ""
    block: str = ""


def homogeneous(
    nodes: int, gpus_per_node: int, racks: int = 1, flavor: str = DEFAULT_FLAVOR
) -> list[NodeSpec]:
    """Return `nodes` identical nodes split evenly over `racks` racks (n0000 in r00 first)."""
    if nodes < 1 or gpus_per_node < 1 or racks < 1:
        raise ValueError("nodes, GPUs per node and racks must be at least 1")
    racks = min(racks, nodes)
    return [
        NodeSpec(f"n{i:04d}", flavor, gpus_per_node, f"r{i * racks // nodes:02d}")
        for i in range(nodes)
    ]


def read_openb_nodes(
    path: str | Path, *, limit: int | None = None, single_flavor: bool = False
) -> list[NodeSpec]:
    """Read openb_gpu_nodes.csv: each node's GPU count, its model as flavor (lower case).

    `limit` keeps that many nodes, evenly spaced in (model, GPUs, name) order so
    the mix of shapes and models stays as in the full cluster. `single_flavor`
    puts every node in one flavor: heterogeneous shapes, no model constraint.
    The trace has no racks, so every node is in one topology domain.
    """
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["gpu"]) > 0]
    rows.sort(key=lambda r: (r["model"], int(r["gpu"]), r["sn"]))
    if limit is not None and limit < len(rows):
        rows = [rows[i * len(rows) // limit] for i in range(limit)]
    return [
        NodeSpec(r["sn"], DEFAULT_FLAVOR if single_flavor else r["model"].lower(), int(r["gpu"]))
        for r in sorted(rows, key=lambda r: r["sn"])
    ]


def capacity(nodes: Iterable[NodeSpec]) -> dict[str, int]:
    """Return GPUs per flavor."""
    out: dict[str, int] = {}
    for n in nodes:
        out[n.flavor] = out.get(n.flavor, 0) + n.gpus
    return dict(sorted(out.items()))


def assign_flavors(jobs: Sequence[TraceJob], nodes: Sequence[NodeSpec]) -> list[TraceJob]:
    """Give every job without a flavor one, in proportion to each flavor's GPUs.

    Smooth weighted round robin (nginx's) over the flavors whose largest node
    holds one of the job's workers, in submit order: deterministic, and each
    flavor gets load in proportion to its size. A named flavor is kept, and a
    job no flavor can host keeps the largest one (it will wait as never_fits).
    """
    cap = capacity(nodes)
    if not cap:
        raise ValueError("the cluster has no GPUs")
    largest: dict[str, int] = {}
    for n in nodes:
        largest[n.flavor] = max(largest.get(n.flavor, 0), n.gpus)
    current = dict.fromkeys(cap, 0.0)
    out = []
    for job in jobs:
        if job.flavor is not None:
            out.append(job)
            continue
        fits = [f for f in cap if largest[f] >= job.gpus_per_worker]
        if not fits:
            out.append(replace(job, flavor=max(cap, key=lambda f: (largest[f], cap[f]))))
            continue
        total = sum(cap[f] for f in fits)
        for f in fits:
            current[f] += cap[f]
        pick = max(fits, key=lambda f: (current[f], f))
        current[pick] -= total
        out.append(replace(job, flavor=pick))
    return out


def split(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split `total` whole GPUs in proportion to `weights` (largest remainder, then name)."""
    weight_sum = sum(weights.values())
    if weight_sum <= 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / weight_sum for k, w in weights.items()}
    out = {k: int(v) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def quota_teams(
    jobs: Sequence[TraceJob], nodes: Sequence[NodeSpec], mode: str = "proportional"
) -> tuple[Team, ...]:
    """Return one team per tenant of the trace, all in one cohort so idle quota is lent.

    Per flavor, the nominal quotas add up to the flavor's GPUs:
    - proportional: in proportion to each team's GPU-time demand of the flavor
      in the trace (GPUs x duration);
    - equal: the same for every team of the trace.
    No borrowing or lending limits: every team may borrow any idle quota.
    """
    if mode not in QUOTA_MODES:
        raise ValueError(f"unknown quota mode {mode!r}; known: {', '.join(QUOTA_MODES)}")
    teams = sorted({j.team for j in jobs})
    demand: dict[str, dict[str, float]] = {}
    for j in jobs:
        per_team = demand.setdefault(j.flavor or DEFAULT_FLAVOR, {})
        per_team[j.team] = per_team.get(j.team, 0.0) + j.gpus * j.duration
    quotas: dict[str, dict[str, Quota]] = {t: {} for t in teams}
    for flavor, gpus in capacity(nodes).items():
        if mode == "equal":
            weights = dict.fromkeys(teams, 1.0)
        else:
            weights = {t: demand.get(flavor, {}).get(t, 0.0) for t in teams}
        for team, nominal in split(gpus, weights).items():
            quotas[team][flavor] = Quota(nominal)
    return tuple(Team(t, 1.0, COHORT, quotas[t]) for t in teams)


# --- a Berth export may carry its cluster ------------------------------------------


def node_record(n: NodeSpec) -> dict:
    return {"name": n.name, "flavor": n.flavor, "gpus": n.gpus, "rack": n.rack, "block": n.block}


def team_record(t: Team) -> dict:
    return {
        "name": t.name,
        "weight": t.weight,
        "cohort": t.cohort,
        "quotas": {
            f: {
                "nominal": q.nominal,
                "borrowing_limit": q.borrowing_limit,
                "lending_limit": q.lending_limit,
            }
            for f, q in sorted(t.quotas.items())
        },
    }


def team_from_record(rec: dict) -> Team:
    quotas = {
        f: Quota(int(q["nominal"]), q.get("borrowing_limit"), q.get("lending_limit"))
        for f, q in (rec.get("quotas") or {}).items()
    }
    return Team(str(rec["name"]), float(rec.get("weight", 1.0)), rec.get("cohort"), quotas)


def read_berth_cluster(path: str | Path) -> tuple[list[NodeSpec], tuple[Team, ...]] | None:
    """Return the nodes and teams of a Berth JSON export, or None if it has none."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not data.get("nodes"):
        return None
    nodes = [
        NodeSpec(
            str(n["name"]), str(n["flavor"]), int(n["gpus"]), n.get("rack", ""), n.get("block", "")
        )
        for n in data["nodes"]
    ]
    teams = tuple(team_from_record(t) for t in data.get("teams") or ())
    return nodes, teams

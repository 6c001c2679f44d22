"""The largest gang a flavor's nodes can ever host: a submission bigger than that
is refused at once, as Slurm refuses a job no node configuration can satisfy.

A worker never spans nodes and a multi-node gang stays inside one topology
domain (scheduler.state.domain_kind), so with every node empty the most
workers of `per_worker` GPUs one gang can have is the best domain's sum of
`node GPUs // per_worker`. The scheduling pass applies the same rule to its
Ready nodes (`Pool.static_slots`, reason `never_fits`); both count with
scheduler.state.domain_slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .model import Node
from .state import domain_kind, domain_slots
from .words import gpus as count_gpus


@dataclass(frozen=True, slots=True)
class GangLimit:
    """What the nodes of one flavor can host for workers of `per_worker` GPUs.

    `workers` is the most one gang can have (0: no node has `per_worker` GPUs);
    `kind` is the topology level a multi-node gang stays inside; `domain` names
    the domain that holds the most (its label, "" when unlabelled), `nodes` how
    many of its nodes take a worker; `largest_node` is the biggest node's GPUs.
    """

    per_worker: int
    workers: int
    kind: str
    domain: str
    nodes: int
    largest_node: int


def largest_gang(nodes: Iterable[Node], per_worker: int, topology_key: str) -> GangLimit | None:
    """Return the GangLimit of these nodes (one flavor's), or None when there are none."""
    nodes = list(nodes)
    if not nodes or per_worker < 1:
        return None
    kind = domain_kind(nodes, topology_key)
    slots = domain_slots(((getattr(n, kind), n.total_gpus) for n in nodes), per_worker)
    # Most workers first; ties to the first label, so the answer is deterministic.
    domain, (workers, hosts) = min(slots.items(), key=lambda kv: (-kv[1][0], kv[0]))
    largest = max(n.total_gpus for n in nodes)
    return GangLimit(per_worker, workers, kind, domain, hosts, largest)


def why_too_big(limit: GangLimit, workers: int, flavor: str) -> str | None:
    """Return the sentence that refuses a gang of `workers`, or None if it can fit."""
    if workers <= limit.workers or limit.workers == 0:
        return None
    gpus = limit.per_worker
    where = f"{limit.kind} {limit.domain}" if limit.domain else f"the unlabelled {limit.kind}"
    nodes = f"{limit.nodes} node{'s' if limit.nodes != 1 else ''}"
    return (
        f"The largest gang of {gpus}-GPU workers the {flavor} nodes can host is "
        f"{limit.workers} worker{'s' if limit.workers != 1 else ''} ({count_gpus(limit.workers * gpus)}): "
        f"a gang stays inside one {limit.kind}, and the largest, {where}, has room for "
        f"{limit.workers} on {nodes}. Ask for at most {limit.workers} workers, or fewer GPUs "
        f"per worker."
    )

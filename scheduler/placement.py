"""Topology-aware, best-fit gang placement on a FreeIndex.

A gang is `workers` workers of `per_worker` GPUs each; a worker never spans
nodes. `choose` decides where a gang goes without changing anything; `take`
then takes the GPUs worker by worker through a transaction and undoes them in
reverse if the gang cannot complete (Volcano framework/statement.go).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .index import FreeIndex

if TYPE_CHECKING:
    from .state import Transaction

# `choose` answers (NODE, node) or (DOMAIN, domain).
NODE = 0
DOMAIN = 1

Where = tuple[int, int]


def choose(index: FreeIndex, workers: int, per_worker: int) -> Where | None:
    """Return where the gang fits right now, or None.

    1. If the whole gang fits on one node: the node with the fewest free GPUs
       that still holds it (best-fit keeps whole nodes free for big gangs).
    2. Else the topology domain that holds it on the fewest nodes, then the
       one with the fewest free GPUs (see FreeIndex.best_domain).
    """
    need = workers * per_worker
    if need > index.total or per_worker > index.cap:
        return None
    if need <= index.cap:
        node = index.best_node(need)
        if node >= 0:
            return (NODE, node)
    if workers == 1:
        return None
    d = index.best_domain(workers, per_worker)
    return None if d < 0 else (DOMAIN, d)


def take(
    index: FreeIndex, where: Where, workers: int, per_worker: int, tx: Transaction
) -> list[tuple[int, int]] | None:
    """Take the GPUs `choose` found; return (node, workers there) in rank order.

    Returns None, with everything undone, if the gang cannot complete.
    """
    kind, at = where
    if kind == NODE:
        tx.take(index, at, workers * per_worker)
        return [(at, workers)]
    mark = tx.mark()
    picks = []
    left = workers
    while left:
        node, n = _next_node(index, at, left, per_worker)
        if node < 0:
            tx.rollback(mark)
            return None
        tx.take(index, node, n * per_worker)
        picks.append((node, n))
        left -= n
    return picks


def _next_node(index: FreeIndex, d: int, left: int, per_worker: int) -> tuple[int, int]:
    """Return the next node of domain d for the remaining workers, and how many go there.

    The smallest node that holds all remaining workers if there is one
    (best-fit for the last node), else the node with the most free GPUs.
    This takes the fewest nodes, as FreeIndex.nodes_needed counts them.
    """
    dc, heaps, cap = index.dcnt[d], index.dheaps[d], index.cap
    for c in range(min(left * per_worker, cap + 1), cap + 1):
        if dc[c]:
            return index.peek(heaps[c], c), left
    for c in range(cap, per_worker - 1, -1):
        if dc[c]:
            return index.peek(heaps[c], c), c // per_worker
    return -1, 0


def shortfall(index: FreeIndex, extra: int, workers: int, per_worker: int) -> str:
    """Return why a gang does not fit: no_capacity, fragmented or topology.

    `extra` counts free GPUs held for a backfill reservation, which the job
    could use if it were short enough.
    - no_capacity: fewer free GPUs than the gang needs;
    - fragmented: enough free GPUs, but not enough nodes with room for a worker;
    - topology: enough worker slots across nodes, but no single domain has them.
    """
    if index.total + extra < workers * per_worker:
        return "no_capacity"
    if per_worker > index.cap or index.slots(per_worker) < workers:
        return "fragmented"
    return "topology"

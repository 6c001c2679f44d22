"""Free-GPU counts of one flavor's nodes, bucketed by free count.

The index answers the two placement questions in time independent of the
number of nodes:

- which node has the fewest free GPUs that still hold `need` GPUs
  (single-node best-fit): O(buckets), a bucket per possible free count;
- which topology domain holds `workers` workers of `per_worker` GPUs with the
  fewest nodes: O(domains), from per-domain worker-slot counts kept up to date
  on every change.

It knows counts only; which GPU ids a worker gets is the pool's business
(scheduler.state). Nodes are numbered 0..n-1 in (domain, name) order, so the
lowest number is the deterministic tiebreak everywhere. Buckets are heaps with
lazy deletion: a node is pushed each time its count changes, and entries whose
node has since moved are dropped when they reach the top.
"""

from __future__ import annotations

from functools import cache
from heapq import heappop, heappush
from operator import add


@cache
def slot_delta(cap: int) -> list[list[tuple[int, ...]]]:
    """Return delta[old][new][p]: the change in workers of p GPUs a node holds
    when its free GPUs go from old to new (p = 0 is unused)."""
    return [
        [tuple(new // p - old // p if p else 0 for p in range(cap + 1)) for new in range(cap + 1)]
        for old in range(cap + 1)
    ]


def _slots(counts: list[int], cap: int) -> list[int]:
    """Return, per worker size p, the workers that nodes with these free counts hold."""
    return [0] + [sum(counts[c] * (c // p) for c in range(p, cap + 1)) for p in range(1, cap + 1)]


class FreeIndex:
    """Free GPUs per node of one flavor, with bucket and domain summaries."""

    __slots__ = (
        "free",
        "dom",
        "cap",
        "total",
        "cnt",
        "heaps",
        "dfree",
        "dcnt",
        "dheaps",
        "dslots",
        "delta",
        "touched",
    )

    def __init__(self, free: list[int], dom: list[int], ndom: int, cap: int) -> None:
        self.free = list(free)  # free[i]: free GPUs on node i
        self.dom = dom  # dom[i]: domain of node i (shared, read-only)
        self.cap = cap  # the most GPUs any node can have free
        self.delta = slot_delta(cap)  # shared, read-only
        self.total = sum(self.free)
        self.cnt = [0] * (cap + 1)  # cnt[c]: nodes with exactly c free
        self.heaps: list[list[int]] = [[] for _ in range(cap + 1)]
        self.dfree = [0] * ndom
        self.dcnt = [[0] * (cap + 1) for _ in range(ndom)]
        self.dheaps = [[[] for _ in range(cap + 1)] for _ in range(ndom)]
        for i, c in enumerate(self.free):  # nodes in increasing order: lists are heaps
            d = dom[i]
            self.cnt[c] += 1
            self.dcnt[d][c] += 1
            self.dfree[d] += c
            if c:
                self.heaps[c].append(i)
                self.dheaps[d][c].append(i)
        # dslots[d][p]: workers of p GPUs that fit on domain d's nodes right now.
        self.dslots = [_slots(dc, cap) for dc in self.dcnt]
        # Nodes whose count changed since the owner last looked (None: not recorded);
        # scheduler.state.Stops keeps its future view in step with them.
        self.touched: set[int] | None = None

    def copy(self) -> FreeIndex:
        """Return an independent index with the same counts (for projections)."""
        return FreeIndex(self.free, self.dom, len(self.dfree), self.cap)

    def _move(self, i: int, old: int, new: int) -> None:
        """Move node i from `old` to `new` free GPUs in every summary (heaps lazily)."""
        d = self.dom[i]
        if self.touched is not None:
            self.touched.add(i)
        self.free[i] = new
        self.total += new - old
        cnt, dc = self.cnt, self.dcnt[d]
        cnt[old] -= 1
        cnt[new] += 1
        dc[old] -= 1
        dc[new] += 1
        self.dfree[d] += new - old
        if new:
            heappush(self.heaps[new], i)
            heappush(self.dheaps[d][new], i)
        dslots = self.dslots
        dslots[d] = list(map(add, dslots[d], self.delta[old][new]))

    def set(self, i: int, c: int) -> None:
        """Set node i's free GPUs to c."""
        old = self.free[i]
        if c != old:
            self._move(i, old, c)

    def take(self, i: int, k: int) -> None:
        """Mark k free GPUs of node i as used."""
        c = self.free[i]
        if k > c:
            raise ValueError(f"node {i} has {c} free GPUs, cannot take {k}")
        self._move(i, c, c - k)

    def give(self, i: int, k: int) -> None:
        """Mark k GPUs of node i as free again."""
        c = self.free[i]
        if c + k > self.cap:
            raise ValueError(f"node {i} would have {c + k} free GPUs, above {self.cap}")
        self._move(i, c, c + k)

    def peek(self, heap: list[int], c: int) -> int:
        """Return the lowest-numbered node of a bucket heap whose count is still c.

        The caller has checked that the bucket is not empty.
        """
        free = self.free
        while free[heap[0]] != c:
            heappop(heap)
        return heap[0]

    def best_node(self, need: int) -> int:
        """Return the node with the fewest free GPUs that still has `need`, or -1."""
        cnt = self.cnt
        for c in range(need, self.cap + 1):
            if cnt[c]:
                return self.peek(self.heaps[c], c)
        return -1

    def most_free(self) -> int:
        """Return the largest free count on any node."""
        cnt = self.cnt
        for c in range(self.cap, 0, -1):
            if cnt[c]:
                return c
        return 0

    def slots(self, per_worker: int) -> int:
        """Return how many workers of `per_worker` GPUs fit on all nodes together."""
        cnt = self.cnt
        return sum(cnt[c] * (c // per_worker) for c in range(per_worker, self.cap + 1))

    def best_domain_slots(self, per_worker: int) -> int:
        """Return the most workers of `per_worker` GPUs that fit inside one domain."""
        if per_worker > self.cap:
            return 0
        return max((s[per_worker] for s in self.dslots), default=0)

    def nodes_needed(self, d: int, workers: int, per_worker: int) -> int:
        """Return the fewest nodes of domain d that hold the workers (largest first).

        The caller has checked that the domain has enough worker slots.
        """
        left, nodes, dc = workers, 0, self.dcnt[d]
        for c in range(self.cap, per_worker - 1, -1):
            k = dc[c]
            if not k:
                continue
            s = c // per_worker
            if k * s >= left:
                return nodes - (-left // s)
            nodes += k
            left -= k * s
        raise AssertionError("nodes_needed called on a domain without enough slots")

    def best_domain(self, workers: int, per_worker: int) -> int:
        """Return the domain for a multi-node gang, or -1 if none can host it.

        1. fewest nodes used
        2. fewest free GPUs in the domain (best-fit: least left fragmented)
        3. domain number
        """
        best = None
        for d, slots in enumerate(self.dslots):
            if slots[per_worker] < workers:
                continue
            key = (self.nodes_needed(d, workers, per_worker), self.dfree[d], d)
            if best is None or key < best:
                best = key
        return -1 if best is None else best[2]

"""The in-memory cluster of one pass: GPU pools per flavor, running jobs, transactions.

Built once from the frozen snapshot; every change during the pass goes through
a Transaction so it can be undone in reverse (Volcano framework/statement.go).
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable
from itertools import chain
from operator import attrgetter

from .index import FreeIndex
from .model import GpuId, JobId, Node, PendingJob, RunningJob, WorkerPlacement
from .ordering import stopping_key
from .quota import Ledger, TeamBook

# Placement views a pool can be in (see Pool.fails).
FREE = 0  # all free GPUs visible
HELD = 1  # GPUs held for a backfill reservation hidden


class Transaction:
    """Tentative changes to the pass state, undone in reverse on rollback."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[tuple] = []

    def take(self, index: FreeIndex, node: int, k: int) -> None:
        index.take(node, k)
        self._undo.append((index.give, node, k))

    def give(self, index: FreeIndex, node: int, k: int) -> None:
        index.give(node, k)
        self._undo.append((index.take, node, k))

    def add(self, ledger: Ledger, book: TeamBook, flavor: str, delta: int) -> None:
        ledger.add(book, flavor, delta)
        self._undo.append((ledger.add, book, flavor, -delta))

    def mark(self) -> int:
        """Return a savepoint for rollback(mark)."""
        return len(self._undo)

    def rollback(self, mark: int = 0) -> None:
        """Undo every change after `mark`, newest first."""
        undo = self._undo
        while len(undo) > mark:
            fn, *args = undo.pop()
            fn(*args)

    def view(self, pool: Pool, index: FreeIndex) -> None:
        """Let the pool's placement questions read `index` until rollback."""
        self._undo.append((setattr, pool, "index", pool.index))
        pool.index = index

    def commit(self) -> None:
        self._undo.clear()


class Pool:
    """One flavor's schedulable nodes: names, free GPU ids, the free index, holds."""

    __slots__ = (
        "flavor",
        "names",
        "domains",
        "domain_kind",
        "ids",
        "index",
        "totals",
        "max_total",
        "at",
        "held",
        "holding",
        "fails",
        "ahead",
        "stops",
        "_static",
        "_domain_nodes",
    )

    def __init__(
        self, flavor: str, nodes: list[Node], kind: str, stale: set, held_on: dict[str, int]
    ) -> None:
        nodes.sort(key=attrgetter(kind, "name"))  # kind is the label attribute
        self.flavor = flavor
        self.domain_kind = kind
        self.names = names = [n.name for n in nodes]
        self.at = at = {name: i for i, name in enumerate(names)}
        labels = [getattr(n, kind) for n in nodes]
        self.domains = sorted(set(labels))
        where = {name: d for d, name in enumerate(self.domains)}
        dom = [where[label] for label in labels]
        if stale:
            self.ids = [_unique(n.free_gpus, stale) for n in nodes]
        else:
            self.ids = [list(n.free_gpus) for n in nodes]
        self.totals = [n.total_gpus for n in nodes]
        self.max_total = cap = max(self.totals)
        # Preemption may give a node back every GPU its running jobs hold (more than
        # its total if some of them went unhealthy); only nodes holding GPUs can.
        for name, k in held_on.items():
            i = at.get(name)
            if i is not None and len(self.ids[i]) + k > cap:
                cap = len(self.ids[i]) + k
        self.index = FreeIndex([len(ids) for ids in self.ids], dom, len(self.domains), cap)
        self.held: dict[int, int] = {}  # node -> GPUs held for a reservation
        self.holding = False  # whether `held` is currently taken from the index
        # (view, GPUs per worker) -> the fewest workers that failed to fit
        self.fails: dict[tuple[int, int], int] = {}
        # (team, queue, workers, GPUs per worker, held GPUs) -> whether the GPUs the
        # queue's jobs took in this pass would place such a job (Pass.ahead_in_queue)
        self.ahead: dict[tuple, bool] = {}
        self.stops: Stops | None = None  # built when a preemption step first needs it
        self._static: dict[int, int] = {}
        self._domain_nodes: list[list[int]] | None = None

    def view(self) -> int:
        return HELD if self.holding else FREE

    def invalidate(self) -> None:
        """Forget cached placement failures (and answers of Pass.ahead_in_queue) after a
        real change to the free GPUs."""
        if self.fails:
            self.fails = {}
        if self.ahead:
            self.ahead = {}

    def static_slots(self, per_worker: int) -> int:
        """Return the most workers of `per_worker` GPUs one domain holds when empty."""
        if per_worker not in self._static:
            slots = domain_slots(zip(self.index.dom, self.totals, strict=True), per_worker)
            self._static[per_worker] = max(workers for workers, _ in slots.values())
        return self._static[per_worker]

    def domain_nodes(self) -> list[list[int]]:
        """Return the node indexes of each domain, in index order."""
        if self._domain_nodes is None:
            out: list[list[int]] = [[] for _ in self.domains]
            for i, d in enumerate(self.index.dom):
                out[d].append(i)
            self._domain_nodes = out
        return self._domain_nodes

    def assign(self, nodes: list[tuple[int, int]], per_worker: int) -> tuple[WorkerPlacement, ...]:
        """Hand out GPU ids for (node, workers) pairs, in the order given to the pool."""
        out = []
        for node, workers in nodes:
            ids = self.ids[node]
            for _ in range(workers):
                out.append(WorkerPlacement(len(out), self.names[node], tuple(ids[:per_worker])))
                del ids[:per_worker]
        return tuple(out)


def _unique(gpus: tuple[GpuId, ...], stale: set) -> list[GpuId]:
    """Return the node's free GPUs that no running job holds (a stale snapshot)."""
    if stale.isdisjoint(gpus):
        return list(gpus)
    return [g for g in gpus if g not in stale]


class Running:
    """A running or stopping job during the pass, with where its GPUs are."""

    __slots__ = ("job", "book", "pool", "_nodes", "end", "stopping", "ending", "horizon")

    def __init__(self, job: RunningJob, book: TeamBook, pool: Pool | None, now: float) -> None:
        self.job = job
        self.book = book
        self.pool = pool  # its flavor's pool, None if the flavor has no nodes
        self._nodes: list[tuple[int, int]] | None = None
        self.stopping = job.stopping
        self.ending = False  # counted as coming free by the pass's preemptors (Stops.end)
        self.horizon = 0.0  # if ending, the latest horizon it ends by (state.mark_ending)
        self.end = job.ends_by(now)  # a stopping job overdue: any moment now

    @property
    def nodes(self) -> list[tuple[int, int]]:
        """Return (node index in its flavor's pool, GPUs there), computed when first needed."""
        if self._nodes is None:
            self._nodes = _nodes_of(self.job, self.pool)
        return self._nodes

    def stop_order(self) -> tuple:
        """Return its place among stopping jobs, soonest stop first (ordering.stopping_key)."""
        return stopping_key(self.end, self.job)

    def stop(self, now: float) -> None:
        """Mark it preempted in this pass: it ends after its grace period."""
        self.stopping = True
        self.end = now + self.job.grace_period


class Stops:
    """GPUs of one pool that stopping jobs will free, and the preemptors they are promised to.

    `on[n]`: GPUs on node n held by stopping jobs (those stopping when the pass
    began and the victims of this pass); `resv[n]`: GPUs on n reserved for
    preemptors waiting for them. A reservation draws on the stopping GPUs of its
    node that stop by the time its preemptor can start (`ready`: its victims
    stopped, and each of its nodes holding its share without a later stop) first; the rest of it is GPUs
    free now, which are taken out of the free index (`hidden`) so that no other job
    of the pass takes them, then ending GPUs, then stopping GPUs that stop later.
    Drawn on every stopping GPU of its node, a preemptor whose target was 2 free
    GPUs and its victim's 4 counted a cancelled job's 2 stopping GPUs there (10
    minutes of grace) as its own, left the free ones to another job, and started 10
    minutes late (tests/scheduler/test_reclaim_stop_times.py). Stopping GPUs
    beyond the reservations of their node (`surplus`) are free for the next
    preemptor: what an earlier victim frees beyond its preemptor's need is
    counted once, by whoever uses it (scheduler.preemption).

    Running jobs that end by themselves (their max runtime) before any victim of
    the pass could have stopped (Running.ending) are kept apart (`end`): on
    `ending_jobs`, their GPUs on `ending_on` (and `jobs_on`), their quota on
    `ending_quota`; not on `jobs`, `on` or `quota` (what Pass.settled subtracts). Only a preemptor that would
    otherwise need victims counts them (scheduler.preemption, rule 2). The
    reservations of a node draw in the order they were made, each on the stopping
    GPUs that stop by the time its preemptor can start (`ready`; latest first), then
    on free GPUs (hidden), then on ending GPUs (`ending_surplus` is what is left of
    those), then on stopping GPUs that stop later (_drawn).

    `future()` is the free index as it will be once the stopping jobs have stopped
    (free now plus each node's surplus: preemption rule 2's view), kept in step with
    the pool's index and the reservations instead of rebuilt for every preemptor.
    """

    __slots__ = (
        "pool",
        "index",
        "_future",
        "_changed",
        "on",
        "jobs",
        "by_preemptor",
        "first_end",
        "jobs_on",
        "quota",
        "resv",
        "hidden",
        "by_job",
        "ready",
        "holders_on",
        "hidden_total",
        "ending_on",
        "ending_quota",
        "ending_jobs",
        "by_stop",
        "ending_by_stop",
    )

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.index = pool.index  # the free GPUs now (pool.index outside rule 2's view)
        self._future: FreeIndex | None = None
        self._changed: set[int] = set()  # nodes whose surplus may have changed
        self.on: dict[int, int] = {}
        self.jobs: list[Running] = []  # every stopping job, on schedulable nodes or not
        self.by_preemptor: dict[int, list[Running]] = {}  # of those with preempted_by set
        self.first_end = math.inf  # when the first of them stops
        self.jobs_on: dict[int, list[Running]] = {}
        self.quota: dict[TeamBook, int] = {}  # team -> GPUs its stopping jobs hold
        self.resv: dict[int, int] = {}
        self.hidden: dict[int, int] = {}
        self.by_job: dict[int, dict[int, int]] = {}  # preemptor -> node -> GPUs
        self.ready: dict[int, float] = {}  # preemptor -> when it can start
        self.holders_on: dict[int, list[int]] = {}  # node -> preemptors reserved there
        self.hidden_total = 0
        self.ending_on: dict[int, int] = {}
        self.ending_quota: dict[TeamBook, int] = {}  # team -> GPUs its ending jobs hold
        self.ending_jobs: list[Running] = []
        # `jobs` and `ending_jobs` soonest stop first (ordering.stopping_key), kept so as
        # they grow: a preemptor's wait looks through them in that order (_quota_from)
        self.by_stop: list[Running] = []
        self.ending_by_stop: list[Running] = []

    def add(self, r: Running) -> None:
        """Count a stopping job's GPUs and quota as coming free."""
        self.quota[r.book] = self.quota.get(r.book, 0) + r.job.gpus
        self.jobs.append(r)
        insort(self.by_stop, r, key=Running.stop_order)
        if r.job.preempted_by is not None:  # a victim of an earlier pass
            self.by_preemptor.setdefault(r.job.preempted_by, []).append(r)
        self.first_end = min(self.first_end, r.end)
        for node, k in r.nodes:
            self.on[node] = self.on.get(node, 0) + k
            self.jobs_on.setdefault(node, []).append(r)
            self._changed.add(node)
            self._rehide(node)

    def end(self, r: Running) -> None:
        """Count a running job that ends by itself before any victim could stop, apart."""
        self.ending_quota[r.book] = self.ending_quota.get(r.book, 0) + r.job.gpus
        self.ending_jobs.append(r)
        insort(self.ending_by_stop, r, key=Running.stop_order)
        for node, k in r.nodes:
            self.ending_on[node] = self.ending_on.get(node, 0) + k
            self.jobs_on.setdefault(node, []).append(r)

    def ending_surplus(self, node: int) -> int:
        """Return the ending GPUs of a node that no reservation draws on."""
        return self.ending_on.get(node, 0) - self._drawn(node)[2]

    def surplus(self, node: int) -> int:
        """Return the stopping GPUs of a node that no preemptor has reserved."""
        soon, _, _, late, _ = self._drawn(node)
        return self.on.get(node, 0) - soon - late

    def reserve(self, job_id: int, gpus_on: dict[int, int], until: float = 0.0) -> None:
        """Reserve GPUs per node for a preemptor whose victims stop by `until`; hide the
        part that is free now."""
        self.by_job[job_id] = gpus_on
        for node, k in gpus_on.items():
            self.resv[node] = self.resv.get(node, 0) + k
            self.holders_on.setdefault(node, []).append(job_id)
        self.ready[job_id] = max(
            (self._ready_at(node, job_id, until) for node in gpus_on), default=until
        )
        for node in gpus_on:
            self._changed.add(node)
            self._rehide(node)

    def stops_on(self, node: int) -> list[tuple[float, int]]:
        """Return (stop time, GPUs) of the stopping jobs on a node."""
        return [
            (r.end, k)
            for r in self.jobs_on.get(node, ())
            if not r.ending
            for n, k in r.nodes
            if n == node
        ]

    def _ready_at(self, node: int, job_id: int, until: float) -> float:
        """Return when the node holds the preemptor's share, not before `until`: the first
        stop time from then on at which it draws on no stopping GPU that stops later."""
        ends = sorted({end for end, _ in self.stops_on(node) if end > until})
        for t in (until, *ends):
            self.ready[job_id] = t
            if not self._drawn(node)[4].get(job_id):
                return t
        return until

    def _drawn(self, node: int) -> tuple[int, int, int, int, dict]:
        """Return what the node's reservations draw on, in the order they were made, each
        on the stopping GPUs that stop by the time its preemptor can start (`ready`;
        latest first), free GPUs (hidden), ending GPUs, then stopping GPUs that stop
        later (soonest first); and per preemptor, how many of those later ones. So a
        later reservation never changes what an earlier one draws (ordered by ready
        time, a later one that starts as soon took the earlier one's victims' GPUs and
        left it a later stop), and a slow one leaves the soon stops to the fast (one
        time for the node, the latest holder's, unhid a fast preemptor's free GPUs)."""
        holders = self.holders_on.get(node)
        if not holders:
            return 0, 0, 0, 0, {}
        stops = [[end, k] for end, k in sorted(self.stops_on(node))]
        left_free = self.index.free[node] + self.hidden.get(node, 0)
        left_ending = self.ending_on.get(node, 0)
        soon = free = ending = late = 0
        lates: dict[int, int] = {}
        ready = self.ready
        for j in holders:  # in the order they were made: a later one leaves the earlier
            need, t = self.by_job[j][node], ready.get(j, math.inf)  # ones' draws as they are
            for s in reversed(stops):  # stops that stop by its start, latest first (the
                if not need:  # soonest are left to the preemptors that start sooner)
                    break
                if s[0] <= t:
                    d = min(need, s[1])
                    s[1] -= d
                    need -= d
                    soon += d
            d = min(need, left_free)
            left_free -= d
            need -= d
            free += d
            d = min(need, left_ending)
            left_ending -= d
            need -= d
            ending += d
            for s in stops:  # then those that stop later
                if not need:
                    break
                d = min(need, s[1])
                s[1] -= d
                need -= d
                late += d
                lates[j] = lates.get(j, 0) + d
        return soon, free, ending, late, lates

    def future(self) -> FreeIndex:
        """Return the free index once every stopping job has stopped: each node's free
        GPUs plus its `surplus`. Built when first asked for, then brought up to date
        on the nodes whose free count or surplus changed since (the pool's index
        records which); so a preemptor's view costs what changed, not every stopping
        node (issue 13's fragmented clusters: 150 stopping nodes given back and taken
        again per preemptor)."""
        now, on, resv = self.index, self.on, self.resv
        if now.touched is None:
            now.touched = set()
            self._future = now.copy()
            dirty = list(on)
        else:
            dirty = now.touched | self._changed
        future, free = self._future, now.free
        for node in dirty:
            k = on.get(node, 0)
            future.set(node, free[node] + (self.surplus(node) if resv.get(node) else k))
        now.touched.clear()
        self._changed.clear()
        return future

    def holders(self, node: int) -> list[int]:
        """Return the preemptors with GPUs reserved on a node."""
        return list(self.holders_on.get(node, ()))

    def _rehide(self, node: int) -> None:
        index = self.index
        hidden = self.hidden.get(node, 0)
        want = self._drawn(node)[1]
        delta = want - hidden
        if not delta:
            return
        if delta > 0:
            index.take(node, delta)
        else:
            index.give(node, -delta)
        self.hidden[node] = want
        self.hidden_total += delta
        self.pool.invalidate()


def mark_ending(running: list[Running], now: float, pending: Iterable[PendingJob] = ()) -> None:
    """Mark the running jobs that reach their max runtime before any victim of this pass
    could have stopped (Running.ending; preemption rule 2): their max runtime ends no
    later than the flavor's horizon, now plus the shortest grace period g of its
    preemptible running jobs, and their own grace period is at most g.

    Victims stopping for a preemptor count towards g too: a victim's grace is the
    horizon its preemptor decided with. Taken from jobs not stopping, g vanished once a
    preemptor's only victim was stopping, the job ending 10 s later no longer counted,
    and the preemptor lost its claim and was told it waited for non-preemptible jobs
    (test_ending_jobs.py). Not a job stopping for another cause (cancelled): its grace
    is no victim's.

    A job past its max runtime counts too (its end is now): the portal's timeout is
    about to stop it; left out, a preemptor waiting for it lost its wait between its
    max runtime and the sweep, and preempted it, or others, after all (a review).
    Where the job runs into its limit rather than ending first, the timeout frees its
    GPUs a sweep plus its own grace period after its max runtime (docs/scheduling.md,
    rule 2): hence at most g of its own, so the wait stays within about two g.

    So do victims already requeued (`pending` with `preempted_by`) whose preemptor
    still waits with a stored target of their flavor (PendingJob.reserved_on, the claim;
    a link alone outlives the claim, and a victim of a preemptor over its quota shrank
    g for every other preemptor: a review's case): once a preemptor's victims had stopped, no preemptible job was left in
    its flavor, nothing counted as ending any more, and the preemptor, still waiting for
    the non-preemptible job it had counted on (ending 15 s later), lost its claim; the
    victims were readmitted on the GPUs they had freed for it and preempted a second
    time (the random-runs property, test_ending_jobs.py).

    And a stored claim keeps the jobs it counted on (PendingJob.reserved_ending, those on
    its target: preemption._keep_ending) while their horizon (reserved_until) is still
    ahead: those still running and not stopping count as well, whatever g is now (for
    this pass even if the claim falls in it: it is asked after; the writer then clears
    them).
    Asked anew from the jobs running now, a job with a 30 s grace period that started
    beside a 1x8 preemptor's target shrank the horizon below the +270 s at which the
    non-preemptible job it waited for ends; the target no longer held the gang, and it
    reclaimed a borrower's job with 600 s of grace and started at +630 s
    (test_ending_jobs.py). Only those jobs: the flavor's horizon moved to the claim's
    counted a borrower's 30 s-grace job admitted after it, so another team's preemptor
    waited for that job's max runtime (+570 s) instead of preempting it (+90 s) (a
    review). Their grace periods are not asked again: they were at most g when counted;
    asked of what is left of the horizon, a job with 600 s of grace stopped counting 30 s
    after the claim was made, and its preemptor preempted a second job (a random run).

    Each ending job's `horizon` is the latest it counts by."""
    grace: dict[str, float] = {}
    for r in running:
        if r.job.preemptible and (not r.stopping or r.job.preempted_by is not None):
            f = r.job.flavor
            grace[f] = min(grace.get(f, r.job.grace_period), r.job.grace_period)
    pending = list(pending)
    claims = {(j.id, j.flavor) for j in pending if j.reserved_on}  # (Pass: a stored target)
    for j in pending:
        if (j.preempted_by, j.flavor) in claims:
            grace[j.flavor] = min(grace.get(j.flavor, j.grace_period), j.grace_period)
    horizon = {f: now + g for f, g in grace.items()}
    kept: dict[JobId, float] = {}  # a job a stored claim counted on -> its latest horizon
    for j in pending:
        until = j.reserved_until
        if j.reserved_on and until is not None and until > now:
            for job_id in j.reserved_ending:
                kept[job_id] = max(kept.get(job_id, until), until)
    if not horizon and not kept:
        return
    for r in running:
        if r.stopping:
            continue
        job = r.job
        f, end = job.flavor, job.started_at + job.max_runtime
        if f in horizon and job.grace_period <= grace[f] and end <= horizon[f]:
            r.ending, r.horizon = True, horizon[f]
        until = kept.get(job.id)
        if until is not None and end <= until:  # its grace was at most g when counted
            r.ending, r.horizon = True, max(r.horizon, until)


class Started:
    """A job admitted in this pass: it holds its GPUs until now + max_runtime."""

    __slots__ = ("team", "gpus", "per_worker", "nodes", "end", "array_id")

    def __init__(self, job: PendingJob, now: float, nodes: list[tuple[int, int]]) -> None:
        self.team = job.team
        self.array_id = job.array_id
        self.gpus = job.gpus
        self.per_worker = job.gpus_per_worker
        self.nodes = nodes  # (node index, workers there)
        self.end = now + job.max_runtime


def domain_kind(nodes: list[Node], topology_key: str) -> str:
    """Return the topology level a multi-node gang of this flavor must stay inside.

    Blocks when asked for and any node of the flavor has a block label, else
    racks. Nodes without the label share one unnamed domain.
    """
    if topology_key == "block" and any(n.block for n in nodes):
        return "block"
    return "rack"


def domain_slots(nodes: Iterable[tuple], per_worker: int) -> dict:
    """Return domain -> [workers, nodes that take one] for (domain, total GPUs) pairs.

    The largest-gang rule (scheduler.capacity.largest_gang, Pool.static_slots): a
    worker never spans nodes, so an empty domain holds the sum of its nodes'
    `total // per_worker` workers of one gang.
    """
    slots: dict = {}
    for domain, total in nodes:
        fits = total // per_worker
        room = slots.setdefault(domain, [0, 0])
        room[0] += fits
        room[1] += fits > 0
    return slots


def build_pools(
    nodes: Iterable[Node], running: Iterable[RunningJob], topology_key: str
) -> dict[str, Pool]:
    """Group schedulable nodes by flavor into pools, in a deterministic order."""
    placements = [w for r in running for w in r.placement]
    held_on: dict[str, int] = {}
    for w in placements:
        held_on[w.node] = held_on.get(w.node, 0) + len(w.gpus)
    nodes = list(nodes)
    # GPUs listed free although a running job holds them (a stale snapshot).
    taken = set().union(*[w.gpus for w in placements])
    stale = taken.intersection(chain.from_iterable([n.free_gpus for n in nodes]))
    by_flavor: dict[str, list[Node]] = {}
    for n in nodes:  # each Pool sorts its nodes by (domain, name)
        by_flavor.setdefault(n.flavor, []).append(n)
    return {
        f: Pool(f, ns, domain_kind(ns, topology_key), stale, held_on)
        for f, ns in sorted(by_flavor.items())
    }


def charge_running(running: Iterable[RunningJob], ledger: Ledger) -> dict[tuple[str, str], int]:
    """Charge running jobs' GPUs to their teams' usage; return GPUs per (team, flavor)."""
    usage: dict[tuple[str, str], int] = {}
    for job in running:
        key = (job.team, job.flavor)
        usage[key] = usage.get(key, 0) + job.gpus
    for (team, flavor), gpus in sorted(usage.items()):
        ledger.add(ledger.book(team), flavor, gpus)
    return usage


def build_running(
    running: Iterable[RunningJob], pools: dict[str, Pool], ledger: Ledger, now: float
) -> list[Running]:
    """Index running jobs by id (their usage is charged by charge_running)."""
    book, pool = ledger.book, pools.get
    return [
        Running(job, book(job.team), pool(job.flavor), now)
        for job in sorted(running, key=attrgetter("id"))
    ]


def _nodes_of(job: RunningJob, pool: Pool | None) -> list[tuple[int, int]]:
    """Return (node, GPUs) of the job on schedulable nodes of its flavor."""
    if pool is None:
        return []
    if len(job.placement) == 1:
        w = job.placement[0]
        i = pool.at.get(w.node)
        return [] if i is None else [(i, len(w.gpus))]
    counts: dict[int, int] = {}
    for w in job.placement:
        i = pool.at.get(w.node)
        if i is not None:
            counts[i] = counts.get(i, 0) + len(w.gpus)
    return sorted(counts.items())

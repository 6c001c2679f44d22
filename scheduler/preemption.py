"""Preemption for a blocked job (fairshare policy only), after Kueue's classic preemption.

Two kinds of victim, both preemptible, running and not yet stopping:

- reclaim (Kueue reclaimWithinCohort: Any, narrowed to borrowers): while the
  preemptor's team uses less than its nominal quota of the flavor, jobs of
  other teams of its cohort that are borrowing (usage above nominal);
- priority (Kueue withinClusterQueue: LowerPriority, narrowed to the queue):
  jobs of the preemptor's own team and queue with strictly lower priority.

Rules:

1. The preemptor must fit within its nominal quota once the victims are gone;
   it never borrows by preempting (Kueue without borrowWithinCohort).
2. Decisions look at the cluster as it will be once every stopping job has
   stopped (`_future`): their quota is free, and so are their GPUs except
   those already reserved for a preemptor. If that is enough, no victim is
   chosen and the job waits for the stopping jobs. A job that would need
   victims also counts the running jobs that reach their max runtime before
   any victim could stop (`_ending`, Running.ending): it waits for them,
   reserving their GPUs, and preempts fewer jobs or none; they are never
   victims.
3. Victims are chosen for a concrete target placement, so that the gang fits
   once they stop. A job of another team is a victim only while that team
   still borrows, asked of the set (`_Search.allowed`: its chosen GPUs but the
   largest job's below what it borrows, the largest taken last). Cost, smaller
   first: victims of borrowing teams only before own lower-priority jobs, then
   the lowest highest priority, then the least work lost (GPU-seconds since
   the last checkpoint), then the fewest jobs; victim order breaks ties. With
   at most EXACT_MAX candidates every allowed set is searched (`_exact_all`).
   With more: a single-node gang takes each node's candidates in victim order,
   or the cheapest allowed set of them when cheaper (`_Search._exact`); the two
   cheapest nodes are completed for quota and the cheaper whole set wins. A
   multi-node gang, inside each topology domain, greedily gives the next worker
   slot to the node that gains it at the least cost per slot (then, if that
   finds no room, the least borrowing budget or the fewest borrowed GPUs per
   slot). If quota still
   does not fit, more candidates are added as a greedy cover (`_cover`); then
   each victim is put back, costliest first, if the job still fits without it
   (Kueue's minimalPreemptions).
4. The preemptor is not admitted in this pass: its victims keep their GPUs for
   their grace period. It waits (waiting_for_preemption), the GPUs of its
   target are reserved for it (scheduler.state.Stops: free ones are hidden
   from every later job of the pass) and its GPUs are charged to its team, so
   the quota and GPUs its victims free are counted once, by it.

Reservations survive the pass: a stopping victim carries `preempted_by`, and
so does the victim once requeued, until it or its preemptor is admitted; the
plan names where each waiting preemptor's reservation is (Plan.reservations),
which the writer stores in the job (PendingJob.reserved_on). At the start of
the next pass (`honour_reservations`) its preemptor is admitted first if it
fits, or else reserves again what its stopping victims will free, on the same
nodes while they still hold it, before any other job is considered; until then
no other job of its team may take the team past its nominal quota
(Pass.claim_wait).

No cycle: a reclaim only takes from a team above its nominal quota and leaves
the preemptor at or below its own, so the victim's team cannot reclaim back
from it; a priority preemption goes strictly down in priority within a queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import merge
from typing import TYPE_CHECKING, NamedTuple

from . import placement
from .backfill import CLAIM_HOLD, COHORT_HOLD, RESERVED_QUOTA
from .model import PendingJob, Preemption
from .ordering import claim_key, job_victim_key, last_progress, queue_key
from .quota import Probe, contribution
from .reasons import (
    BACKOFF,
    CAPACITY,
    COHORT_BUSY,
    QUOTA,
    RESERVED,
    WAITING_FOR_PREEMPTION,
    Wait,
)
from .requeue import RECLAIM
from .state import Running, Stops, Transaction
from .words import gpus as count_gpus

if TYPE_CHECKING:
    from .core import Pass
    from .quota import TeamBook
    from .state import Pool

# The most candidates for which the exact search of victims runs (a preemptor's, or
# one node's), and the most fit checks it may spend before the search per target
# takes over (a hard search over 12 candidates may check up to 4,096 sets).
EXACT_MAX = 12
EXACT_CHECKS = 1024
# The most candidates for which a quota cover is also searched exactly (_exact_cover),
# and the most candidates it may look at in all (each set's every next candidate): on
# a cluster fragmented everywhere, 8,000 one-GPU candidates made one cover take 4.6 s.
EXACT_COVER_MAX = 48
EXACT_COVER_STEPS = 16 * EXACT_CHECKS

# The orders of a domain walk (_Search.domain), tried in turn until one finds room.
CHEAPEST, BUDGET, GPUS = 0, 1, 2
NO_COST = (False, -math.inf, 0.0, 0)  # the cost of no victims (_Search.cost), below every set
DOMAIN_ORDERS = (CHEAPEST, BUDGET, GPUS)

# A job blocked for one of these may try preemption.
PREEMPT_ON = CAPACITY | {QUOTA, COHORT_BUSY}


def may_preempt(wait: Wait) -> bool:
    """Return whether a blocked job may try preemption.

    A quota or capacity reason, or `reserved` because the GPUs it fits on are
    held for another job's backfill reservation (info[2], the reservation's
    nodes, > 0; not a quota or cohort hold): with those GPUs hidden it is short
    of capacity exactly as a job that would not fit even with them, and may
    reclaim borrowed GPUs elsewhere. Without this, a within-nominal job that
    fits only on held GPUs waited for the reservation's job to start instead
    of reclaiming (replays: hours of reclaim latency, docs/simulation.md).
    """
    if wait.code in PREEMPT_ON:
        return True
    return wait.code == RESERVED and len(wait.info) > 2 and wait.info[2] > 0


def while_borrowing(gpus: int, largest: int, g: int, borrows: int) -> bool:
    """Return whether a team that borrows `borrows` GPUs, with victims chosen that hold
    `gpus` GPUs (the largest `largest`), may lose one more job of `g` GPUs: stopped
    largest last, each is stopped while the team still borrows (Kueue's rule, asked of
    the set: _Search.allowed)."""
    return gpus + g - max(largest, g) < borrows


def most_lost(borrows: int, sizes: list[int], gpus: int = 0, largest: int = 0) -> int:
    """Return the most GPUs more that reclaims may take from a team that borrows
    `borrows` GPUs, of its preemptible jobs of `sizes` GPUs, with victims of `gpus` GPUs
    (the largest `largest`) chosen already: while_borrowing asked of any set, at most
    what it borrows less one plus its largest job."""
    if borrows <= 0 or not sizes:
        return 0
    return max(0, min(sum(sizes), borrows - 1 + max(largest, *sizes) - gpus))


def held_from_borrowing(wait: Wait) -> bool:
    """Return whether the job waits only because it may not take more quota now:
    `reserved` by a cohort hold (info[2] == COHORT_HOLD), its team's waiting preemptor
    (CLAIM_HOLD, Pass.claim_wait) or the quota a GPU reservation's job needs
    (RESERVED_QUOTA, Backfill.quota_taken), or the reclaim backoff (`backoff` from the
    gate; a job in its own requeue backoff is not considered at all). Not a job its own
    team's gang holds (OWN_HOLD): its lower-priority victims are its team's jobs, whose
    ends the hold counts on, and preempting one that would end before the hold for one
    that outlasts it takes the gang's quota (a review's case: one more preemption, and
    the gang started 10 min later)."""
    if wait.code == BACKOFF:
        return True
    return (
        wait.code == RESERVED
        and len(wait.info) > 2
        and wait.info[2] in (COHORT_HOLD, CLAIM_HOLD, RESERVED_QUOTA)
    )


def try_priority_preempt(p: Pass, job: PendingJob, pool: Pool | None, wait: Wait) -> Wait | None:
    """Preempt lower-priority jobs of the job's own queue for it, if that does not make
    its team use more (held_from_borrowing); None if it cannot.

    A cohort hold or the reclaim backoff stops jobs that would borrow. A job that
    takes the place of as many or more GPUs of its own queue's lower-priority jobs,
    and is within its nominal quota once they stop (rule 1), borrows nothing more:
    its team's usage does not grow, so the hold's job (another team's, or a
    higher-priority one of its own) is not delayed by its usage (not a job its own
    team's gang holds, OWN_HOLD: held_from_borrowing). Without this, a high-priority
    job whose team filled its nominal quota with its own low-priority jobs waited for
    them to end whenever a borrower held the cohort's idle quota (10,000 s in a
    replay, tests/sim/test_preemptors.py). Only victims of its own queue, and never
    a claim on stopping jobs alone: letting every job a cohort hold stops claim or
    reclaim as usual made 4x the priority preemptions in bench/bench_core.py and
    changed five of the fourteen Philly replays (lost work +7%).
    """
    if pool is None:
        return None
    fails, n = p.preempt_fails, job.workers  # remembered as in try_preempt
    key = ("own", job.team, job.queue, job.flavor, job.priority, job.gpus_per_worker)
    if fails.get(key, math.inf) <= n:
        return None
    book = p.ledger.book(job.team)
    lower = _lower_priority(p, job, book)
    choice = None
    # Its team's jobs that reach their max runtime first make room as victims would
    # (rule 2; left out, a job needing one of each preempted nothing: a review).
    ending = p.stops(pool).ending_quota.get(book, 0)
    if lower and sum(r.job.gpus for r in lower) + ending >= job.gpus:
        # The search's quota is at most what the team uses now (once its stopping jobs
        # stop, as choose sees it): the victims free as many GPUs as the job takes. A
        # claim holds only what is beyond its team's nominal quota (Pass.claim_wait):
        # then the search may use up to that quota (_nominal_cap; held to what the team
        # used, a job 2 GPUs over preempted 2 + 2 + 4 GPUs where one 2-GPU job would do:
        # a tester's case).
        cap = p.settled(book, job.flavor)
        if wait.code == RESERVED and wait.info[2] == CLAIM_HOLD:
            cap = max(cap, book.quota(job.flavor).nominal)
        p.own_cap = (book, cap)
        try:
            choice = choose(p, job, pool, book, lower, reclaim=False)
        finally:
            p.own_cap = None
    if choice is None or not choice.victims:  # none of its queue's jobs make room
        fails[key] = min(n, fails.get(key, math.inf))
        return None
    return commit(p, job, book, pool, choice)


# How many more searches a reclaim may make for a target that leaves later jobs within
# nominal quota their place (choose), each away from the nodes the last ones spoiled.
LOOKAHEAD_TRIES = 3
# How many later jobs within nominal quota a reclaim's look-ahead places together
# (choose, _pack), the largest first.
LOOKAHEAD_JOBS = 8


class Choice(NamedTuple):
    """What a preemptor needs: new victims and the GPUs per node it will use; `ending`:
    chosen with the running jobs that end before its victims could stop counted as free."""

    victims: list[Running]
    gpus_on: dict[int, int]
    ending: bool = False


def try_preempt(p: Pass, job: PendingJob, pool: Pool | None) -> Wait | None:
    """Preempt for the job, or find stopping jobs to wait for; None if neither helps.

    Within a pass, candidates and free GPUs only shrink, so a failure is
    remembered: a later job of the same team, flavor and GPUs per worker, with
    as many or more workers and no more candidates, fails too. "No more
    candidates" holds for the same queue and priority, or when the later job
    has no lower-priority jobs of its own to preempt.
    """
    if pool is None:
        return None
    fails, n = p.preempt_fails, job.workers
    exact = (job.team, job.queue, job.flavor, job.priority, job.gpus_per_worker)
    if fails.get(exact, math.inf) <= n:
        return None
    book = p.ledger.book(job.team)
    f = job.flavor
    if book.used(f) - p.own_gpus(job.team, f) + job.gpus > book.quota(f).nominal:
        return None  # rule 1 fails even if every GPU of its team came free
    lower = _lower_priority(p, job, book)
    base = (job.team, job.flavor, job.gpus_per_worker)
    if not lower and fails.get(base, math.inf) <= n:
        return None
    choice = choose(p, job, pool, book, lower)
    if choice is None:
        fails[exact] = min(n, fails.get(exact, math.inf))
        fails[base] = min(n, fails.get(base, math.inf))
        return None
    return commit(p, job, book, pool, choice)


def choose(
    p: Pass,
    job: PendingJob,
    pool: Pool,
    book: TeamBook,
    lower: list[Running],
    reclaim: bool = True,
) -> Choice | None:
    """Return the victims and target of a preemptor, or None; nothing is changed.

    `reclaim` False: its own lower-priority jobs are the only candidates. A reclaim
    whose target takes the last place that a later job of the pass, within nominal
    quota, of another team of its cohort could reclaim (_spoiled) is searched again
    away from the nodes of that place, and the other target is taken if it leaves
    that job a place and spoils none the first one did not. Both jobs are promised their
    quota: a 1x8 job that reclaimed the cheapest node of the only block with two
    nodes left a 2x8 gang after it in the same pass no victim set, for as long as the
    borrower's jobs ran, when the third node, in another block, held the 1x8 job as
    well (a fifth tester's case). Taken where it left the later job no place either
    (the borrower, once the first job's victims stopped, borrowed too little to lose
    the jobs there), the other target only cost the first job an hour and more work
    (a sixth tester's case): tests/scheduler/test_reclaim_lookahead.py.

    Each alone is not all together: where the target spoils no later job's place alone,
    the later jobs are placed together (_pack, up to LOOKAHEAD_JOBS of them, largest
    first), and if fewer fit after the target than with the job placed among them, the
    search is made again. A 2x4 job spread over the halves of two nodes left a later
    1x8 job one whole node and a later 2x8 gang two, in a block of four, but not both,
    and the gang waited for the borrower's 100-hour jobs when the 2x4 job fitted one
    node (bench/lookahead_scan.py: 8 of 315 random cases with three such jobs). Of the
    other targets found (searched away from the GPUs the later jobs take when placed
    first, and away from the nodes the targets tried spoil), one that spoils no place
    alone and leaves more of them a place together wins: most placed, then cheapest."""
    choice = _choose(p, job, pool, book, lower, reclaim)
    if choice is None or not reclaim or not choice.victims or book.cohort is None:
        return choice
    # asked apart: figures cached now would be stale once its victims stop (a decision
    # later in the pass read them: test_verdicts_true.py's cache case)
    parts = p.asked_apart(p.kept_for_others, book, pool.flavor)[2]
    parts = _reachable(p, pool, job, lower, parts)
    if not parts:
        return choice
    future = _Future(p, pool, book.cohort)
    nodes, spoiled = _spoiled(p, future, book, choice, parts)
    later = _later(p, parts)
    if not spoiled and len(later) < 2:  # one later job: _spoiled's answer is the joint one
        return choice
    short = len(_pack(future, later, choice)[0])
    if spoiled:
        # every shape it spoils, wherever it held: its victims' teams then borrow less,
        # and may lose fewer jobs anywhere (a review's case: a target dearer for the
        # first job, that spared one later job and took two others' places, was taken
        # as sparing all) (`spoiled` is among them; a shape it spoils that another
        # target does not spoil fits once that target is taken: _spoiled asks every
        # shape that fitted before)
        spoils = _shapes(_spoiled(p, future, book, choice, parts, True)[1])
        spared = spoils - _shapes(spoiled)

        def better(worse: list, missed: int) -> bool:  # spoils fewer, none of those,
            return _shapes(worse) <= spared and missed <= short  # and leaves as many

        avoid = dict.fromkeys(nodes, math.inf)  # node -> GPUs kept out of a target's reach
    else:  # each alone keeps a place: do they all, together? And would they, with it
        # placed among them (largest first) instead of where its cheapest target is?
        if not short or _unplaced(future, later, book, job) >= short:
            return choice

        def better(worse: list, missed: int) -> bool:
            return not worse and missed < short

        avoid = dict.fromkeys(choice.gpus_on, math.inf)
    # Away from the GPUs the later jobs take when placed first (a node they share with
    # it: a gang that had to put one worker beside a later gang's worker on a 16-GPU
    # node was kept off the whole node and found no other place, a tester's case), and
    # away from the nodes the first target spoils (or takes); then from those the
    # targets tried spoil too. Of the targets found that serve the later jobs better,
    # the one that leaves most of them a place together, then the cheapest: the first
    # found went to dearer victims and moved a gang's place (a review's case).
    searches = [packed] if (packed := _pack(future, later)[1]) else []
    found = []
    for i in range(LOOKAHEAD_TRIES + len(searches)):
        if i >= len(searches) + 1 and found:
            break
        tried = searches[i] if i < len(searches) else avoid
        other = _choose(p, job, pool, book, lower, reclaim, tried)
        if other is None:
            if tried is avoid:
                break
            continue
        more, worse = _spoiled(p, future, book, other, parts, True)
        missed = len(_pack(future, later, other)[0])
        if better(worse, missed):
            found.append((missed, victims_cost(p, book, other.victims), i, other))
        if tried is avoid:  # (a target that helps no one: not there)
            avoid.update(dict.fromkeys(more or other.gpus_on, math.inf))
    return min(found, key=lambda f: f[:3])[3] if found else choice


def _reachable(
    p: Pass, pool: Pool, job: PendingJob, lower: list[Running], parts: list
) -> list[tuple[int, tuple[str, str]]]:
    """Return `parts` (GPUs each later team waits for, kept_for_others) each at most the
    quota its team could have once the job has its own and every GPU a preemption may
    take is back (Pass.reachable; `lower`: the job's own candidates): a place kept
    beyond that is kept for a job no target admits."""
    out = []
    for k, key in parts:
        k = p.reachable(pool, p.ledger.book(key[0]), job, lower, k)
        if k > 0:
            out.append((k, key))
    return out


def _shapes(spoiled: list[tuple[TeamBook, int, int]]) -> set[tuple[int, int, int]]:
    return {(id(t), w, g) for t, w, g in spoiled}


def _later(p: Pass, parts: list[tuple[int, tuple[str, str]]]) -> list[tuple[TeamBook, int, int]]:
    """Return the later jobs of the pass within nominal quota of other teams of the
    cohort as (team, workers, GPUs each), each team's up to the quota it waits for,
    largest first (the order a packing by decreasing size places them in), at most
    LOOKAHEAD_JOBS of them; `parts`: what each team waits for (Pass.kept_for_others)."""
    jobs: list[tuple[TeamBook, int, int]] = []
    for k, key in parts:
        team, left = p.ledger.book(key[0]), k
        for (w, g), count in sorted(p.sizes[key].items(), key=lambda s: -s[0][0] * s[0][1]):
            take = min(count, left // (w * g))
            jobs.extend([(team, w, g)] * take)
            left -= take * w * g
    jobs.sort(key=_larger)
    return jobs[:LOOKAHEAD_JOBS]


def _unplaced(
    future: _Future, later: list[tuple[TeamBook, int, int]], book: TeamBook, job: PendingJob
) -> float:
    """Return how many of `later` find no place when packed together with the job, before
    its choice (as _pack places them, largest first), or infinity if the job finds none."""
    mine = (book, job.workers, job.gpus_per_worker)
    missed = _pack(future, sorted([*later, mine], key=_larger))[0]
    return math.inf if any(t is mine for t in missed) else len(missed)


def _larger(t: tuple[TeamBook, int, int]) -> tuple[int, int]:
    """The order _pack places jobs in: most GPUs first, then most GPUs per worker."""
    return -t[1] * t[2], -t[2]


def _pack(
    future: _Future, later: list[tuple[TeamBook, int, int]], choice: Choice | None = None
) -> tuple[list[tuple[TeamBook, int, int]], dict[int, int]]:
    """Return those of `later` that find no place together, before the choice or once it
    is made, and the GPUs per node the others take: placed largest first, each gang in the
    domain that holds it with the fewest worker slots and each worker on the node with
    the fewest GPUs that hold it (best fit: whole nodes and domains are kept for the
    larger jobs), on the free GPUs (_Future.free_in) and those of other teams' jobs
    that borrow, each such team giving GPUs back only while it still borrows
    (_Future.space; Kueue's rule, asked per team and node, as the jobs before took
    them): each later team alone may reclaim what a borrower borrows, not all of them
    together, and a packing that counted it so kept a place for a job that could
    reclaim nothing once the jobs before it had (a review's case)."""
    free, borrows, on, room, where = future.space(choice)
    dom = future.pool.index.dom
    room = dict(room)  # node -> GPUs free or of a team still borrowing, kept in step
    took: dict[int, int] = {}  # node -> free GPUs taken
    given: dict[tuple[int, int], int] = {}  # (node, id(team)) -> its GPUs reclaimed there
    gave: dict[int, int] = {}  # id(team) -> GPUs it gave back
    used: dict[int, int] = {}
    missed = []

    def lends(b: TeamBook) -> bool:
        return gave.get(id(b), 0) < borrows[id(b)]

    def own(team: TeamBook, n: int) -> int:  # its own jobs' GPUs, counted in `room`
        return sum(k - given.get((n, id(b)), 0) for b, k in on.get(n, ()) if b is team)

    for item in later:
        team, w, g = item
        mine = lends(team) and id(team) in where
        fit = [(k, n) for n, k in room.items() if k >= g]  # (GPUs, node)
        if mine:
            fit = [(k - own(team, n), n) for k, n in fit if k - own(team, n) >= g]
        groups: dict[int, list[tuple[int, int]]] = {0: fit}  # domain -> (GPUs, node)
        if w > 1:  # a gang's workers in one domain; a single worker anywhere
            groups = {}
            for k, n in fit:
                groups.setdefault(dom[n], []).append((k, n))
        best = None
        for group in groups.values():
            slots = sum(k // g for k, _ in group)
            if slots >= w and (best is None or slots < best[0]):
                best = (slots, group)
        if best is None:
            missed.append(item)
            continue
        todo, marks = w, (dict(room), dict(took), dict(given), dict(gave), dict(used))
        for k, n in sorted(best[1]):
            need = min(todo, k // g) * g
            todo -= need // g
            used[n] = used.get(n, 0) + need
            here = min(need, max(0, free.get(n, 0) - took.get(n, 0)))
            took[n] = took.get(n, 0) + here
            room[n] -= here
            for b, k_b in on.get(n, ()):  # the rest from its borrowers, while they borrow
                if here == need:
                    break
                if b is team or not lends(b):
                    continue
                part = min(k_b - given.get((n, id(b)), 0), need - here)
                given[(n, id(b))] = given.get((n, id(b)), 0) + part
                gave[id(b)] = gave.get(id(b), 0) + part
                room[n] -= part
                here += part
                if not lends(b):  # it borrows no more: its other GPUs leave the room
                    for m in where[id(b)]:
                        room[m] -= sum(k - given.get((m, id(b)), 0) for c, k in on[m] if c is b)
            if here < need:  # a borrower stopped borrowing on the way: it does not fit
                room, took, given, gave, used = marks
                missed.append(item)
                break
            if not todo:
                break
    return missed, used


class _Future:
    """The GPUs of a pool a later job of the pass could use, per node: free in rule 2's
    view (those of jobs that reach their max runtime first too, as _ending counts
    them) plus those its team may reclaim (Pass.reclaimable_now), before a reclaim's
    choice or once it is made (its victims stopped: their GPUs free, their teams
    borrowing that much less; its target taken). Asked node by node (`before` and
    `after` return a function of the node), domain by domain until one holds a shape."""

    __slots__ = ("p", "pool", "free", "totals", "domains", "base", "lent", "members", "_before")

    def __init__(self, p: Pass, pool: Pool, cohort: str | None = None) -> None:
        stops = p.stops(pool)
        self.members = p.ledger.members.get(cohort, ()) if cohort is not None else ()
        self.p, self.pool, self.totals = p, pool, pool.totals
        self.free = list(stops.future().free)
        for n in stops.ending_on:
            self.free[n] += max(0, stops.ending_surplus(n))
        self.domains = pool.domain_nodes()
        self.base: dict[int, int] | None = None  # node -> GPUs free, where some are (nodes)
        self.lent: tuple | None = None  # space() before the choice
        self._before: dict[int, Callable[[int], int]] = {}  # id(team) -> before(team)

    def before(self, team: TeamBook) -> Callable[[int], int]:
        """Return node -> GPUs the team could use now (the same for every choice: one
        per team)."""
        avail = self._before.get(id(team))
        if avail is None:
            free, totals = self.free, self.totals
            extra = self.p.reclaimable_now(self.pool, team)
            avail = self._before[id(team)] = lambda n: min(totals[n], free[n] + extra.get(n, 0))
        return avail

    def after(self, team: TeamBook, choice: Choice):
        """Return node -> GPUs the team could use once the choice is made."""
        free, totals, target = self.free, self.totals, choice.gpus_on
        extra = dict(self.p.reclaimable_now(self.pool, team, choice.victims))
        for r in choice.victims:
            for n, k in r.nodes:
                extra[n] = extra.get(n, 0) + k
        return lambda n: max(0, min(totals[n], free[n] + extra.get(n, 0)) - target.get(n, 0))

    def free_in(self, choice: Choice | None = None) -> dict[int, int]:
        """Return node -> GPUs free (no reclaim needed), before or once the choice is
        made (its victims' GPUs free, its target's taken)."""
        if self.base is None:
            self.base = {n: min(self.totals[n], k) for n, k in enumerate(self.free) if k}
        if choice is None:
            return self.base
        out = dict(self.base)
        for r in choice.victims:
            for n, k in r.nodes:
                out[n] = min(self.totals[n], out.get(n, 0) + k)
        for n, k in choice.gpus_on.items():
            out[n] = max(0, out.get(n, 0) - k)
        return out

    def space(self, choice: Choice | None = None) -> tuple:
        """Return what _pack places on, before or once the choice is made: free GPUs
        per node (free_in), what each team of the cohort borrows (id(team) -> GPUs:
        Pass.borrows), node -> (team, GPUs) of its jobs a reclaim may take there
        (running, preemptible, not stopping nor ending), node -> GPUs free or held by
        those jobs, and id(team) -> the nodes of its jobs. Once the choice is made its
        victims' GPUs are free and their teams borrow that much less. Built once per
        look-ahead and changed for each choice where its victims and target are."""
        if self.lent is None:
            p, f = self.p, self.pool.flavor
            borrows: dict[int, int] = {}
            on: dict[int, list[tuple[TeamBook, int]]] = {}
            for b in self.members:
                borrows[id(b)] = p.borrows(b, f, p.settled(b, f))
                if borrows[id(b)] <= 0:
                    continue
                here: dict[int, int] = {}
                for r in p.running_of(b.name, f):
                    if not (r.stopping or r.ending or not r.job.preemptible):
                        for n, k in r.nodes:
                            here[n] = here.get(n, 0) + k
                for n, k in here.items():
                    on.setdefault(n, []).append((b, k))
            free = self.free_in()
            room = dict(free)
            where: dict[int, list[int]] = {}
            for n, lent in on.items():
                room[n] = room.get(n, 0) + sum(k for _, k in lent)
                for b, _ in lent:
                    where.setdefault(id(b), []).append(n)
            self.lent = (free, borrows, on, room, where)
        if choice is None:
            return self.lent
        free, borrows, on, room, where = self.lent
        totals = self.totals
        borrows, on, room = dict(borrows), dict(on), dict(room)
        for r in choice.victims:  # its GPUs free, its team borrowing that much less
            borrows[id(r.book)] = borrows.get(id(r.book), 0) - r.job.gpus
            if id(r.book) not in where:  # (its own team's, say: never in `room`)
                continue
            for n, k in r.nodes:
                on[n] = [(b, g - k if b is r.book else g) for b, g in on.get(n, ())]
                room[n] = room.get(n, 0) - k  # (counted free below)
        for b in {id(r.book): r.book for r in choice.victims}.values():
            if id(b) in where and borrows[id(b)] <= 0:  # it borrows no more: none of its
                for n in where[id(b)]:  # jobs is a reclaim's any longer
                    room[n] -= sum(g for c, g in on[n] if c is b)
                    on[n] = [(c, g) for c, g in on[n] if c is not b]
        after = self.free_in(choice)
        for n in {*after, *free}:
            room[n] = min(totals[n], room.get(n, 0) - free.get(n, 0) + after.get(n, 0))
        return after, borrows, on, room, where

    def holds(self, avail, w: int, g: int, first=(), others: bool = False) -> bool:
        """Return whether w workers of g GPUs fit one domain, counted per worker slot as
        placement.choose places a gang: of the domains `first` (unless `others`: asked
        already), then the others."""
        if not others and any(_slots_reach(avail, nodes, g, w) for nodes in first):
            return True
        skip = {id(nodes) for nodes in first}
        return any(
            _slots_reach(avail, nodes, g, w) for nodes in self.domains if id(nodes) not in skip
        )


def _slots_reach(avail, nodes, g: int, w: int) -> bool:
    """Return whether the nodes hold w workers of g GPUs with `avail` (node -> GPUs)
    free: counted node by node until they do."""
    for n in nodes:
        w -= avail(n) // g
        if w <= 0:
            return True
    return w <= 0


def _spoiled(
    p: Pass,
    future: _Future,
    book: TeamBook,
    choice: Choice,
    parts: list[tuple[int, tuple[str, str]]],
    everywhere: bool = False,
) -> tuple[set[int], list[tuple[TeamBook, int, int]]]:
    """Return what a reclaim's choice spoils of the later jobs of the pass within nominal
    quota of other teams of the cohort (the jobs kept_for_others counts, `parts`; each
    shape it asks for that fits what it waits for): the shapes that fit a domain of its
    target before it and no domain once it is made (_Future), as (team, workers, GPUs
    each), and the target's nodes that cost them a worker slot. GPUs its victims free
    elsewhere stay the team's to reclaim or use; what its victims' teams no longer
    borrow, the team may no longer reclaim (_Search.allowed: a place the team could not
    take after any target is not spoiled by one); what the teams may reclaim is asked
    as the pass stands (Pass.reclaimable_now), not as cached. `everywhere`: the shapes
    that fit any domain before, not only the target's (what its victims' teams no longer
    borrow spoils places elsewhere too); asked only of a reclaim that spoils one, to
    compare targets."""
    pool = future.pool
    target = choice.gpus_on
    index = p.stops(pool).future()
    near = sorted({index.dom[n] for n in target})
    touched = [future.domains[d] for d in near]
    nodes: set[int] = set()
    spoiled = []
    for k, key in parts:
        team = p.ledger.book(key[0])
        before = after = None
        slots_before: dict[int, int] = {}  # GPUs per worker -> most slots in a touched domain
        slots_after: dict[int, int] = {}
        for w, g in p.sizes[key]:
            if w * g > k:
                continue  # it would borrow: not what the team waits for
            where = placement.choose(index, w, g)
            if where is not None:
                d = where[1] if where[0] == placement.DOMAIN else index.dom[where[1]]
                if d not in near:
                    continue  # free GPUs of a domain the target leaves alone hold it
            before = before or future.before(team)
            if g not in slots_before:
                slots_before[g] = max(sum(before(n) // g for n in nodes) for nodes in touched)
            if slots_before[g] < w and not (
                everywhere and future.holds(before, w, g, touched, others=True)
            ):
                continue
            after = after or future.after(team, choice)
            if g not in slots_after:
                slots_after[g] = max(sum(after(n) // g for n in nodes) for nodes in touched)
            if slots_after[g] >= w or future.holds(after, w, g, touched, others=True):
                continue
            spoiled.append((team, w, g))
            nodes.update(n for n in target if before(n) // g > after(n) // g)
    return nodes, spoiled


def _choose(
    p: Pass,
    job: PendingJob,
    pool: Pool,
    book: TeamBook,
    lower: list[Running],
    reclaim: bool = True,
    avoid: dict[int, float] | None = None,
) -> Choice | None:
    """Return choose's search (nothing changed), leaving each node of `avoid` (node ->
    GPUs) the GPUs it keeps there: its free GPUs first (_hide), then its jobs' as victims
    (_allowed); infinity keeps the whole node."""
    stops = p.stops(pool)
    tx = Transaction()
    try:
        _future(p, pool, stops, tx, book)
        hidden: dict[int, int] = {}
        _hide(pool, tx, avoid, hidden)
        f = job.flavor
        # Rule 1: it would have to borrow, with its victims and its team's jobs that
        # reach their max runtime first gone (only the view with victims counts those).
        own = sum(r.job.gpus for r in lower) + stops.ending_quota.get(book, 0)
        if book.used(f) - own + job.gpus > book.quota(f).nominal:
            return None
        if fits(p, job, pool, book):
            return Choice([], _target_gpus(job, pool, tx, stops, None))
        cands = victim_order(p, f, lower + _borrowed(p, job, book) if reclaim else lower)
        if avoid:
            cands = _allowed(cands, avoid, hidden)
        if not cands:
            return None
        _ending(p, pool, stops, tx, book)
        _hide(pool, tx, avoid, hidden)
        if fits(p, job, pool, book):
            return Choice([], _target_gpus(job, pool, tx, stops, None), True)
        freeable = sum(k for r in cands for _, k in r.nodes)
        if pool.index.total + freeable < job.gpus:
            return None
        victims = _victims(p, job, pool, book, cands, tx)
        if victims is None:
            return None
        until = max(p.now + r.job.grace_period for r in victims)  # its victims stopped
        return Choice(victims, _target_gpus(job, pool, tx, stops, until), True)
    finally:
        tx.rollback()


def _hide(
    pool: Pool, tx: Transaction, avoid: dict[int, float] | None, hidden: dict[int, int]
) -> None:
    """Take free GPUs of the nodes in `avoid` out of the pool's view, until rollback: as
    many as it keeps there (all: infinity), less those `hidden` already."""
    index = pool.index
    for n, keep in (avoid or {}).items():
        k = min(index.free[n], keep - hidden.get(n, 0))
        if k > 0:
            tx.take(index, n, k)
            hidden[n] = hidden.get(n, 0) + k


def _allowed(
    cands: list[Running], avoid: dict[int, float], hidden: dict[int, int]
) -> list[Running]:
    """Return the candidates, in victim order, that leave each node of `avoid` the GPUs it
    keeps there beyond the free ones hidden: on such a node, candidates while their GPUs
    there add up to at most all its candidates' GPUs less what it keeps (none where it
    keeps the whole node)."""
    on: dict[int, int] = {}
    for r in cands:
        for n, k in r.nodes:
            if n in avoid:
                on[n] = on.get(n, 0) + k
    room = {n: on.get(n, 0) - (keep - hidden.get(n, 0)) for n, keep in avoid.items()}
    out = []
    for r in cands:
        if all(n not in room or room[n] >= k for n, k in r.nodes):
            out.append(r)
            for n, k in r.nodes:
                if n in room:
                    room[n] -= k
    return out


def _future(p: Pass, pool: Pool, stops: Stops, tx: Transaction, book: TeamBook) -> None:
    """Make the pass look as it will once every stopping job has stopped (rule 2), until rollback.

    Their quota is released; their GPUs are free, but only those no preemptor has
    reserved yet: the pool's index is the stops' future index (Stops.future). Only the quota of the preemptor's
    team and of its cohort is released: choose reads no other team's usage (its
    victims are its own team's or its cohort's, its headroom is its cohort's), so
    the others' would be released and restored for nothing.
    """
    if pool.index is not stops.index:
        raise RuntimeError("rule 2's view is already in place")
    _release_quota(p, pool.flavor, book, stops.quota, tx)
    tx.view(pool, stops.future())


def _ending(
    p: Pass, pool: Pool, stops: Stops, tx: Transaction, book: TeamBook, kept: bool = False
) -> None:
    """Add to rule 2's view, until rollback, the running jobs that end by themselves
    before any victim of the pass could stop (Running.ending): their quota (the
    preemptor's team's and cohort's, as `_future`) and their GPUs no reservation draws
    on. A preemptor that counts them preempts fewer jobs or none: a victim would free
    its GPUs no sooner, and loses its work (issue 13: 18% of the replays' preemptions).

    A new target counts them only on nodes where no other preemptor holds GPUs
    (`kept`: a target the last pass stored counts them wherever it is). A target is
    a number of GPUs per node: once the jobs ending there have ended on a shared node,
    the first preemptor admitted took the GPUs free for the other one, which then
    waited a pass longer than it was told (a random run of test_runs.py)."""
    if not stops.ending_quota:  # ending jobs on cordoned nodes give quota, not GPUs
        return
    _release_quota(p, pool.flavor, book, stops.ending_quota, tx)
    held = {} if kept else stops.holders_on  # node -> preemptors with GPUs reserved there
    for node in stops.ending_on:
        k = stops.ending_surplus(node)
        if k > 0 and not held.get(node):
            tx.give(pool.index, node, k)


def _release_quota(p: Pass, f: str, book: TeamBook, quota: dict, tx: Transaction) -> None:
    """Release, until rollback, the GPUs of flavor `f` that `quota` (team -> GPUs) says
    come free, for the preemptor's team and its cohort only (rule 2's views)."""
    ledger, cohort = p.ledger, book.cohort
    for other, gpus in quota.items():
        if other is book or (cohort is not None and other.cohort == cohort):
            tx.add(ledger, other, f, -gpus)


def _target_gpus(
    job: PendingJob, pool: Pool, tx: Transaction, stops: Stops, until: float | None
) -> dict[int, int]:
    """Return the GPUs per node the job would take in rule 2's view (taken in tx), by
    best fit; where that takes spare GPUs of a job already stopping (`Stops.surplus`,
    which `_future` gave back) that stops after its own victims have (`until`; None
    for a job without victims: after the first spare stop of the pool, none is ready
    sooner), at the earliest stop time it fits instead (`_earliest`).

    By best fit alone, a 1-GPU preemptor whose victim stopped in 30 s was placed on
    the GPU another preemptor's victim freed beyond its reservation 10 minutes later,
    beside 5 free GPUs, and waited for it (a third tester's case,
    tests/scheduler/test_reclaim_disrupted.py); a job waiting for stopping jobs
    without victims was placed on the node freed in an hour beside one freed in 30
    s, and a preemptor that found no node free of stopping jobs kept the one freed
    in an hour (a fourth tester's cases, test_reclaim_stop_times.py). Whether it
    needs victims is decided on the whole view as before; only where it waits
    changes."""
    index, q = pool.index, job.gpus_per_worker
    where = placement.choose(index, job.workers, q)
    mark = tx.mark()
    nodes = placement.take(index, where, job.workers, q, tx)
    last = max((_last_spare(stops, node) for node, _ in nodes), default=-math.inf)
    if until is None and last > stops.first_end:  # (else no stop is ready sooner)
        until = min(_first_spare(stops, node) for node in stops.on)
    if until is not None and last > until:
        tx.rollback(mark)
        apart = _earliest(job, index, stops, until, tx)  # the nodes, as placed there
        if apart is not None:
            for node, workers in apart:
                tx.take(index, node, workers * q)
            nodes = apart
        else:
            nodes = placement.take(index, where, job.workers, q, tx)
    return {node: workers * q for node, workers in nodes}


def _last_spare(stops: Stops, node: int) -> float:
    """Return when the last spare stopping GPU of a node comes free (the spare ones
    are those that stop last: a reservation draws on the others first), or -inf."""
    if stops.surplus(node) <= 0:
        return -math.inf
    return max(end for end, _ in stops.stops_on(node))


def _first_spare(stops: Stops, node: int) -> float:
    """Return when the first spare stopping GPU of a node comes free, or inf."""
    k = stops.surplus(node)
    if k <= 0:
        return math.inf
    for end, g in sorted(stops.stops_on(node), reverse=True):  # the spare stop last
        k -= g
        if k <= 0:
            return end
    return math.inf


def _earliest(job: PendingJob, index, stops: Stops, until: float, tx: Transaction):
    """Return the nodes (node, workers) the job takes in rule 2's view at the earliest
    stop time from `until` on, without the spare stopping GPUs that stop later (those
    that stop last are the spare ones); None if it fits at none. Fitting only gets easier as time goes on, so
    the time is found by bisection over the stop times."""
    given = []  # (node, spare stopping GPUs, their stops) where some stop after `until`
    for node in stops.on:
        k = stops.surplus(node)
        if k > 0:
            ends = stops.stops_on(node)
            if any(end > until for end, _ in ends):
                given.append((node, k, ends))
    times = [until, *sorted({end for _, _, ends in given for end, _ in ends if end > until})]

    def at(t: float):
        mark = tx.mark()
        for node, k, ends in given:  # (of a node in the view: not one _hide took out)
            late = min(k, sum(g for end, g in ends if end > t), index.free[node])
            if late > 0:
                tx.take(index, node, late)
        where = placement.choose(index, job.workers, job.gpus_per_worker)
        # the nodes as placed in this view: taken again on the whole view, a 2x4 gang
        # went back onto the node with the slow stop beside a free one
        nodes = (
            None
            if where is None
            else placement.take(index, where, job.workers, job.gpus_per_worker, tx)
        )
        tx.rollback(mark)
        return nodes

    lo, hi, found = 0, len(times) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        where = at(times[mid])
        if where is None:
            lo = mid + 1
        else:
            found, hi = where, mid - 1
    return found


def victim_order(p: Pass, flavor: str, victims: list[Running]) -> list[Running]:
    """Return the victims sorted by ordering.victim_key."""
    cfg = p.config
    aged = cfg.max_age if cfg.age_weight > 0 and cfg.max_age > 0 else math.inf
    borrowing, keys = {}, p.victim_keys
    for r in victims:  # victim_key, with each team's and job's part worked out once
        if r.book not in borrowing:
            borrowing[r.book] = 0 if p.borrows(r.book, flavor) > 0 else 1
        if r.job.id not in keys:
            keys[r.job.id] = job_victim_key(r.job, aged)
    return sorted(victims, key=lambda r: (borrowing[r.book], keys[r.job.id]))


def _lower_priority(p: Pass, job: PendingJob, book: TeamBook) -> list[Running]:
    """Return the preemptible jobs of its own queue with strictly lower priority."""
    return lower_priority(p, book.name, job.flavor, job.queue, job.priority)


def lower_priority(p: Pass, team: str, flavor: str, queue: str, priority: int) -> list[Running]:
    """Return a team's preemptible running jobs of a queue below a priority: the victims a
    job of that queue and priority may preempt by priority (also Pass.kept_for_others)."""
    return [
        r
        for r in p.running_of(team, flavor)
        if r.job.queue == queue and r.job.priority < priority and _preemptible(r)
    ]


def _borrowed(p: Pass, job: PendingJob, book: TeamBook) -> list[Running]:
    """Return the preemptible jobs of borrowing cohort peers, if its team is below nominal."""
    f = job.flavor
    if book.cohort is None or book.used(f) >= book.quota(f).nominal:
        return []
    out = []
    for other in p.ledger.members.get(book.cohort, ()):
        if other is not book and p.borrows(other, f) > 0:
            out.extend(r for r in p.running_of(other.name, f) if _preemptible(r))
    return out


def _preemptible(r: Running) -> bool:
    return r.job.preemptible and not r.stopping and not r.ending


# -- placement-aware victim choice (rule 3) ------------------------------------


def victims_cost(p: Pass, book: TeamBook, victims) -> tuple:
    """Return the cost of a preemptor's set of victims (rule 3), smaller is better: its
    own team's jobs last, then the lowest priority, the least work lost, the fewest."""
    now = p.now
    own = any(r.book is book for r in victims)  # other teams' candidates all borrow
    prio = max((r.job.priority for r in victims), default=-math.inf)
    lost = sum(r.job.gpus * max(0.0, now - last_progress(r.job)) for r in victims)
    return (own, prio, lost, len(victims))


class _Search:
    """The candidates of one preemptor by node, with what each would cost."""

    __slots__ = ("p", "job", "book", "index", "by_node", "removed", "order", "borrows")

    def __init__(self, p: Pass, job: PendingJob, pool: Pool, book: TeamBook, cands) -> None:
        self.p, self.job, self.book, self.index = p, job, book, pool.index
        self.by_node: dict[int, list[tuple[Running, int]]] = {}
        self.order = {id(r): i for i, r in enumerate(cands)}  # victim order
        f = job.flavor
        self.borrows: dict[TeamBook, int] = {}  # what each other team borrows, before any victim
        for r in cands:
            for node, k in r.nodes:
                self.by_node.setdefault(node, []).append((r, k))
            b = r.book
            if b is not book and b not in self.borrows:
                self.borrows[b] = p.borrows(b, f)
        self.removed: dict[TeamBook, tuple[int, int]] = {}  # chosen victims per team: GPUs, largest

    def allowed(self, r: Running, removed: dict) -> bool:
        """Kueue: a job of another team is a victim only while that team still borrows.

        Asked of the set, not of the order it was found in: the team's chosen victims
        (`removed`: their GPUs and the largest job's) and r can be stopped one by one
        with the team borrowing before each if they are taken largest last, that is if
        their GPUs but the largest job's add up to less than what the team borrows. Asked
        along the search's own order, a borrower's large job taken first ended its
        borrowing and refused its small jobs a gang needed (three jobs of one team, a
        4x2 gang that then waited for as long as they ran; tests/scheduler/test_victim_sets.py).
        """
        b = r.book
        if b is self.book:
            return True
        gpus, largest = removed.get(b, (0, 0))
        return while_borrowing(gpus, largest, r.job.gpus, self.borrows[b])

    @staticmethod
    def add(removed: dict, r: Running) -> None:
        """Count r among the chosen victims of its team (`removed`, changed in place)."""
        gpus, largest = removed.get(r.book, (0, 0))
        removed[r.book] = (gpus + r.job.gpus, max(largest, r.job.gpus))

    def spent(self, victims) -> int:
        """Return how much of other teams' borrowing the victims use up, given the chosen
        ones: per team, the growth of its chosen GPUs but the largest job's (what
        `allowed` compares with what it borrows)."""
        book, removed = self.book, self.removed
        after: dict[TeamBook, tuple[int, int]] = {}
        for r in victims:
            if r.book is not book:
                gpus, largest = after.get(r.book) or removed.get(r.book, (0, 0))
                after[r.book] = (gpus + r.job.gpus, max(largest, r.job.gpus))
        total = 0
        for b, (gpus, largest) in after.items():
            was_gpus, was_largest = removed.get(b, (0, 0))
            total += (gpus - largest) - (was_gpus - was_largest)
        return total

    def walk(self, node: int, free: int, goal: int, taken: set) -> list[Running] | None:
        """Return the victims on a node, in victim order, until `goal` GPUs are free there.

        A job of another team is a victim only while that team still borrows, so in
        victim order a borrower's larger job taken early can end its borrowing short
        of the goal: a 2-GPU job first, and three 1-GPU jobs stayed on a node a gang
        needed whole, which waited as long as they ran. If a job was passed over so,
        the walk is tried once more in the order that frees the most of this node
        while each team still borrows (`_budget_order`, `_most_freed`).
        """
        if free >= goal:
            return []
        items = self.by_node.get(node, ())
        picked, passed = self._walk(items, free, goal, taken)
        if picked is None and passed:
            picked, _ = self._walk(self._budget_order(items), free, goal, taken)
        return None if picked is None else self._cheaper(items, free, goal, taken, picked)

    def _cheaper(self, items, free: int, goal: int, taken: set, picked: list) -> list:
        """Return the cheapest set of victims on the node that frees `goal` GPUs there: the
        walk's, unless an exact search over the node's few candidates finds a cheaper one
        that is allowed. Victim order's least work lost is the latest start, whatever the
        job's size: a 6-GPU job started a minute ago went where a 2-GPU job started two
        minutes ago would do (360 GPU-seconds lost instead of 240), and a 2-GPU job where
        two 1-GPU jobs lose less."""
        best = self._exact(items, goal - free, taken)
        if best is not None and self.cost(best) < self.cost(picked):
            return best
        return picked

    def _exact(self, items, need: int, taken: set) -> list | None:
        """Return the cheapest allowed set of the node's candidates that frees `need` GPUs
        there, or None (none, or more than EXACT_MAX candidates: the walk's set stands).

        Branch and bound over the candidates, least work lost first: a set costs at least
        what any of its subsets costs, so a branch that costs as much as the best set found
        is cut, and one whose remaining candidates cannot free enough too."""
        cands = [(r, k) for r, k in items if id(r) not in taken]
        if not cands or len(cands) > EXACT_MAX or sum(k for _, k in cands) < need:
            return None
        book = self.book
        keyed = sorted(
            (
                (r.book is book, r.job.priority, self.cost([r])[2], self.order[id(r)], r, k)
                for r, k in cands
            ),
            key=lambda t: t[:4],
        )
        left = [0] * (len(keyed) + 1)  # GPUs the candidates from i on free on the node
        for i in range(len(keyed) - 1, -1, -1):
            left[i] = left[i + 1] + keyed[i][5]
        best: list = [None, None]  # cost, victims

        def grow(i: int, freed: int, cost: tuple, chosen: list, removed: dict) -> None:
            if freed >= need:
                if best[0] is None or cost < best[0]:
                    best[0], best[1] = cost, list(chosen)
                return
            if freed + left[i] < need:
                return
            for j in range(i, len(keyed)):
                own, prio, lost, _, r, k = keyed[j]
                after = plus(cost, (own, prio, lost))
                if best[0] is not None and after >= best[0]:
                    continue
                if freed + left[j] < need:
                    return
                if not self.allowed(r, removed):
                    continue
                chosen.append(r)
                was = removed.get(r.book)
                self.add(removed, r)
                grow(j + 1, freed + k, after, chosen, removed)
                chosen.pop()
                if was is None:
                    del removed[r.book]
                else:
                    removed[r.book] = was

        grow(0, 0, NO_COST, [], dict(self.removed))
        grow = None  # a recursive closure is a cycle: broken here, its search is freed at once
        return best[1]

    def _walk(self, items, free: int, goal: int, taken: set) -> tuple[list | None, bool]:
        removed = dict(self.removed)
        picked: list[Running] = []
        passed = False
        for r, k in items:
            if id(r) in taken:
                continue
            if not self.allowed(r, removed):
                passed = True
                continue
            picked.append(r)
            self.add(removed, r)
            free += k
            if free >= goal:
                return picked, passed
        return None, passed

    def _budget_order(self, items) -> list[tuple[Running, int]]:
        """Return a node's candidates so that each team borrows before each of its victims
        and frees the most GPUs of this node it can: per team, the set whose GPUs but its
        last one's stay below what it borrows (`_most_freed`), that set first and its last
        job after the others, then the team's other jobs; the preemptor's own team's last."""
        order = self.order
        teams: dict[TeamBook, list[tuple[Running, int]]] = {}
        own = []
        for rk in items:
            if rk[0].book is self.book:
                own.append(rk)
            else:
                teams.setdefault(rk[0].book, []).append(rk)
        first, last, rest = [], [], []
        for book, rks in teams.items():
            budget = self.borrows[book] - self.removed.get(book, (0, 0))[0]
            others, final = _most_freed(rks, budget, order)
            first.extend(others)
            if final is not None:
                last.append(final)
            picked = {id(rk[0]) for rk in others} | ({id(final[0])} if final else set())
            rest.extend(rk for rk in rks if id(rk[0]) not in picked)
        last.sort(key=lambda rk: (-rk[1], order[id(rk[0])]))
        return first + last + rest + own

    def cost(self, victims) -> tuple:
        """Return the cost of a set of victims (rule 3), smaller is better."""
        return victims_cost(self.p, self.book, victims)

    def rank(self, victims) -> tuple:
        """Return the victims' places in victim order: the tiebreak between equal costs."""
        return tuple(sorted(self.order[id(r)] for r in victims))

    def single(self, keep: int = 2) -> list[tuple]:
        """Return (cost, victims) of the `keep` cheapest single nodes that can hold the
        whole gang, cheapest first (completed for quota, a dearer node can win)."""
        need, found = self.job.gpus, []
        free = self.index.free
        bounds = []
        for node in self.by_node:
            low = self.bound(node, need - free[node])
            if low is not None:
                bounds.append(((*low, node), node))
        bounds.sort(key=lambda kv: kv[0])
        for low, node in bounds:
            if len(found) >= keep and low > found[keep - 1][0]:
                break  # this node and every later one cost more than the kept ones
            victims = self.walk(node, free[node], need, set())
            if victims is not None:
                found.append(((self.cost(victims), self.rank(victims), node), victims))
                found.sort(key=lambda kv: kv[0])
        return [(key[:2], victims) for key, victims in found[:keep]]

    def bound(self, node: int, short: int) -> tuple | None:
        """Return a lower bound of (cost, rank) of any victims on the node that free
        `short` more GPUs there, or None if all its candidates together free too few.

        So `single` walks a fragmented cluster's nodes cheapest bound first and stops
        at the first bound dearer than the sets it keeps, instead of walking them all
        (1,000 nodes of eight 1-GPU borrowers: 0.1 s per preemptor; docs/benchmarks.md).
        The bound of the work lost is `_lost_freeing`; the others: own team only if
        every candidate is, the lowest priority, as few victims as the largest
        candidates make, and the first place in victim order."""
        items = self.by_node.get(node, ())
        if short <= 0:  # defensive: a node the gang fits would have placed it
            return NO_COST, ()
        total = sum(k for _, k in items)
        if total < short:
            return None
        count, got = 0, 0
        for k in sorted((k for _, k in items), reverse=True):
            if got >= short:
                break
            got, count = got + k, count + 1
        own, prio, first, per = self._least(items)
        return (own, prio, _lost_freeing(per, short), count), (first,)

    def domain_bound(self, d: int, nodes: list[int]) -> tuple | None:
        """Return a lower bound of (cost, rank) of any victims after which the gang's
        workers fit inside domain d, or None if all its candidates together leave too few
        worker slots; so `_heuristic` searches the domains cheapest bound first and
        stops at the first bound dearer than the targets it keeps (a 2x8 gang on 1,000
        fragmented nodes: 2,000 walks per preemptor otherwise).

        Work lost: the cheapest new worker slots, each at what it adds to its node's
        `_lost_freeing` (a node's next slot costs at least as much as its previous one,
        so the cheapest slots of all are each node's cheapest first)."""
        job, index = self.job, self.index
        q = job.gpus_per_worker
        need = job.workers - index.dslots[d][q]
        items = [rk for n in nodes for rk in self.by_node.get(n, ())]
        if not items:
            return None
        if need <= 0:  # defensive: a domain the gang fits would have placed it
            return NO_COST, ()
        extra = []
        for n in nodes:
            on = self.by_node.get(n)
            if not on:
                continue
            free = index.free[n]
            per = self._least(on)[3]
            top = min(free + sum(k for _, k in on), index.cap) // q
            was = 0.0
            for slot in range(free // q + 1, top + 1):
                lost = _lost_freeing(per, slot * q - free)
                extra.append(lost - was)
                was = lost
        if len(extra) < need:
            return None
        extra.sort()
        own, prio, first, _ = self._least(items)
        return (own, prio, sum(extra[:need]), 1), (first,)

    def _least(self, items) -> tuple[bool, float, int, list[tuple[float, int]]]:
        """Return the least own-team flag, priority and victim-order place of any
        non-empty set of these candidates, and their (work lost per GPU, GPUs on the
        node), least first (`_lost_freeing`)."""
        book, order, now = self.book, self.order, self.p.now
        own, prio, first, per = True, math.inf, math.inf, []
        for r, k in items:
            job = r.job
            own = own and r.book is book
            prio = min(prio, job.priority)
            first = min(first, order[id(r)])
            per.append((max(0.0, now - last_progress(job)), k))
        per.sort()
        return own, prio, first, per

    def domain(self, d: int, nodes: list[int], frugal: int = CHEAPEST) -> tuple | None:
        """Return (cost, victims) to make room for the gang inside domain d, greedily.

        Each step takes the node whose next worker slot costs least per slot (a victim
        gang's slots on the domain's other nodes count too). A job of another team is a
        victim only while its team borrows, so the cheapest steps can spend a borrower's
        budget on a node where the gang's slot takes many of its jobs and leave too little
        for the others: 8 one-GPU jobs on one node, the borrower's last 8 borrowed GPUs,
        and its 4-GPU jobs beside free GPUs on two others stayed
        (tests/scheduler/test_reclaim_adversarial.py). So `_victims` tries a domain whose
        cheapest walk finds no room frugally, with the least spent per slot first (then
        the least cost): `BUDGET`, of what the borrowers may still lose (`spent`: a
        team's largest victim is free, taken last), then `GPUS`, of their GPUs. Neither
        order wins every case: one 8-GPU gang of a team that borrows 4 freeing two slots
        costs no budget and 8 GPUs, four of its 1-GPU jobs freeing one slot 3 and 4; a
        3-GPU job freeing one slot costs no budget and 3 GPUs, and a 4-GPU gang freeing
        two 0 and 2 per slot, where the team may lose one job only
        (tests/scheduler/test_victim_sets.py).
        """
        job, index = self.job, self.index
        q, want = job.gpus_per_worker, job.workers
        free = {n: index.free[n] for n in nodes}
        slots = index.dslots[d][q]
        taken: set[int] = set()
        chosen: list[Running] = []
        saved = self.removed
        self.removed = dict(saved)
        try:
            while slots < want:
                step = self._step(nodes, free, taken, q, frugal)
                if step is None:
                    return None
                for r in step:
                    taken.add(id(r))
                    chosen.append(r)
                    self.add(self.removed, r)
                    for n, k in r.nodes:
                        if n in free:
                            slots += (free[n] + k) // q - free[n] // q
                            free[n] += k
        finally:
            self.removed = saved
        return (self.cost(chosen), self.rank(chosen)), chosen

    def _step(self, nodes, free, taken, q, frugal=CHEAPEST) -> list[Running] | None:
        best = None
        cap, book = self.index.cap, self.book
        for n in nodes:
            goal = (free[n] // q + 1) * q
            if n not in self.by_node or goal > cap:
                continue
            victims = self.walk(n, free[n], goal, taken)
            if not victims:
                continue
            gained: dict[int, int] = {}  # on every node of the domain: a victim gang's too
            for r in victims:
                for m, k in r.nodes:
                    if m in free:
                        gained[m] = gained.get(m, 0) + k
            slots = sum((free[m] + k) // q - free[m] // q for m, k in gained.items())
            own, prio, lost, count = self.cost(victims)
            key = (own, prio, lost / slots, count / slots, self.rank(victims), n)
            if frugal == BUDGET:
                key = (own, self.spent(victims) / slots, *key[1:])
            elif frugal == GPUS:
                spent = sum(r.job.gpus for r in victims if r.book is not book)
                key = (own, spent / slots, *key[1:])
            if best is None or key < best[0]:
                best = (key, victims)
        return None if best is None else best[1]


def _most_freed(rks, budget: int, order: dict) -> tuple[list, tuple | None]:
    """Return (others, last): the victims of one team on one node that free the most of
    its GPUs there while the team borrows before each (their GPUs but the last one's
    add up to less than `budget`, what it borrows), the last to be taken last.

    Exact over a node's few jobs: each job as the last, a knapsack of the others by
    their GPUs (a job's GPUs count against the budget, its GPUs on this node are what
    it frees here). Ties: fewer victims, then victim order."""
    if budget <= 0 or not rks:
        return [], None
    best = None
    for i, final in enumerate(rks):
        others = rks[:i] + rks[i + 1 :]
        cap = min(budget - 1, sum(r.job.gpus for r, _ in others))  # a small table
        # table[c] = (freed, -count, chosen) with GPUs adding up to at most c
        table = [(0, 0, ())] * (cap + 1) if cap >= 0 else []
        for j, (r, k) in enumerate(others):
            g = r.job.gpus
            if g > cap:
                continue
            for c in range(cap, g - 1, -1):
                freed, count, chosen = table[c - g]
                cand = (freed + k, count - 1, (*chosen, j))
                if cand[:2] > table[c][:2]:
                    table[c] = cand
        freed, count, chosen = table[cap] if table else (0, 0, ())
        key = (freed + final[1], count, -order[id(final[0])])
        if best is None or key > best[0]:
            best = (key, [others[j] for j in chosen], final)
    _, chosen_others, final = best
    chosen_others.sort(key=lambda rk: order[id(rk[0])])
    return chosen_others, final


def _lost_freeing(per: list[tuple[float, int]], gpus: int) -> float:
    """Return a lower bound of the work a set of victims loses to free `gpus` GPUs on a
    node whose candidates are `per` ((work lost per GPU, GPUs on the node), least first).

    A victim loses its GPUs x the time since its last progress (`_Search.cost`) and
    frees at most its GPUs on any one node, a gang's on several nodes at most its GPUs
    in all: so freeing GPUs costs at least the cheapest GPUs' rates, a fractional
    cover. Shaved by a relative 1e-9 so that float rounding cannot put it above the sum
    it bounds."""
    lost, left = 0.0, gpus
    for rate, k in per:
        if left <= 0:
            break
        take = min(k, left)
        lost += rate * take
        left -= take
    return lost * (1 - 1e-9)


def plus(cost: tuple, one: tuple) -> tuple:
    """Return the cost (_Search.cost) of a set of victims with one more, whose own cost is
    `one`: own team's jobs if either has any, the higher priority, the work lost added,
    one job more. A set costs at least what its subsets cost: the searches cut on it."""
    return (cost[0] or one[0], max(cost[1], one[1]), cost[2] + one[2], cost[3] + 1)


def _victims(
    p: Pass, job: PendingJob, pool: Pool, book: TeamBook, cands: list[Running], tx: Transaction
) -> list[Running] | None:
    """Return a minimal victim set for the cheapest target placement, or None (rule 3).

    The victims are released in tx (quota and GPUs), so the job fits on return.

    With more candidates than the exact search takes, the cheapest class of set first:
    a set's cost begins with whether it takes its own team's jobs and the highest
    priority it takes (victims_cost), so the other teams' candidates up to the least
    priority with which the job could fit are searched first, then all candidates up to
    such a priority, then all of them (_classes), until one holds a set. Searched all at
    once, the search per target's greedy steps took a priority-1 job of the
    preemptor's queue where a set of priority-0 jobs existed (9 of 3,106 preemptions of
    an adversarial helper's random clusters of 8-24 nodes). At most three searches,
    whatever the number of priorities: searched class by class, a borrower's 8,000 jobs
    over 64 priorities took 3.5x as long (a review).
    """
    if len(cands) <= EXACT_MAX:
        return _exact_all(p, job, pool, book, _Search(p, job, pool, book, cands), cands, tx)
    for within in _classes(p, job, pool, book, cands, tx):
        mark = tx.mark()
        search = _Search(p, job, pool, book, within)
        if len(within) <= EXACT_MAX:
            found = _exact_all(p, job, pool, book, search, within, tx)
        else:
            found = _heuristic(p, job, pool, book, search, within, tx)
        if found is not None:
            return found
        tx.rollback(mark)
    return None


def _classes(p, job, pool, book, cands: list[Running], tx) -> list[list[Running]]:
    """Return the candidate lists `_victims` searches in turn, in victim order each: the
    other teams' candidates up to the least priority with which the job fits once they
    are all gone (sets of the cheapest classes: no job of its own team), then every
    candidate up to such a priority, then all of them; none if the job does not fit
    even with every candidate gone (no set does). Nothing stays released."""
    out: list[list[Running]] = []
    for kind in ([r for r in cands if r.book is not book], cands):
        if not kind or (len(kind) == len(cands) and _one_priority(kind)):
            continue  # no shorter list to find (and no release of thousands for nothing)
        top = _least_priority(p, job, pool, book, kind, tx)
        if top is not None:
            within = [r for r in kind if r.job.priority <= top]
            if len(within) < len(cands) and all(len(w) != len(within) for w in out):
                out.append(within)
        elif kind is cands:
            return []  # not even with all of them
    out.append(cands)
    return out


def _one_priority(rs: list[Running]) -> bool:
    first = rs[0].job.priority
    return all(r.job.priority == first for r in rs)


def _least_priority(p, job, pool, book, rs: list[Running], tx) -> int | None:
    """Return the least priority P such that the job fits with every job of `rs` of
    priority P or less gone, or None if it does not fit with all of them gone: one
    release per job, lowest priority first, and a fit check per priority. Nothing stays
    released."""
    mark = tx.mark()
    try:
        ordered = sorted(rs, key=lambda r: r.job.priority)
        for i, r in enumerate(ordered):
            _release(p, r, pool, tx)
            last = i + 1 == len(ordered) or ordered[i + 1].job.priority != r.job.priority
            if last and fits(p, job, pool, book):
                return r.job.priority
        return None
    finally:
        tx.rollback(mark)


def _heuristic(p, job, pool, book, search, cands, tx) -> list[Running] | None:
    """Return the victims found by the search per target (rule 3, more candidates)."""
    index = pool.index
    if placement.choose(index, job.workers, job.gpus_per_worker) is not None:
        return _complete(p, job, pool, book, search, [], cands, tx)  # only quota is short
    options = []
    if job.gpus <= index.cap:
        options += [(cost, 0, victims) for cost, victims in search.single()]
    if job.workers > 1:
        bounds = []
        for d, nodes in enumerate(pool.domain_nodes()):
            low = search.domain_bound(d, nodes)
            if low is not None:
                bounds.append((low, 1 + d, nodes))
        bounds.sort(key=lambda b: b[:2])
        for low, at, nodes in bounds:  # cheapest first, until the two kept targets cost less
            if len(options) >= 2 and (low, at) > sorted(o[:2] for o in options)[1]:
                break
            found = next(
                filter(None, (search.domain(at - 1, nodes, order) for order in DOMAIN_ORDERS)),
                None,
            )
            if found is not None:
                options.append((found[0], at, found[1]))
    options.sort(key=lambda o: (o[0], o[1]))
    tried = options[:2]
    if len(cands) <= EXACT_COVER_MAX and not quota_fits(p, job, book):
        # and the victims that free the quota alone (_cover), where they make room too: a
        # target's cheapest victims can leave nothing to complete its quota with, when a
        # dearer job there frees both (tests/scheduler/test_quota_cover.py); not among
        # thousands of candidates, whose cover alone seldom makes room (a cluster
        # fragmented everywhere: a cover of 8,000 candidates per preemptor, 2x the pass)
        tried.append((NO_COST, -1, []))
    best = None  # the targets tried, completed: the cheaper whole set wins
    for _, _, victims in tried:
        mark = tx.mark()
        chosen = _complete(p, job, pool, book, search, victims, cands, tx)
        if chosen is not None:
            key = (search.cost(chosen), search.rank(chosen))
            if best is None or key < best[0]:
                best = (key, victims)
        tx.rollback(mark)
    if best is None:
        return None
    return _complete(p, job, pool, book, search, best[1], cands, tx)


def _exact_all(p, job, pool, book, search, cands, tx) -> list[Running] | None:
    """Return the cheapest allowed set of victims after which the job fits, or None if
    there is none (released in tx, as _victims does): with few candidates, every set,
    unless that takes more than EXACT_CHECKS fit checks (`_handed_over`).

    Branch and bound, candidates cheapest first: a set costs at least what its subsets
    cost, so a branch is cut once it costs as much as the best set found, and not grown
    once the job fits (what more victims add only costs more)."""
    book = search.book
    mark = tx.mark()
    for r in cands:  # with every candidate gone it must fit, or no set will
        _release(p, r, pool, tx)
    possible = fits(p, job, pool, book)
    tx.rollback(mark)
    if not possible:
        return None
    single = {id(r): search.cost([r]) for r in cands}
    keyed = sorted(cands, key=lambda r: (single[id(r)], search.order[id(r)]))
    best: list = [None, None]
    checks = [EXACT_CHECKS]  # fit checks left; spent, the search per target decides

    def grow(i: int, chosen: list, cost: tuple, removed: dict) -> None:
        for j in range(i, len(keyed)):
            r = keyed[j]
            one = single[id(r)]
            after = plus(cost, one)
            if best[0] is not None and after > best[0][0]:
                continue
            if not search.allowed(r, removed):
                continue
            chosen.append(r)
            if (
                best[0] is None
                or after < best[0][0]
                or (after == best[0][0] and search.rank(chosen) < best[0][1])
            ):
                if checks[0] <= 0:
                    chosen.pop()
                    return
                checks[0] -= 1
                mark = tx.mark()
                _release(p, r, pool, tx)
                was = removed.get(r.book)
                search.add(removed, r)
                if fits(p, job, pool, book):
                    best[0], best[1] = (after, search.rank(chosen)), list(chosen)
                else:
                    grow(j + 1, chosen, after, removed)
                if was is None:
                    del removed[r.book]
                else:
                    removed[r.book] = was
                tx.rollback(mark)
            chosen.pop()

    grow(0, [], NO_COST, {})
    grow = None  # (a cycle, as in _Search._exact)
    if checks[0] <= 0:
        return _handed_over(p, job, pool, book, search, cands, tx, best)
    if best[1] is None:
        return None
    for r in best[1]:
        _release(p, r, pool, tx)
    return sorted(best[1], key=lambda r: search.order[id(r)])


def _handed_over(p, job, pool, book, search, cands, tx, best: list) -> list[Running] | None:
    """Return the victims of an exact search that ran out of fit checks, released in tx
    as `_exact_all` does, or None (nothing released): not every set was tried, so the
    cheaper of the set it had found by then (`best`: [(cost, rank), victims] or
    [None, None]), with each victim the job does not need put back, and the search per
    target's; if neither found one, `_trimmed`'s, if that is allowed. So it may miss a
    cheaper set, or, rarely, every set (Known limits). Taken as found, the set held a
    victim a cheaper branch not yet tried would have spared: a borrower's job in
    another block, whose GPUs and quota the 3x4 gang did not need (an adversarial
    helper's case, test_victim_sets.py). A subset of an allowed set is allowed: each
    team's victims but its largest add up to no more."""
    mark = tx.mark()
    chosen = None
    if best[1] is not None:
        for r in best[1]:
            _release(p, r, pool, tx)
        chosen = _put_back(p, job, pool, book, search, list(best[1]), tx)
        tx.rollback(mark)
    found = _heuristic(p, job, pool, book, search, cands, tx)
    if found is not None and (
        chosen is None
        or (search.cost(found), search.rank(found)) <= (search.cost(chosen), search.rank(chosen))
    ):
        return found
    tx.rollback(mark)
    if chosen is None:
        chosen = _trimmed(p, job, pool, book, search, cands, tx)
    if chosen is None:
        return None
    for r in chosen:
        _release(p, r, pool, tx)
    return sorted(chosen, key=lambda r: search.order[id(r)])


def _trimmed(p, job, pool, book, search, cands, tx) -> list[Running] | None:
    """Return the candidates the job needs of all of them, or None if that set is not
    allowed; nothing stays released.

    The last resort of `_exact_all` when its fit checks ran out before it found a set
    and the search per target found none either: every candidate released (the job
    fits then: `_exact_all` checked), then each put back, costliest first, where the
    job still fits without it. It trims for the fit alone, so a set that is not allowed
    is given up, though another might be. A 3x4 gang whose twelve candidates held a
    set waited for the borrowers' 100-hour jobs instead
    (tests/scheduler/test_reclaim_fresh.py)."""
    mark = tx.mark()
    try:
        for r in cands:
            _release(p, r, pool, tx)
        chosen = _put_back(p, job, pool, book, search, list(cands), tx)
    finally:
        tx.rollback(mark)
    removed: dict = {}
    for r in chosen:  # allowed is asked of the set: any order gives the same answer
        if not search.allowed(r, removed):
            return None
        search.add(removed, r)
    return chosen


def _complete(p, job, pool, book, search, victims, cands, tx) -> list[Running] | None:
    """Release the target's victims and, while quota does not fit, more candidates
    (_cover); then put back each victim the job does not need, costliest first.

    In victim order alone, a 7-GPU job started a minute ago went where a 1-GPU job
    would do (420 GPU-seconds lost instead of 70), and a team's 4-GPU job taken first
    ended its borrowing before its 1-GPU jobs the preemptor also needed. _cover may
    offer two covers (the greedy one and a cheaper exact one): each is completed and
    put back, and the cheaper whole set wins, since a cover's victims can also make
    the room that lets the target's go back (the greedy cover took a job beside the
    job's own that made a whole node, where the exact one's set left the target's
    victim needed: a review's case, tests/scheduler/test_quota_cover.py).
    """
    start = tx.mark()
    chosen = list(victims)
    removed: dict = {}
    for r in chosen:
        _release(p, r, pool, tx)
        search.add(removed, r)
    covers: list[list[Running]] = [[]]
    if not quota_fits(p, job, book):
        covers = _cover(p, job, book, search, chosen, removed, cands, tx)
    best = None
    for extra in covers:
        mark = tx.mark()
        for r in extra:
            _release(p, r, pool, tx)
        if fits(p, job, pool, book):
            # a subset of an allowed set is allowed: what it does not need goes back
            got = _put_back(p, job, pool, book, search, chosen + extra, tx)
            key = (search.cost(got), search.rank(got))
            if best is None or key < best[0]:
                best = (key, got)
        if len(covers) > 1:
            tx.rollback(mark)
    if best is None:
        return None
    if len(covers) > 1:  # released again: only the winner's
        tx.rollback(start)
        for r in best[1]:
            _release(p, r, pool, tx)
    return sorted(best[1], key=lambda r: search.order[id(r)])


def _put_back(p, job, pool, book, search, chosen: list, tx) -> list[Running]:
    """Put each released victim back, costliest first, where the job still fits without
    it (Kueue's `minimalPreemptions`); return the ones it needs, still released in tx."""
    for r in sorted(chosen, key=lambda r: (search.cost([r]), search.order[id(r)]), reverse=True):
        _reacquire(p, r, pool, tx)
        if fits(p, job, pool, book):
            chosen.remove(r)
        else:
            _release(p, r, pool, tx)
    return chosen


def _cover(p, job, book, search, chosen, removed, cands, tx) -> list[list[Running]]:
    """Return the sets of victims found, beyond `chosen`, that free the quota the job
    lacks (quota only: the ledger is changed and restored here): the cheapest of an
    exact search (_exact_cover) and, where that is cheaper, the greedy one's too
    (_complete completes both); none if it found none.

    Greedy: candidates are added least work lost per GPU first; before each, the
    cheapest one that would be enough by itself completes a solution, and the cheapest
    solution wins (two 1-GPU jobs a second old beat one 2-GPU job two seconds old). One
    pass over the candidates in each order: a candidate frees at most its GPUs of
    headroom, so one smaller than what the job still lacks is not tried as the last."""
    ledger, f = p.ledger, job.flavor
    picked = {id(r) for r in chosen}
    rest = [r for r in cands if id(r) not in picked]
    if not rest:
        return []
    single = {id(r): search.cost([r]) for r in rest}
    order = search.order
    by_cost = sorted(rest, key=lambda r: (single[id(r)], order[id(r)]))
    by_gpu = sorted(
        rest,
        key=lambda r: (*single[id(r)][:2], single[id(r)][2] / r.job.gpus, order[id(r)]),
    )
    largest = max(r.job.gpus for r in rest)
    removed_at_start, removed = removed, dict(removed)
    base = search.cost(chosen)
    acc: list[Running] = []
    total = base  # cost of chosen + acc, kept as victims are added

    best: tuple | None = None
    mark = tx.mark()
    try:
        for r in by_gpu:
            if id(r) in picked or not search.allowed(r, removed):
                continue
            short = job.gpus - ledger.headroom(book, f)
            if largest >= short:
                for last in by_cost:  # the cheapest enough by itself, this far
                    if last.job.gpus < short or id(last) in picked:
                        continue
                    if best is not None and plus(total, single[id(last)]) >= best[0][0]:
                        continue
                    if not search.allowed(last, removed):
                        continue
                    m = tx.mark()
                    tx.add(ledger, last.book, f, -last.job.gpus)
                    enough = quota_fits(p, job, book)
                    tx.rollback(m)
                    if enough:
                        best = (
                            (plus(total, single[id(last)]), search.rank([*acc, last])),
                            [*acc, last],
                        )
                        break
            after = plus(total, single[id(r)])
            if best is not None and after >= best[0][0]:
                break  # adding more only costs more
            tx.add(ledger, r.book, f, -r.job.gpus)
            acc.append(r)
            picked.add(id(r))
            search.add(removed, r)
            total = after
            if quota_fits(p, job, book):
                key = (total, search.rank(acc))
                if best is None or key < best[0]:
                    best = (key, list(acc))
                break
    finally:
        tx.rollback(mark)
    exact = _exact_cover(p, job, book, search, rest, removed_at_start, base, single, best)
    if exact is None:
        return []
    return [exact[1]] if best is None or best is exact else [exact[1], best[1]]


def _exact_cover(p, job, book, search, rest, removed, base, single, best) -> tuple | None:
    """Return ((cost, rank), victims) of the cheapest set of `rest` that frees the quota
    the job lacks, searched exactly (branch and bound, as `_exact_all`, cheapest first)
    over at most EXACT_CHECKS sets, each asked on a quota.Probe, and EXACT_COVER_STEPS
    candidates looked at, below `best` (the greedy cover's); `best` if it finds none
    cheaper, or if there are more than EXACT_COVER_MAX candidates (then the greedy cover
    alone). The greedy cover alone took three jobs
    where two that lost less work would do: with a team's cheapest job and its next
    taken, the one that made the pair was no longer allowed (its team would have
    stopped borrowing first; a helper's brute force: 11 of 81 cohorts with more
    candidates than the exact search takes, tests/scheduler/test_quota_cover.py).

    A branch ends where the candidates after it hold fewer GPUs than the job still
    lacks (`quota_lacks`: of its own team's, or of any); where its own team's are
    needed they are tried first (they cost most: every set of the other teams' was
    tried first, 1,024 of them, before any of its own, a review's case)."""
    if len(rest) > EXACT_COVER_MAX:
        return best
    probe = Probe(p.ledger, book, job.flavor)
    lacks = quota_lacks(p, job, book, probe)
    if not _may_free(search, rest, removed, lacks):
        return best
    order = search.order
    own = lacks[0] > 0  # then some of its own team's jobs are needed: they go first
    keyed = sorted(rest, key=lambda r: (own and r.book is not book, single[id(r)], order[id(r)]))
    mine = [0] * (len(keyed) + 1)  # GPUs of the team's own candidates from j on
    every = [0] * (len(keyed) + 1)  # GPUs of all candidates from j on
    for j in range(len(keyed) - 1, -1, -1):
        g = keyed[j].job.gpus
        every[j] = every[j + 1] + g
        mine[j] = mine[j + 1] + (g if keyed[j].book is book else 0)
    found = [best]
    sets = [EXACT_CHECKS]
    steps = [EXACT_COVER_STEPS]

    def grow(i: int, chosen: list, cost: tuple, removed: dict, lacks: tuple) -> None:
        for j in range(i, len(keyed)):
            steps[0] -= 1
            if steps[0] < 0 or _lacking(lacks, mine[j], every[j]):
                return  # out of steps, or the rest cannot free what it lacks
            r = keyed[j]
            after = plus(cost, single[id(r)])
            top = found[0]
            if top is not None and after > top[0][0]:
                continue
            if not search.allowed(r, removed):
                continue
            chosen.append(r)
            if top is None or after < top[0][0] or search.rank(chosen) < top[0][1]:
                if sets[0] <= 0:
                    chosen.pop()
                    return
                sets[0] -= 1
                probe.change(r.book, -r.job.gpus)
                was = removed.get(r.book)
                search.add(removed, r)
                now = quota_lacks(p, job, book, probe)
                if not _lacking(now, 0, 0):
                    found[0] = ((after, search.rank(chosen)), list(chosen))
                else:
                    grow(j + 1, chosen, after, removed, now)
                if was is None:
                    del removed[r.book]
                else:
                    removed[r.book] = was
                probe.change(r.book, r.job.gpus)
            chosen.pop()

    grow(0, [], base, dict(removed), lacks)
    grow = None  # (a cycle, as in _Search._exact)
    return found[0]


def _may_free(search: _Search, rest: list[Running], removed: dict, lacks: tuple) -> bool:
    """Return whether some allowed set of `rest` could free what the job lacks
    (quota_lacks): of its own team's jobs, their GPUs; of each other team's, at most
    what it borrows less one plus its largest job (while_borrowing) beyond what
    `removed` holds already. A cover no set can make took 1,024 sets to give up (a
    review's case: 240 candidates of a team that could lose 20 GPUs)."""
    book = search.book
    by_team: dict[TeamBook, list[int]] = {}
    for r in rest:
        by_team.setdefault(r.book, []).append(r.job.gpus)
    mine = sum(by_team.get(book, ()))
    most = mine
    for b, sizes in by_team.items():
        if b is not book:
            most += most_lost(search.borrows[b], sizes, *removed.get(b, (0, 0)))
    return not _lacking(lacks, mine, most)


def quota_fits(p: Pass, job: PendingJob, book: TeamBook, probe: Probe | None = None) -> bool:
    """Return whether the job fits its team's nominal quota and the cohort right now
    (and the cap of try_priority_preempt, while it searches); with `probe` (the team's
    quota.Probe), as it would if the teams it counts used that much more or less,
    nothing changed."""
    if probe is None:
        f = job.flavor
        if book.used(f) + job.gpus > _nominal_cap(p, job, book):
            return False
        return p.ledger.headroom(book, f) >= job.gpus
    if probe.used() + job.gpus > _nominal_cap(p, job, book):
        return False
    return probe.headroom() >= job.gpus


def quota_short(p: Pass, job: PendingJob, book: TeamBook, probe: Probe) -> float:
    """Return how many GPUs the cohort must give back at least before the job's quota
    fits, as `probe` counts it (0 or less: it fits; quota_fits): a search may skip
    asking until it has given back that many."""
    own, alone, together = quota_lacks(p, job, book, probe)
    return max(own, min(alone, together))


def quota_lacks(p: Pass, job: PendingJob, book: TeamBook, probe: Probe) -> tuple:
    """Return what the job's quota lacks as `probe` counts it, in GPUs that must still be
    given back: of its own team's, for its nominal quota (and the cap of
    try_priority_preempt) and its limit; then, for the cohort's part, of its own team's
    for the quota it never lends to hold the job alone, or of any team's for that and
    the cohort's slack together (quota.Ledger.room_parts: each moves by at most one per
    GPU given back). It fits when the first is 0 or less and one of the others is."""
    below, unlent, slack = probe.parts()
    own = max(probe.used() + job.gpus - _nominal_cap(p, job, book), job.gpus - below)
    return own, job.gpus - unlent, job.gpus - unlent - slack


def _lacking(lacks: tuple, mine: int, every: int) -> bool:
    """Return whether giving back `mine` GPUs of the job's own team and `every` in all
    leaves the job's quota short still (quota_lacks)."""
    own, alone, together = lacks
    return own > mine or (alone > mine and together > every)


def _nominal_cap(p: Pass, job: PendingJob, book: TeamBook) -> int:
    """Return the most GPUs the job's team may use for it: its nominal quota, and the
    cap of try_priority_preempt while it searches."""
    limit = book.quota(job.flavor).nominal
    cap = p.own_cap
    if cap is not None and cap[0] is book:
        limit = min(limit, cap[1])
    return limit


def fits(p: Pass, job: PendingJob, pool: Pool, book: TeamBook) -> bool:
    """Return whether the job could be admitted within its nominal quota right now."""
    if not quota_fits(p, job, book):
        return False
    return placement.choose(pool.index, job.workers, job.gpus_per_worker) is not None


def _release(p: Pass, r: Running, pool: Pool, tx: Transaction) -> None:
    for node, k in r.nodes:
        tx.give(pool.index, node, k)
    tx.add(p.ledger, r.book, r.job.flavor, -r.job.gpus)


def _reacquire(p: Pass, r: Running, pool: Pool, tx: Transaction) -> None:
    for node, k in r.nodes:
        tx.take(pool.index, node, k)
    tx.add(p.ledger, r.book, r.job.flavor, r.job.gpus)


# -- commit (rule 4) -----------------------------------------------------------


def commit(p: Pass, job: PendingJob, book: TeamBook, pool: Pool, choice: Choice) -> Wait:
    """Stop the new victims, reserve the target's GPUs and charge the preemptor (rule 4)."""
    stops = p.stops(pool)
    stopping = dict(stops.quota)  # before this preemptor's victims: one figure for all
    if choice.ending:  # and without the jobs it counted as ending, as it decided
        for b, gpus in stops.ending_quota.items():
            stopping[b] = stopping.get(b, 0) + gpus
    for r in choice.victims:
        p.preemptions.append(_preemption(p, job, book, r, stopping))
        was = r.end
        r.stop(p.now)
        stops.add(r)
        if p.budgets is not None:
            p.budgets.stopped(r.job, was, r.end)
    p.forget_lower(job.flavor, (r.job.team for r in choice.victims))
    # by when its victims (of this pass and earlier ones) have stopped: the reservation
    # draws on the stopping GPUs that stop by then first (state.Stops.reserve); from
    # now, a kept target of a preemptor whose victims still stopped hid the free GPUs
    # another preemptor's stopped victim had left it (a random run of test_runs.py)
    mine = _own_victims(stops, job, choice)
    stops.reserve(job.id, choice.gpus_on, max((r.end for r in mine.values()), default=p.now))
    p.charge(job)
    waited = _waited(p, job, book, pool, choice, mine)
    if waited[3]:  # it waits for jobs that reach their max runtime (the last ids)
        _keep_ending(p, job, stops, choice, set(waited[0][len(waited[0]) - waited[3] :]))
    return Wait(WAITING_FOR_PREEMPTION, waited)


def _keep_ending(p: Pass, job: PendingJob, stops: Stops, choice: Choice, ids: set) -> None:
    """Keep with a preemptor's reservation the jobs reaching their max runtime that it
    waits for on its target's nodes, and the latest horizon they count by
    (Reservation.until, ending; state.mark_ending): the next passes count them as
    ending while its claim stands, whatever shorter grace period a job started since
    brings. Not those elsewhere, which it counts for their quota only: kept, they
    counted as ending for every preemptor of the flavor, and another team's job waited
    for them, up to its claim's horizon, where a 30 s-grace victim would have let it
    start at once (a review's random runs)."""
    mine = [
        r
        for r in stops.ending_jobs
        if r.job.id in ids and any(n in choice.gpus_on for n, _ in r.nodes)
    ]
    if mine:
        horizon = max(r.horizon for r in mine)
        p.claim_until[job.id] = (horizon, tuple(sorted(r.job.id for r in mine)))


def _own_victims(stops: Stops, job: PendingJob, choice: Choice) -> dict[int, Running]:
    """Return its victims of this pass and of earlier ones still stopping (a cordoned
    node's too: their quota comes back all the same), by id(Running)."""
    mine = {id(r): r for r in choice.victims}
    for r in stops.by_preemptor.get(job.id, ()):
        mine[id(r)] = r
    return mine


def _waited(
    p: Pass, job: PendingJob, book: TeamBook, pool: Pool, choice: Choice, mine: dict
) -> tuple:
    """Return (ids, by when, how many of them are its new victims, how many of them, last,
    are running jobs that end by themselves: Running.ending) of the jobs a preemptor
    waits for, its new victims first, and claim its team's quota until then.

    Those are its victims (`mine`, _own_victims: one that frees quota only, elsewhere,
    too, and those of earlier passes that still stop: without them, the pass after its preemption said
    "waits for stopping jobs (11) ... by" 30 s for a victim with 10 minutes of grace)
    and the other
    stopping jobs on its target's nodes that stop by the time it can start
    (Stops.ready: its reservation draws on no later one); if it has neither (it fits on free GPUs once
    stopping jobs free their quota), the stopping jobs of its team and cohort. Counted
    from the target's nodes alone, a quota victim elsewhere was left out (told 30 s, it
    started after its 10-minute grace), another team's job already stopping there was
    named as one it preempted, and with nothing on the target every stopping job of the
    flavor was listed, one outside its cohort with an hour of grace among them.
    """
    stops = p.stops(pool)
    ready = stops.ready.get(job.id, math.inf)  # its reservation draws on none stopping later
    others = {
        id(r): r
        for n in choice.gpus_on
        for r in stops.jobs_on.get(n, ())
        if id(r) not in mine and (choice.ending or not r.ending) and (r.ending or r.end <= ready)
    }
    shares = p.ledger.shares_quota
    if choice.ending:  # and those whose quota it may count on, wherever they run
        others.update((id(r), r) for r in stops.ending_jobs if shares(book, r.book))
    jobs = [*stops.jobs, *stops.ending_jobs] if choice.ending else stops.jobs
    if not mine and not others:  # it waits for quota only
        others = {id(r): r for r in jobs if shares(book, r.book)} or {id(r): r for r in jobs}
    else:  # and for the quota of those elsewhere that its decision counted on
        ordered = (
            merge(stops.by_stop, stops.ending_by_stop, key=Running.stop_order)
            if choice.ending
            else stops.by_stop
        )
        others.update((id(r), r) for r in _quota_from(p, job, book, mine, others, ordered))
    first = sorted(mine.values(), key=Running.stop_order)
    then = sorted(others.values(), key=lambda r: (r.ending, r.stop_order()))
    ids = tuple(r.job.id for r in (*first, *then))
    end = max((r.end for r in (*first, *then)), default=p.now)
    p.claim(job, end)
    return (ids, end, len(first), sum(r.ending for r in then))


def _quota_from(
    p: Pass, job: PendingJob, book: TeamBook, mine: dict, others: dict, ordered
) -> list:
    """Return the stopping (or ending) jobs of its team and cohort, beyond `mine` and
    `others`, whose quota the preemptor needs: soonest end first, until its quota fits
    with theirs and its victims' released (its own charge taken back, as it decided),
    then without each of the earlier ones it fits without; none if it would not fit
    even with all of them (its decision asked another test: a priority cap).
    Rule 2's view counts every such job's quota as free: a priority preemptor whose
    team's cancelled 8-GPU job was still stopping elsewhere, with 10 minutes of grace,
    was told it would start when its victim stopped, 30 s later. So does a reclaim: a
    second preemptor that counted on the quota an earlier preemptor's victim frees
    beyond that preemptor's need (another team's job, with 90 s of grace) was told 30 s
    and started at 90 s (test_verdicts_true.py). A peer's job that the team's own
    nominal quota makes useless is not named: the pruning drops it."""
    peers = set(p.ledger.peers(book))  # the teams whose quota is pooled with its own
    given = [r for r in (*mine.values(), *others.values()) if r.book in peers]
    back = _probe(p, job, book, given)  # its quota as it decided
    short = quota_short(p, job, book, back)
    if short <= 0:
        return []
    needed = []
    for r in ordered:  # (soonest stop first: Stops.by_stop)
        if r.book not in peers or id(r) in mine or id(r) in others:
            continue
        back.change(r.book, -r.job.gpus)
        needed.append(r)
        short -= r.job.gpus  # a GPU given back frees at most a GPU of quota: asked
        if short <= 0 and (short := quota_short(p, job, book, back)) <= 0:  # only then
            break
    else:
        return []  # none would do: its decision asked another test (a priority cap)
    dropped = set()
    for r in reversed(needed[:-1]):  # the last one was needed: then the others?
        g = r.job.gpus
        back.change(r.book, g)
        if short + g <= 0:  # each part moves by at most one per GPU: it fits still
            short += g
            dropped.add(id(r))
        elif (now := quota_short(p, job, book, back)) <= 0:  # (quota_fits)
            short = now
            dropped.add(id(r))
        else:
            back.change(r.book, -g)
    return [r for r in needed if id(r) not in dropped]


def _probe(p: Pass, job: PendingJob, book: TeamBook, given: list[Running]) -> Probe:
    """Return the team's quota.Probe with its own charge and the quota of `given` (jobs
    of its team and cohort) given back."""
    probe = Probe(p.ledger, book, job.flavor)
    probe.change(book, -job.gpus)
    for r in given:
        probe.change(r.book, -r.job.gpus)
    return probe


def _preemption(p: Pass, job: PendingJob, book: TeamBook, r: Running, stopping: dict) -> Preemption:
    """Return the preemption record, with a message naming the preemptor and why.

    Usage figures are what the teams hold now, without the GPUs charged to
    preemptors waiting for victims, and without their jobs that were already
    stopping before this preemptor's victims or, where it counted them, that reach
    their max runtime first (`stopping`; each GPU counted once):
    a preemptor whose own team is being reclaimed in the same pass reads "uses 0
    of 4 nominal", not the 8 GPUs of its stopping job, which read as a team far
    above its quota reclaiming; and every victim of one preemptor reads what its
    team borrowed before them (counted after each, the third victim of a team
    that borrowed 4 was told "19 used of 19 nominal", as if it did not borrow).
    """
    f, victim = job.flavor, r.job
    if r.book is book:
        message = (
            f"preempted by job {job.id} of queue {job.team}/{job.queue}: priority "
            f"{job.priority} outranks this job's {victim.priority}"
        )
        return Preemption(victim.id, "priority", message, job.id)
    q, vq = book.quota(f), r.book.quota(f)
    held = p.held(book, f) - stopping.get(book, 0)
    message = (
        f"preempted by job {job.id} of team {job.team}, which reclaims its nominal quota: "
        f"it needs {count_gpus(job.gpus, f)} and uses {held} of {q.nominal} nominal, "
        f"while team {r.book.name} borrows ({r.book.used(f) - stopping.get(r.book, 0)} used "
        f"of {vq.nominal} nominal)"
    )
    return Preemption(victim.id, RECLAIM, message, job.id)


# -- reservations across passes ------------------------------------------------


def honour_reservations(p: Pass) -> list[PendingJob]:
    """Admit or re-reserve the preemptors named by stopping or requeued victims, first.

    Return the preemptors dealt with (admitted, or waiting again for their
    victims), in queue order; the others are considered in the pass as usual. A
    preemptor keeps its reservation while it is pending, fits its nominal quota
    and either fits now or its stopping victims will make it fit.

    The preemptors whose victims still stop reserve again first, all of them,
    before any preemptor is admitted: admitted first, by best fit, a preemptor
    whose victims have stopped could take the free GPUs of another one's target,
    which that one could only reserve again after it (its victim then stopped for
    nothing and it preempted again, or waited for days). The others, whose victims
    have all stopped, are admitted largest first (ordering.claim_key), so a small
    one's best fit does not take the hole a larger one's victims left.
    """
    links: dict[int, list[Running]] = {}
    for r in p.running:
        if r.stopping and r.job.preempted_by is not None:
            links.setdefault(r.job.preempted_by, []).append(r)
    for j in (*p.pending, *p.backing_off, *p.old_attempts, *p.array_held):
        if j.preempted_by is not None:
            links.setdefault(j.preempted_by, [])
    claims = [job for job in p.pending if job.id in links or job.reserved_on]
    kept = sorted((job for job in claims if job.reserved_on), key=lambda j: _kept_key(j, links))
    done = {job.id for job in kept if links.get(job.id) and _keep(p, job, True)}
    done |= {job.id for job in kept if job.id not in done and _keep(p, job, False)}
    done |= {
        job.id
        for job in claims
        if job.id not in done and links.get(job.id) and _reserve_again(p, job)
    }
    rest = sorted((job for job in claims if job.id not in done), key=claim_key)
    done |= {job.id for job in rest if _admit_now(p, job)}
    return [job for job in claims if job.id in done]


def _kept_key(job: PendingJob, links: dict) -> tuple:
    """Order stored reservations: preemptors with victims (stopping or requeued) before
    those that only wait for others' jobs to stop or end, then in queue order
    (ordering.queue_key). The quota and GPUs a victim frees are its preemptor's: first
    by priority, a later job that had waited for its own team's ending job took the
    quota another preemptor's victim had freed, and that one waited for the ending job
    instead (test_runs.py). Kept targets are disjoint GPUs, so the largest-first order
    of claim_key (best fit, for the preemptors placed afresh) buys nothing here; but
    where two claims share quota, the later one decided counting the earlier one's
    charge: a 2-GPU preemptor that also counted its cohort's job ending 15 s later was
    admitted first and took the quota a 1-GPU preemptor of its team, submitted a pass
    before, had freed, which then waited for the ending job (a random run at 20x)."""
    return (job.id not in links, *queue_key(job))


def _claims(p: Pass, job: PendingJob) -> tuple[Pool, TeamBook] | None:
    """Return the pool and book of a preemptor that still has a claim, else None.

    It must still fit its nominal quota (rule 1) once the stopping jobs have stopped
    (rule 2's view): a claim is what its team is guaranteed. Counted with its team's
    own stopping jobs, a priority preemptor whose victims were still stopping (passes
    more often than the grace period) looked over its nominal quota, lost its claim,
    and preempted a second job of its team.
    """
    pool = p.pools.get(job.flavor)
    book = p.ledger.book(job.team)
    if pool is None or p.static_wait(job, pool, book) is not None:
        return None
    if p.budget_wait(job) is not None:
        return None  # its team's GPU-hour budget cannot take it (now): no claim either
    if not p.within_nominal(book, job, ending=True):
        return None  # no longer within its nominal quota: no claim
    return pool, book


def _keep(p: Pass, job: PendingJob, stopping: bool) -> bool:
    """Keep a preemptor's reservation where the last pass put it, if it still holds the
    gang (PendingJob.reserved_on): reserve it again for what the stopping jobs will free
    while its own victims stop, else admit the job there if it fits now.

    A target is GPUs per node, and a node may hold two preemptors' targets: all whose
    victims still stop reserve first, so that the GPUs free now on a shared node are
    left to the one whose victims freed them (admitted first, another took them and
    the first one waited for the other's victims).

    Chosen again at each pass by best fit, a target could move onto GPUs another
    preemptor's victims had just freed, and that one preempted a second round
    (tests/scheduler/test_runs.py); and once all victims had stopped nothing said
    which nodes they had freed for whom. Targets of one pass are disjoint (a
    reservation hides its GPUs from every later job), so kept they stay disjoint,
    counted in GPUs per node. The stored reservation is itself
    the claim: a victim that ends by itself during its grace period leaves no link,
    and its preemptor, considered as usual, lost the quota to a later job of its own
    team and preempted again.
    """
    found = _claims(p, job)
    if found is None:
        return False
    pool, book = found
    on = _target_of(pool, job)
    if on is None:
        return False
    if not stopping and _holds(pool, on) and _quota_fits_now(p, job, pool, book):
        q = job.gpus_per_worker
        p.admit_on(job, pool, [(n, k // q) for n, k in sorted(on.items())])
        return True
    tx = Transaction()
    stops = p.stops(pool)
    try:
        _future(p, pool, stops, tx, book)
        ok = quota_fits(p, job, book) and _holds(pool, on)
        ending = not ok and bool(stops.ending_quota)
        if ending:  # it waited for ending jobs (choose), or its victims ended early
            _ending(p, pool, stops, tx, book, kept=True)
            ok = quota_fits(p, job, book) and _holds(pool, on)
    finally:
        tx.rollback()
    if ok:
        p.waits[job.id] = commit(p, job, book, pool, Choice([], on, ending))
    return ok


def _target_of(pool: Pool, job: PendingJob) -> dict[int, int] | None:
    """Return the job's stored target as node index -> GPUs, or None if it no longer
    describes the gang on this pool (a node gone, another shape)."""
    on: dict[int, int] = {}
    q = job.gpus_per_worker
    for name, k in job.reserved_on:
        n = pool.at.get(name)
        if n is None or k <= 0 or k % q:
            return None
        on[n] = on.get(n, 0) + k
    if sum(on.values()) != job.gpus:
        return None
    domains = {pool.index.dom[n] for n in on}
    return on if len(on) == 1 or len(domains) == 1 else None


def _holds(pool: Pool, on: dict[int, int]) -> bool:
    free = pool.index.free
    return all(free[n] >= k for n, k in on.items())


def _reserve_again(p: Pass, job: PendingJob) -> bool:
    """Reserve again what a preemptor's stopping victims will free, if that is enough."""
    found = _claims(p, job)
    if found is None:
        return False
    pool, book = found
    choice = choose(p, job, pool, book, [])
    if choice is None or choice.victims:
        return False
    p.waits[job.id] = commit(p, job, book, pool, choice)
    return True


def _admit_now(p: Pass, job: PendingJob) -> bool:
    """Admit a preemptor that fits now: on free GPUs not reserved for others, within quota
    both now and once the stopping jobs have stopped (each GPU counted once)."""
    found = _claims(p, job)
    if found is None:
        return False
    pool, book = found
    if not _quota_fits_now(p, job, pool, book):
        return False
    where = p.choose(pool, job)
    return where is not None and p.admit(job, pool, where) is not None


def _quota_fits_now(p: Pass, job: PendingJob, pool: Pool, book: TeamBook) -> bool:
    """Return whether the job fits its quota now and once the stopping jobs have stopped.

    Now: without the GPUs charged to the preemptors that wait for stopping jobs,
    which they take only once those jobs' quota is released. Then: with those
    charges, without the stopping jobs and the jobs that reach their max runtime
    first (rule 2's view: a charge may count on those ending; left in, a preemptor
    whose victim had stopped waited for another one's ending job, test_runs.py).
    The ledger alone counts both a waiting preemptor's charge and its victims'
    quota, and a preemptor whose victims have stopped would wait for another
    one's victims to stop.
    """
    tx = Transaction()
    try:
        for (team, f), gpus in p.charged.items():
            if f == job.flavor and gpus:
                tx.add(p.ledger, p.ledger.book(team), f, -gpus)
        if p.quota_wait(job, book) is not None:
            return False
        tx.rollback()
        stops = p.stops(pool)
        _future(p, pool, stops, tx, book)
        _ending(p, pool, stops, tx, book, kept=True)  # what the charges count on, too
        return p.ledger.headroom(book, job.flavor) >= job.gpus
    finally:
        tx.rollback()


# -- why reclaim cannot help (explain) -------------------------------------------


def unreclaimable(p: Pass, job: PendingJob, room: float) -> tuple | None:
    """Return why reclaim cannot give a within-nominal job the quota its cohort lent out
    (it found no victims: try_preempt).

    ("unplaced",) if reclaim would give it its quota back now (_lent_back's test)
    and its workers fit no GPUs even with every job it may preempt gone
    (_fits_without_candidates): then what stops it is where the GPUs are, not quota
    (if they do fit, None: its search failed for another reason); ("lent", GPUs of its team's
    idle quota that borrowers run non-preemptible jobs on, those teams, when enough of
    them will have ended); or None if the job would borrow or no such jobs hold its
    quota. A borrower's nominal quota covers its non-preemptible jobs first: only
    those beyond it hold lent quota (a team with 8 non-preemptible GPUs of nominal 8
    that borrows 4 with a preemptible job was said to run the lent 4 on
    non-preemptible jobs). Told the lent GPUs "free up when those end, at the latest"
    now, a job whose quota reclaim covered waited 10 minutes for a non-preemptible
    1-GPU job on the only node that holds it (a fifth tester's case, test_reclaim.py).
    """
    book, f = p.ledger.book(job.team), job.flavor
    q = book.quota(f)
    used = p.settled(book, f)
    if book.cohort is None or used + job.gpus > q.nominal:
        return None
    at, whose = _lent_back(p, job, book)
    if at <= p.now:  # quota is not it: is where the GPUs are?
        pool = p.pools.get(f)
        if pool is None or _fits_without_candidates(p, job, pool, book):
            return None  # something else (an ending job's quota, say): the plain sentence
        return ("unplaced",)
    lent, teams = 0, []
    for other in p.ledger.members.get(book.cohort, ()):
        over = other.used(f) - other.quota(f).nominal
        if other is book or over <= 0:
            continue
        fixed = [r for r in p.running_of(other.name, f) if not r.job.preemptible and not r.stopping]
        k = min(over, sum(r.job.gpus for r in fixed) - other.quota(f).nominal)
        if k > 0:
            lent += k
            teams.append(other.name)
    lent = min(lent, max(0, contribution(q, used)))
    if not lent:
        return None
    return ("lent", lent, tuple(teams), at, whose)


def _fits_without_candidates(p: Pass, job: PendingJob, pool: Pool, book: TeamBook) -> bool:
    """Return whether the job's workers fit rule 2's view (stopping and ending jobs gone)
    with every job it may preempt gone too (its queue's lower-priority jobs, its
    borrowing peers'); nothing is changed. Asked before saying that reclaim cannot place
    it: a job whose borrower's only job ended 10 s later, or whose peer borrowed only
    through a stopping job, fitted the free GPUs and was told they would not hold its
    workers (a review's cases, test_reclaim.py)."""
    stops = p.stops(pool)
    tx = Transaction()
    try:
        _future(p, pool, stops, tx, book)
        _ending(p, pool, stops, tx, book)
        for r in _lower_priority(p, job, book) + _borrowed(p, job, book):
            _release(p, r, pool, tx)
        return placement.choose(pool.index, job.workers, job.gpus_per_worker) is not None
    finally:
        tx.rollback()


def _lent_back(p: Pass, job: PendingJob, book: TeamBook) -> tuple[float, str | None]:
    """Return when the cohort can give the job its quota, at the latest, and the team
    whose job's end gives it then (None if now or never): the ends of the
    cohort's jobs that reclaim cannot take (non-preemptible or stopping) replayed on the
    ledger, soonest first, until its team's headroom and what reclaim could still take
    from the borrowers (their preemptible GPUs, up to what each borrows) hold the job.
    The sentence names that team: told that the borrowers' non-preemptible jobs "free
    up when those end, at the latest" the end of its own team's job, a job heard a time
    that those jobs, an hour longer, did not keep (an adversarial helper's case,
    test_reclaim.py).

    A team whose job ends gives back what it borrowed, and lends what it then leaves
    idle only up to its lending limit: counted as every GPU of the ending jobs, the
    sentence said "at the latest" an hour after the jobs' end when the quota came back
    four hours later (test_explain_lent.py)."""
    ledger, f = p.ledger, job.flavor
    members = ledger.members.get(book.cohort, ())
    ends, movable = [], {}
    for member in members:
        for r in p.running_of(member.name, f):
            if r.stopping or not r.job.preemptible:
                ends.append((r.end, r.job.id, member, r.job.gpus))
            elif member is not book:
                movable[member] = movable.get(member, 0) + r.job.gpus
    ends.sort(key=lambda e: (e[0], e[1]))

    def enough() -> bool:
        reclaimable = sum(
            min(k, max(0, m.used(f) - m.quota(f).nominal)) for m, k in movable.items()
        )
        return ledger.headroom(book, f) + reclaimable >= job.gpus

    tx = Transaction()
    try:
        if enough():
            return p.now, None
        for end, _, member, gpus in ends:
            tx.add(ledger, member, f, -gpus)
            if enough():
                return end, member.name
        return math.inf, None
    finally:
        tx.rollback()

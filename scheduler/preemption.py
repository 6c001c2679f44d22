"""Preemption for a blocked job (fairshare policy only), after Kueue's classic preemption.

Two kinds of victim, both preemptible, running and not yet stopping:

- reclaim (Kueue reclaimWithinCohort: Any, narrowed to borrowers): while the
  preemptor's team uses less than its nominal quota of the flavor, jobs of
  other teams of its cohort that are borrowing (usage above nominal);
- priority (Kueue withinClusterQueue: LowerPriority, narrowed to the queue):
  jobs of the preemptor's own team and queue with strictly lower priority.

Rules, as in Kueue's preemption.go:

1. The preemptor must fit within its nominal quota once the victims are gone;
   it never borrows by preempting.
2. GPUs already being freed by stopping jobs come first: if they suffice, no
   new victim is chosen and the job waits for them.
3. Candidates are tried in victim order (scheduler.ordering.victim_key); one
   of another team is skipped once that team no longer borrows. Victims are
   added until the job fits (quota and placement, simulated in a transaction),
   then each but the last is put back, in reverse, if the job still fits
   without it (Kueue's minimalPreemptions).
4. The preemptor is not admitted in this pass: its victims keep their GPUs for
   their grace period. It waits (waiting_for_preemption) and its GPUs are
   charged to its team's usage for the rest of the pass, so its team cannot
   reclaim the same quota twice. Later preemptors of the pass decide as if
   those victims' quota were already free, so they do not free it again.

No cycle: a reclaim only takes from a team above its nominal quota and leaves
the preemptor at or below its own, so the victim's team cannot reclaim back
from it; a priority preemption goes strictly down in priority within a queue.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import placement
from .model import PendingJob, Preemption
from .ordering import victim_key
from .reasons import CAPACITY, COHORT_BUSY, QUOTA, WAITING_FOR_PREEMPTION, Wait
from .state import Running, Transaction

if TYPE_CHECKING:
    from .core import Pass
    from .quota import TeamBook
    from .state import Pool

# A job blocked for one of these may try preemption.
PREEMPT_ON = CAPACITY | {QUOTA, COHORT_BUSY}


def try_preempt(p: Pass, job: PendingJob, pool: Pool | None) -> Wait | None:
    """Preempt for the job, or find stopping jobs to wait for; None if neither helps.

    Within a pass, candidates and free GPUs only shrink, so a failure is
    remembered: a later job of the same team, flavor and GPUs per worker, with
    as many or more workers and no more candidates, fails too. "No more
    candidates" holds for the same queue and priority, or when the later job
    has no lower-priority jobs of its own to preempt. (Quota can grow when a
    preemptor's victims free more than it claims; the remembered failure then
    waits for the next pass, which only errs towards preempting less.)
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
    claims = _without_claimed(p, f)
    chosen = _choose(p, job, pool, book, lower)
    claims.rollback()
    if chosen is None:
        fails[exact] = min(n, fails.get(exact, math.inf))
        fails[base] = min(n, fails.get(base, math.inf))
        return None
    return _commit(p, job, book, chosen)


def _without_claimed(p: Pass, flavor: str) -> Transaction:
    """Take the jobs earlier preemptors of this pass wait for out of the quota, until rollback.

    A preemptor is charged for its GPUs (rule 4) while its victims stay charged
    until they stop. Counting both made a later preemptor of the cohort free
    its predecessors' quota a second time: in trace replays one 4-GPU job
    preempted 44 one-GPU jobs. So a later preemptor decides as if those victims
    were gone, as they will be by the time it could start. Only their quota:
    their GPUs stay taken, since they are promised to their own preemptor.
    """
    tx = Transaction()
    for r in p.claimed.get(flavor, ()):
        tx.add(p.ledger, r.book, flavor, -r.job.gpus)
    return tx


def _choose(
    p: Pass, job: PendingJob, pool: Pool, book: TeamBook, lower: list[Running]
) -> list[Running] | None:
    """Return the stopping jobs and new victims the job needs, or None.

    Cheap checks first: rule 1 with every GPU of its own team that could come
    free, then whether all candidates together free enough GPUs.
    """
    f, gpus = job.flavor, job.gpus
    stopping = [r for r in p.stopping_in(f) if not r.claimed]
    own = sum(r.job.gpus for r in lower) + sum(r.job.gpus for r in stopping if r.book is book)
    if book.used(f) - own + gpus > book.quota(f).nominal:
        return None  # rule 1: it would have to borrow
    cands = stopping + victim_order(p, f, lower + _borrowed(p, job, book))
    freeable = sum(k for r in cands for _, k in r.nodes)
    if not cands or pool.index.total + freeable < gpus:
        return None
    return minimal_set(p, job, pool, book, cands)


def victim_order(p: Pass, flavor: str, victims: list[Running]) -> list[Running]:
    """Return the victims sorted by ordering.victim_key."""
    cfg = p.config
    aged = cfg.max_age if cfg.age_weight > 0 and cfg.max_age > 0 else math.inf
    keyed = [(victim_key(r.job, p.ledger.borrowing(r.book, flavor), aged), r) for r in victims]
    keyed.sort(key=lambda kv: kv[0])
    return [r for _, r in keyed]


def _lower_priority(p: Pass, job: PendingJob, book: TeamBook) -> list[Running]:
    """Return the preemptible jobs of its own queue with strictly lower priority."""
    return [
        r
        for r in p.running_of(book.name, job.flavor)
        if r.job.queue == job.queue and r.job.priority < job.priority and _preemptible(r)
    ]


def _borrowed(p: Pass, job: PendingJob, book: TeamBook) -> list[Running]:
    """Return the preemptible jobs of borrowing cohort peers, if its team is below nominal."""
    f = job.flavor
    if book.cohort is None or book.used(f) >= book.quota(f).nominal:
        return []
    out = []
    for other in p.ledger.members.get(book.cohort, ()):
        if other is not book and p.ledger.borrowing(other, f):
            out.extend(r for r in p.running_of(other.name, f) if _preemptible(r))
    return out


def _preemptible(r: Running) -> bool:
    return r.job.preemptible and not r.stopping and not r.claimed


def minimal_set(
    p: Pass, job: PendingJob, pool: Pool, book: TeamBook, cands: list[Running]
) -> list[Running] | None:
    """Add candidates until the job fits, then drop the unneeded ones (rule 3)."""
    tx = Transaction()
    chosen = _add_until_fits(p, job, pool, book, cands, tx)
    if chosen is None:
        tx.rollback()
        return None
    for r in reversed(chosen[:-1]):
        _reacquire(p, r, pool, tx)
        if fits(p, job, pool, book):
            chosen.remove(r)
        else:
            _release(p, r, pool, tx)
    tx.rollback()
    return chosen


def _add_until_fits(
    p: Pass, job: PendingJob, pool: Pool, book: TeamBook, cands: list[Running], tx: Transaction
) -> list[Running] | None:
    """Release candidates in order until the job fits; None if it never does.

    A candidate's quota is released first and its GPUs only once the quota
    fits, since giving GPUs back to the index costs more than the ledger.
    """
    chosen: list[Running] = []
    freed = 0  # how many of `chosen` have their GPUs back in the index
    for r in cands:
        if not r.stopping and r.book is not book and not p.ledger.borrowing(r.book, job.flavor):
            continue  # Kueue: reclaim only while the other team still borrows
        tx.add(p.ledger, r.book, r.job.flavor, -r.job.gpus)
        chosen.append(r)
        if not quota_fits(p, job, book):
            continue
        for q in chosen[freed:]:
            _give_gpus(q, pool, tx)
        freed = len(chosen)
        if placement.choose(pool.index, job.workers, job.gpus_per_worker) is not None:
            return chosen
    return None


def quota_fits(p: Pass, job: PendingJob, book: TeamBook) -> bool:
    """Return whether the job fits its team's nominal quota and the cohort right now."""
    f = job.flavor
    if book.used(f) + job.gpus > book.quota(f).nominal:
        return False
    return p.ledger.headroom(book, f) >= job.gpus


def fits(p: Pass, job: PendingJob, pool: Pool, book: TeamBook) -> bool:
    """Return whether the job could be admitted within its nominal quota right now."""
    if not quota_fits(p, job, book):
        return False
    return placement.choose(pool.index, job.workers, job.gpus_per_worker) is not None


def _give_gpus(r: Running, pool: Pool, tx: Transaction) -> None:
    for node, k in r.nodes:
        tx.give(pool.index, node, k)


def _release(p: Pass, r: Running, pool: Pool, tx: Transaction) -> None:
    _give_gpus(r, pool, tx)
    tx.add(p.ledger, r.book, r.job.flavor, -r.job.gpus)


def _reacquire(p: Pass, r: Running, pool: Pool, tx: Transaction) -> None:
    for node, k in r.nodes:
        tx.take(pool.index, node, k)
    tx.add(p.ledger, r.book, r.job.flavor, r.job.gpus)


def _commit(p: Pass, job: PendingJob, book: TeamBook, chosen: list[Running]) -> Wait:
    """Claim the chosen jobs, stop the new victims and charge the preemptor (rule 4)."""
    new = 0
    p.claimed.setdefault(job.flavor, []).extend(chosen)
    for r in chosen:
        r.claimed = True
        if not r.stopping:
            p.preemptions.append(_preemption(p, job, book, r))
            r.stop(p.now)
            new += 1
    p.ledger.add(book, job.flavor, job.gpus)
    ids = tuple(r.job.id for r in chosen)
    return Wait(WAITING_FOR_PREEMPTION, (ids, max(r.end for r in chosen), new))


def _preemption(p: Pass, job: PendingJob, book: TeamBook, r: Running) -> Preemption:
    """Return the preemption record, with a message naming the preemptor and why."""
    f, victim = job.flavor, r.job
    if r.book is book:
        message = (
            f"preempted by job {job.id} of queue {job.team}/{job.queue}: priority "
            f"{job.priority} outranks this job's {victim.priority}"
        )
        return Preemption(victim.id, "priority", message, job.id)
    q, vq = book.quota(f), r.book.quota(f)
    message = (
        f"preempted by job {job.id} of team {job.team}, which reclaims its nominal quota: "
        f"it needs {job.gpus} {f} GPUs and uses {book.used(f)} of {q.nominal} nominal, "
        f"while team {r.book.name} borrows ({r.book.used(f)} used of {vq.nominal} nominal)"
    )
    return Preemption(victim.id, "reclaim", message, job.id)

"""Scheduling policies: small plugins behind one interface, registered by name.

A Policy names three parts, each swappable:

- order: yields the pending jobs in the order the pass considers them
  (submit order, or fair share across teams);
- gate: how a blocked job holds back the jobs after it (scheduler.gates:
  strict head-of-line, or backfill with a reservation);
- preemption: whether a blocked job may preempt (scheduler.preemption).

`PolicyConfig.policy` picks one by name; its `backfill` and `preemption` flags
can switch those parts off. Built in, like Slurm's priority/basic next to
priority/multifactor:

- fifo: strict submit order, a blocked job stops its flavor, no preemption;
- fifo-backfill: submit order with Slurm-style backfill;
- fairshare: weighted dominant-share order across teams, backfill, preemption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop, heapreplace
from typing import TYPE_CHECKING

from .backfill import Backfill
from .fairshare import priority
from .gates import FOR_GPUS, STRICT, TEAM_QUOTA, Gate, HeadOfLine
from .model import PendingJob, PolicyConfig
from .ordering import submit_key, team_key

if TYPE_CHECKING:
    from .core import Pass
    from .quota import TeamBook


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    order: Callable[[Pass], Iterator[PendingJob]]
    gate: Callable[[PolicyConfig], Gate]
    preemption: bool = False


POLICIES: dict[str, Policy] = {}


def register_policy(policy: Policy) -> Policy:
    """Make a policy available to PolicyConfig.policy under its name."""
    POLICIES[policy.name] = policy
    return policy


def get_policy(name: str) -> Policy:
    """Return the registered policy; an unknown name is a configuration error."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduling policy {name!r}; known: {', '.join(sorted(POLICIES))}"
        ) from None


def submit_order(p: Pass) -> Iterator[PendingJob]:
    """Yield pending jobs oldest first (ordering.submit_key)."""
    yield from sorted(p.pending, key=submit_key)


def fair_share_order(p: Pass) -> Iterator[PendingJob]:
    """Yield the next job of the team first in ordering.team_key.

    That is the team whose next job has the highest priority (its team's
    fair-share factor plus the job's age factor: scheduler.fairshare.priority),
    among teams whose next job fits their nominal quota first. Keys are recomputed after every
    job, so an admission (or a preemptor's claim) moves its team back in line
    at once (Kueue admission fair sharing). Within a team, jobs come in queue
    order (ordering.queue_key).
    """
    queues = p.team_queues()
    books = [p.ledger.book(name) for name, _ in queues]
    heap = [_key(p, books[t], jobs[0], t) for t, (_, jobs) in enumerate(queues)]
    heapify(heap)
    nexts = [0] * len(queues)
    while heap:
        t = heap[0][-1]
        jobs = queues[t][1]
        i = nexts[t]
        yield jobs[i]
        nexts[t] = i = i + 1
        if i < len(jobs):
            heapreplace(heap, _key(p, books[t], jobs[i], t))
        else:
            heappop(heap)


def _key(p: Pass, book: TeamBook, head: PendingJob, t: int) -> tuple:
    borrows = not p.ordered_within(book, head)
    cfg = p.config
    age = p.now - head.submitted_at
    rank = priority(p.ledger.share(book), age, cfg.age_weight, cfg.max_age)
    return team_key(borrows, rank, head, t, 0 < cfg.max_wait <= age)


def head_of_line(config: PolicyConfig) -> Gate:
    return HeadOfLine(STRICT)


def backfill_or_wait(config: PolicyConfig) -> Gate:
    """Backfill when the config allows it, else a job waiting for GPUs stops its flavor."""
    if not config.backfill:
        return HeadOfLine(FOR_GPUS, TEAM_QUOTA)
    return Backfill(config.backfill_reservations, config.reclaim_backoff)


register_policy(Policy("fifo", submit_order, head_of_line))
register_policy(Policy("fifo-backfill", submit_order, backfill_or_wait))
register_policy(Policy("fairshare", fair_share_order, backfill_or_wait, preemption=True))

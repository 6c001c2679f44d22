"""Storing a submitted job: the store step of every single submission
(actions.jobs.submit_job), in batches.

The threads of a web process that store jobs at about the same time are gathered by
one Batcher (portal/core/batcher.py: at most BERTH_SUBMIT_BATCH_MAX jobs, a wait of
at most BERTH_SUBMIT_BATCH_WAIT_MS while more requests of this process are on their
way, at most BERTH_SUBMIT_QUEUE_MAX waiting, else Busy: 429 with Retry-After). A
batch is stored by one statement (statements.insert_jobs_with_events: every job and
its event, each with its own room check, guard and Idempotency-Key), which commits
as it ends (autocommit); each caller gets its own outcome only after that.

- One job's failure never fails the others: if the batch's statement fails (a row
  breaking a constraint), each job of it is stored again alone, and only the one
  that fails alone gets the error.
- A caller inside a transaction of its own (a test, the admin) stores its job alone
  in that transaction: gathering others' jobs into it would commit them only when
  the caller commits.
- SQLite (`make run`): the jobs of a batch go through the ORM, each in a savepoint,
  in one transaction: one commit.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from portal.core import statements
from portal.core.access import SUBMIT_ROLES
from portal.core.batcher import Batcher, Busy  # noqa: F401 — Busy: what callers catch


class Storing(NamedTuple):
    """One job to store: its row (statements.NewJob, on PostgreSQL) and, for SQLite,
    the ORM insert that stores it (its id, or None when nothing was stored)."""

    row: statements.NewJob
    with_orm: Callable[[], int | None]


def store_job(item: Storing) -> int | None:
    """Store one job with the others being stored now; its id, or None when nothing
    was stored (the key exists, the queue is full, the guard failed). Raises what
    storing it alone raised, or Busy."""
    if connection.in_atomic_block:
        outcome = _store([item], alone=True)[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return SUBMISSIONS.run(item)


def _store(items: list[Storing], alone: bool = False) -> list:
    """The batch's outcomes, one per job: its id, None, or the exception it raised."""
    try:
        if connection.vendor == "postgresql":
            return statements.insert_jobs_with_events([i.row for i in items], SUBMIT_ROLES)
        return _store_with_orm(items)
    except DatabaseError as exc:  # a constraint checked at the commit fails them all
        if alone or len(items) == 1:
            return [exc]
    return [_store([item], alone=True)[0] for item in items]  # find the one that fails


def _store_with_orm(items: list[Storing]) -> list:
    """The ORM inserts of a batch in one transaction (one commit): each runs in a
    savepoint of its own (actions.jobs._insert_with_orm), so one that fails leaves
    the others."""
    if len(items) == 1:
        return [items[0].with_orm()]
    outcomes = []
    with transaction.atomic():
        for item in items:
            try:
                outcomes.append(item.with_orm())
            except DatabaseError as exc:
                outcomes.append(exc)
    return outcomes


SUBMISSIONS = Batcher(
    _store,
    max_batch=settings.BERTH["SUBMIT_BATCH_MAX"],
    max_wait_s=settings.BERTH["SUBMIT_BATCH_WAIT_MS"] / 1000,
    max_queue=settings.BERTH["SUBMIT_QUEUE_MAX"],
)


if os.environ.get("BERTH_BATCH_STATS"):  # bench/bench_api.py: how big the batches were
    atexit.register(
        lambda: print(
            f"batcher of process {os.getpid()}: {SUBMISSIONS.items} jobs in "
            f"{SUBMISSIONS.batches} batches",
            file=sys.stderr,
            flush=True,
        )
    )

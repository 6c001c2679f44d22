"""The scheduling pass: snapshot → scheduler core → plan → writes, in one transaction.

Exactly one pass runs at a time: on PostgreSQL a transaction-scoped advisory
lock (a second pass just returns); on SQLite the IMMEDIATE transaction already
serialises writers.
"""

from __future__ import annotations

import gc
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.core.actions.budgets import warn_budget_thresholds
from portal.core.models import SchedulingPass
from portal.core.scheduling.apply import apply_plan
from portal.core.scheduling.snapshot import build_snapshot
from portal.core.scheduling.usage import account_usage
from scheduler import model as m
from scheduler import schedule

log = logging.getLogger(__name__)

# Any constant unique to Berth; pg_try_advisory_xact_lock takes a bigint.
PASS_LOCK_KEY = 0x6265727468  # "berth"


@dataclass
class PassResult:
    plan: m.Plan
    snapshot: m.Snapshot
    duration_ms: float = 0.0
    queries: int = 0
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    dry_run: bool = False

    def summary(self) -> dict:
        return {
            "pending": len(self.snapshot.pending),
            "admitted": len(self.admitted) if not self.dry_run else len(self.plan.admissions),
            "preempted": len(self.preempted) if not self.dry_run else len(self.plan.preemptions),
            "duration_ms": round(self.duration_ms, 1),
            "queries": self.queries,
            "dry_run": self.dry_run,
        }


def policy_config() -> m.PolicyConfig:
    cfg = settings.BERTH
    return m.PolicyConfig(
        policy=cfg["POLICY"],
        half_life=cfg["FAIRSHARE_HALF_LIFE_S"],
        topology_key=cfg["TOPOLOGY_KEY"],
        reclaim_backoff=cfg["RECLAIM_BACKOFF"],
    )


def run_pass(*, dry_run: bool = False) -> PassResult | None:
    """Run one pass; None if another pass holds the lock."""
    started = time.perf_counter()
    with _collector_waits(), _count_queries() as counter, transaction.atomic():
        if not _try_lock():
            log.info("another scheduling pass is running; skipping")
            return None
        now = timezone.now()
        config = policy_config()
        snapshot, ctx = build_snapshot(now, config)
        plan = schedule(snapshot)
        result = PassResult(plan=plan, snapshot=snapshot, dry_run=dry_run)
        if not dry_run:
            applied = apply_plan(plan, ctx)
            result.admitted, result.preempted = applied.admitted, applied.preempted
            account_usage(now, config.half_life)
            warn_budget_thresholds(ctx.budgets)
        result.duration_ms = (time.perf_counter() - started) * 1000
        result.queries = counter[0]
        _record(result, now, config.policy)
    log.info("scheduling pass", extra=result.summary())
    return result


def _try_lock() -> bool:
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [PASS_LOCK_KEY])
        return cursor.fetchone()[0]


def _record(result: PassResult, now, policy: str) -> None:
    if result.dry_run:
        return
    SchedulingPass.objects.create(
        started_at=now,
        duration_ms=result.duration_ms,
        policy=policy,
        pending=len(result.snapshot.pending),
        admitted=len(result.admitted),
        preempted=len(result.preempted),
        queries=result.queries,
    )


@contextmanager
def _collector_waits():
    """Keep Python's cyclic garbage collector off until the pass ends.

    A pass at 10,000 pending jobs makes hundreds of thousands of objects that live
    until it ends (rows, the snapshot, the core's state, the plan): the collector
    would traverse them all again at each of its full collections, two or three a
    pass, a quarter of the pass's CPU (docs/benchmarks.md), and free nothing, since
    they are plain data that reference counting frees when the pass drops them. The
    little cyclic garbage a pass leaves (query objects) waits for the next collection.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def _count_queries():
    counter = [0]

    def wrapper(execute, sql, params, many, context):
        counter[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield counter

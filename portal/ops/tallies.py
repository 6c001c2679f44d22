"""Counters and histograms derived from append-only rows, cheap at any history size.

Prometheus counters must read the same on every web process and never go down,
so none is kept in a process. They are counted from rows that are never
updated or deleted: JobEvent (admissions, preemptions, requeues, finishes and
admission waits) and SchedulingPass (pass durations). Counting the whole
history at every scrape would cost a scan of every event ever written, so each
scrape adds only the rows after a *watermark* id to a base kept in the shared
cache (Redis in production):

    total = base(rows with id <= W) + count(rows with id > W)

Both parts come from the database, so any process computes the same totals; the
cache only saves work. A row joins the base once it is *settled*: older than
BERTH["METRICS_SETTLE_S"]. Ids are taken when a row is inserted but become
visible at commit, so a row with a lower id can still appear while its
transaction is open; folding only rows older than any transaction lives keeps
such a row above W, where it is counted when it appears. (A transaction that
writes events and stays open longer than that window would have its events
missed by the base: Berth's transactions last seconds.) Ids are folded as a
prefix: W never passes an unsettled row, whatever the clocks say; a host whose
clock runs ahead only delays folding by its lead.

The cache entry records the timestamp of row W. If that row is gone or differs
(the database was restored from a backup while Redis kept its entry), the base
is thrown away and rebuilt from the rows: counters then restart, which
Prometheus handles as a counter reset.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Extract

from portal.core.models import Job, JobEvent, SchedulingPass

log = logging.getLogger(__name__)

# Admission waits: 1 s … 2^17 s (36 h). Kueue uses 2^0 … 2^13 s; GPU jobs wait longer.
WAIT_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(18))
PASS_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TERMINAL = tuple(Job.TERMINAL_STATES)
# Changing the buckets changes the key, so no base counted with other buckets is reused.
_VERSION = f"v1-{zlib.crc32(repr((WAIT_BUCKETS, PASS_BUCKETS)).encode()):08x}"


@dataclass
class Base:
    """Totals of the rows with id <= `watermark`; `stamp` is row `watermark`'s time."""

    watermark: int = 0
    stamp: datetime | None = None
    counts: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class Source:
    """An append-only table, its time column, and how to count a range of its ids."""

    name: str
    model: type
    stamp_field: str
    # (after, upto) -> (counts of ids in (after, upto], counts of ids above upto)
    count: Callable[[int, int], tuple[Counter, Counter]]


def tallies(now: datetime) -> Counter:
    """Return every durable counter, keyed by tuples (see _count_events and _count_passes)."""
    bases = _load()
    totals, changed = Counter(), False
    for source in SOURCES:
        base = bases.get(source.name) or Base()
        total, new_base = _advance(source, base, now)
        totals.update(total)
        if new_base is not base:
            bases[source.name], changed = new_base, True
    if changed:
        _store(bases)
    return totals


def _advance(source: Source, base: Base, now: datetime) -> tuple[Counter, Base]:
    """Return the source's totals now, and the base moved to the newest settled prefix."""
    cutoff = now - timedelta(seconds=settings.BERTH["METRICS_SETTLE_S"])
    marks = _marks(source, base.watermark, cutoff)
    if base.watermark and marks["stamp"] != base.stamp:
        log.warning("metrics base for %s no longer matches the database; recounting", source.name)
        base = Base()
        marks = _marks(source, 0, cutoff)
    upto = _settled_prefix(base.watermark, marks)
    settled, fresh = source.count(base.watermark, upto)
    total = base.counts + settled + fresh
    if upto == base.watermark:
        return total, base
    stamp = source.model.objects.filter(pk=upto).values_list(source.stamp_field, flat=True).first()
    return total, Base(watermark=upto, stamp=stamp, counts=base.counts + settled)


def _marks(source: Source, after: int, cutoff: datetime) -> dict:
    """One query: the stamp of row `after`, the newest settled id and the oldest unsettled id."""
    stamp = source.stamp_field
    return source.model.objects.filter(id__gte=after).aggregate(
        stamp=Max(stamp, filter=Q(id=after)),
        settled=Max("id", filter=Q(id__gt=after, **{f"{stamp}__lte": cutoff})),
        unsettled=Min("id", filter=Q(id__gt=after, **{f"{stamp}__gt": cutoff})),
    )


def _settled_prefix(after: int, marks: dict) -> int:
    """Return the highest id W' >= after such that every visible id in (after, W'] is settled."""
    upto = marks["settled"] or after
    if marks["unsettled"] is not None:
        upto = min(upto, marks["unsettled"] - 1)
    return max(upto, after)


def _settled(upto: int) -> Case:
    return Case(
        When(id__lte=upto, then=Value(True)), default=Value(False), output_field=BooleanField()
    )


# --- job events ---------------------------------------------------------------------------


def _count_events(after: int, upto: int) -> tuple[Counter, Counter]:
    """Counters from JobEvent rows with id > after, split at `upto`.

    Keys: ("admitted", team_id), ("preempted", team_id, reason),
    ("requeued", team_id, kind), ("finished", team_id, state), and the admission
    wait histogram ("wait_bucket", team_id, i) (not cumulative; i = len(WAIT_BUCKETS)
    is +Inf), ("wait_sum", team_id).
    """
    parts = (Counter(), Counter())  # settled, fresh
    rows = (
        JobEvent.objects.filter(id__gt=after)
        .annotate(
            settled=_settled(upto),
            reason=Case(
                When(kind="preempted", then=Coalesce(KT("data__reason"), Value(""))),
                default=Value(""),
                output_field=CharField(),
            ),
        )
        .values_list("settled", "kind", "from_state", "to_state", "job__team_id", "reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    for settled, kind, from_state, to_state, team, reason, n in rows:
        key = _event_key(kind, from_state, to_state, team, reason)
        if key:
            parts[0 if settled else 1][key] += n
    _count_waits(after, upto, parts)
    return parts


def _event_key(kind: str, from_state: str, to_state: str, team: int, reason: str):
    if kind == "admitted":
        return ("admitted", team)
    if kind == "preempted":
        return ("preempted", team, reason or "unknown")
    if to_state in TERMINAL:
        return ("finished", team, to_state)
    if to_state == Job.State.PENDING and from_state:
        return ("requeued", team, kind)
    return None


def _count_waits(after: int, upto: int, parts: tuple[Counter, Counter]) -> None:
    """Admission wait: from the job's latest earlier move to pending (its submit or its
    requeue) to its admission, as Kueue's admission_wait_time_seconds."""
    since = (
        JobEvent.objects.filter(
            job_id=OuterRef("job_id"), to_state="pending", id__lt=OuterRef("id")
        )
        .order_by("-id")
        .values("at")[:1]
    )
    wait = ExpressionWrapper(
        F("at") - Coalesce(Subquery(since), F("job__submitted_at")), output_field=DurationField()
    )
    rows = JobEvent.objects.filter(id__gt=after, kind="admitted").order_by()
    if connection.features.has_native_duration_field:
        # Seconds computed by PostgreSQL: parsing 2 timestamps a row in Python costs
        # more than the whole query when the base is rebuilt from 100,000s of rows.
        rows = rows.annotate(wait=Cast(Extract(wait, "epoch"), FloatField()))
    else:
        rows = rows.annotate(wait=wait)
    for pk, team, seconds in rows.values_list("id", "job__team_id", "wait"):
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        wait_s = max(0.0, seconds or 0.0)
        part = parts[0 if pk <= upto else 1]
        part[("wait_bucket", team, _bucket(wait_s, WAIT_BUCKETS))] += 1
        part[("wait_sum", team)] += wait_s


def _bucket(value: float, bounds: tuple[float, ...]) -> int:
    """Return the index of the first bound >= value (Prometheus `le`), len(bounds) for +Inf."""
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


# --- scheduling passes --------------------------------------------------------------------


def _count_passes(after: int, upto: int) -> tuple[Counter, Counter]:
    """The pass-duration histogram from SchedulingPass rows, aggregated in the database.

    Keys: ("pass_bucket", i) (not cumulative), ("pass_sum",) in seconds, ("pass_count",).
    """
    cumulative = {
        f"le{i}": Count("id", filter=Q(duration_ms__lte=bound * 1000))
        for i, bound in enumerate(PASS_BUCKETS)
    }
    rows = (
        SchedulingPass.objects.filter(id__gt=after, dry_run=False, error="")
        .annotate(settled=_settled(upto))
        .values("settled")
        .annotate(n=Count("id"), total_ms=Sum("duration_ms"), **cumulative)
        .order_by()
    )
    parts = (Counter(), Counter())
    for row in rows:
        part = parts[0 if row["settled"] else 1]
        below = 0
        for i in range(len(PASS_BUCKETS)):
            part[("pass_bucket", i)] += row[f"le{i}"] - below
            below = row[f"le{i}"]
        part[("pass_bucket", len(PASS_BUCKETS))] += row["n"] - below
        part[("pass_sum",)] += (row["total_ms"] or 0.0) / 1000
        part[("pass_count",)] += row["n"]
    return parts


SOURCES = (
    Source("events", JobEvent, "at", _count_events),
    Source("passes", SchedulingPass, "started_at", _count_passes),
)


# --- the shared base ----------------------------------------------------------------------


def cache_key() -> str:
    """One base per database: staging and production may share a Redis."""
    db = connection.settings_dict
    return (
        f"berth:ops:tallies:{_VERSION}:{db.get('HOST') or ''}:{db.get('PORT') or ''}:{db['NAME']}"
    )


def _load() -> dict[str, Base]:
    try:
        return dict(cache.get(cache_key()) or {})
    except Exception:  # noqa: BLE001 — without the cache the totals are recounted, not wrong
        log.warning("metrics base unavailable from the cache; counting from scratch", exc_info=True)
        return {}


def _store(bases: dict[str, Base]) -> None:
    try:
        cache.set(cache_key(), bases, timeout=None)
    except Exception:  # noqa: BLE001
        log.warning("could not store the metrics base in the cache", exc_info=True)


def reset() -> None:
    """Forget the shared base (tests; after restoring a database with the cache kept)."""
    cache.delete(cache_key())

"""GPU-seconds accounting: hourly showback rows and the decayed usage behind fair share.

Each pass accounts the window since the previous pass: the overlap of every
allocation's lifetime with that window, split at hour boundaries. Only the pass
writes these rows, and passes run one at a time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db.models import Q

from portal.core.models import Allocation, DecayedUsage, SchedulingPass, Usage
from scheduler.fairshare import decay

HOUR = timedelta(hours=1)


def account_usage(now: datetime, half_life: float) -> dict[tuple[int, int], float]:
    """Add the GPU-seconds used since the last pass; return them per (team, flavor)."""
    since = (
        SchedulingPass.objects.filter(dry_run=False, error="")
        .values_list("started_at", flat=True)
        .first()
    )
    if since is None or since >= now:
        return {}
    per_hour = _usage_by_hour(since, now)
    add_hourly_usage(per_hour)
    totals = defaultdict(float)
    for (team, flavor, _hour), seconds in per_hour.items():
        totals[(team, flavor)] += seconds
    add_decayed_usage(totals, now, half_life)
    return dict(totals)


def _usage_by_hour(since: datetime, now: datetime) -> dict[tuple[int, int, datetime], float]:
    rows = Allocation.objects.filter(Q(active=True) | Q(released_at__gt=since)).values_list(
        "job__team_id", "job__flavor_id", "created_at", "released_at"
    )
    used = defaultdict(float)
    for team, flavor, created, released in rows:
        for hour, seconds in split_by_hour(max(created, since), min(released or now, now)):
            used[(team, flavor, hour)] += seconds
    return used


def split_by_hour(start: datetime, end: datetime) -> Iterator[tuple[datetime, float]]:
    """Yield (start of the hour, seconds) for each clock hour [start, end) overlaps."""
    while start < end:
        hour = start.replace(minute=0, second=0, microsecond=0)
        stop = min(end, hour + HOUR)
        yield hour, (stop - start).total_seconds()
        start = stop


def add_hourly_usage(per_hour: dict[tuple[int, int, datetime], float]) -> None:
    if not per_hour:
        return
    hours = {hour for _, _, hour in per_hour}
    existing = {(u.team_id, u.flavor_id, u.hour): u for u in Usage.objects.filter(hour__in=hours)}
    changed, new = [], []
    for key, seconds in per_hour.items():
        row = existing.get(key)
        if row:
            row.gpu_seconds += seconds
            changed.append(row)
        else:
            new.append(Usage(team_id=key[0], flavor_id=key[1], hour=key[2], gpu_seconds=seconds))
    Usage.objects.bulk_update(changed, ["gpu_seconds"])
    Usage.objects.bulk_create(new)


def add_decayed_usage(
    totals: dict[tuple[int, int], float], now: datetime, half_life: float
) -> None:
    if not totals:
        return
    existing = {(d.team_id, d.flavor_id): d for d in DecayedUsage.objects.all()}
    changed, new = [], []
    for key, seconds in totals.items():
        row = existing.get(key)
        if row:
            elapsed = max(0.0, (now - row.updated_at).total_seconds())
            row.gpu_seconds = decay(row.gpu_seconds, elapsed, half_life) + seconds
            row.updated_at = now
            changed.append(row)
        else:
            new.append(
                DecayedUsage(team_id=key[0], flavor_id=key[1], gpu_seconds=seconds, updated_at=now)
            )
    DecayedUsage.objects.bulk_update(changed, ["gpu_seconds", "updated_at"])
    DecayedUsage.objects.bulk_create(new)

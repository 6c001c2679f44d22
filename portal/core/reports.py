"""Read models shared by the REST API and the dashboard: quota vs usage, fair-share
standing, GPU-hours (showback) and wait times. Each function is a fixed number
of aggregate queries, whatever the number of jobs."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db.models import Count, F, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from portal.core.models import Allocation, DecayedUsage, GpuFlavor, Job, Quota, Team, Usage
from scheduler.fairshare import decay, historical_term, weighted_share


@dataclass
class FlavorUsage:
    flavor: str
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    used: int  # GPUs held now (active allocations)
    pending_gpus: int  # GPUs asked for by pending jobs

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.nominal)

    @property
    def idle(self) -> int:
        return max(0, self.nominal - self.used)


@dataclass
class Standing:
    team: str
    weight: float
    current: float  # dominant share of current usage over nominal
    historical: float  # decayed usage on the same scale
    share: float  # (current + historical) / weight, the scheduler's ordering key


def quota_usage(team: Team) -> list[FlavorUsage]:
    """Per flavor the team has quota of or uses: nominal, limits, GPUs held, GPUs wanted."""
    used = dict(
        Allocation.objects.filter(active=True, job__team=team)
        .values_list("job__flavor__name")
        .annotate(n=Count("pk"))
        .values_list("job__flavor__name", "n")
    )
    wanted = dict(
        Job.objects.filter(team=team, state=Job.State.PENDING)
        .values_list("flavor__name")
        .annotate(n=Sum(F("workers") * F("gpus_per_worker")))
        .values_list("flavor__name", "n")
    )
    quotas = {q.flavor.name: q for q in Quota.objects.filter(team=team).select_related("flavor")}
    rows = []
    for flavor in sorted(quotas.keys() | used.keys() | wanted.keys()):
        q = quotas.get(flavor)
        rows.append(
            FlavorUsage(
                flavor=flavor,
                nominal=q.nominal if q else 0,
                borrowing_limit=q.borrowing_limit if q else None,
                lending_limit=q.lending_limit if q else None,
                used=used.get(flavor, 0),
                pending_gpus=wanted.get(flavor, 0) or 0,
            )
        )
    return rows


def cohort_standing(team: Team, now: datetime | None = None) -> list[Standing]:
    """Fair-share standing of the team and its cohort peers, lowest share (served first) first.

    Uses the scheduler's own formula (scheduler.fairshare, docs/scheduling.md).
    """
    now = now or timezone.now()
    teams = list(Team.objects.filter(cohort=team.cohort)) if team.cohort_id else [team]
    ids = [t.pk for t in teams]
    half_life = settings.BERTH["FAIRSHARE_HALF_LIFE_S"]
    nominal = defaultdict(dict)
    for team_id, flavor, n in Quota.objects.filter(team__in=ids).values_list(
        "team_id", "flavor__name", "nominal"
    ):
        nominal[team_id][flavor] = n
    used = defaultdict(dict)
    for team_id, flavor, n in (
        Allocation.objects.filter(active=True, job__team__in=ids)
        .values_list("job__team_id", "job__flavor__name")
        .annotate(n=Count("pk"))
        .values_list("job__team_id", "job__flavor__name", "n")
    ):
        used[team_id][flavor] = n
    history = defaultdict(dict)
    for d in DecayedUsage.objects.filter(team__in=ids).select_related("flavor"):
        history[d.team_id][d.flavor.name] = decay(
            d.gpu_seconds, (now - d.updated_at).total_seconds(), half_life
        )
    cohort_nominal = defaultdict(int)
    for per_team in nominal.values():
        for flavor, n in per_team.items():
            cohort_nominal[flavor] += n
    standings = [
        _standing(t, nominal[t.pk], used[t.pk], history[t.pk], cohort_nominal, half_life)
        for t in teams
    ]
    return sorted(standings, key=lambda s: (s.share, s.team))


def _standing(team, nominal, used, history, cohort_nominal, half_life) -> Standing:
    flavors = nominal.keys() | used.keys() | history.keys()
    current, hist = [], []
    for flavor in flavors:
        denom = nominal.get(flavor) or cohort_nominal.get(flavor) or 1
        current.append(used.get(flavor, 0) / denom)
        hist.append(historical_term(history.get(flavor, 0.0), denom, half_life))
    combined = [c + h for c, h in zip(current, hist, strict=True)]
    return Standing(
        team=team.slug,
        weight=team.weight,
        current=max(current, default=0.0),
        historical=max(hist, default=0.0),
        share=weighted_share(combined, team.weight),
    )


def gpu_hours_by_day(team: Team, days: int = 30, today: date | None = None) -> list[dict]:
    """GPU-hours per day and flavor for the last `days` days (showback), oldest first, zero-filled."""
    today = today or timezone.now().date()
    first = today - timedelta(days=days - 1)
    rows = (
        Usage.objects.filter(team=team, hour__date__gte=first)
        .annotate(day=TruncDate("hour"))
        .values_list("day", "flavor__name")
        .annotate(s=Sum("gpu_seconds"))
        .values_list("day", "flavor__name", "s")
    )
    flavors = sorted(
        {f for _, f, _ in rows}
        or set(GpuFlavor.objects.filter(quotas__team=team).values_list("name", flat=True))
    )
    table = {(d, f): s for d, f, s in rows}
    out = []
    for i in range(days):
        day = first + timedelta(days=i)
        out.append(
            {
                "date": day.isoformat(),
                **{f: round(table.get((day, f), 0.0) / 3600, 2) for f in flavors},
            }
        )
    return out


def wait_by_week(team: Team, weeks: int = 8, now: datetime | None = None) -> list[dict]:
    """Median and p90 queueing delay (submit → admission) of jobs admitted each week."""
    now = now or timezone.now()
    since = now - timedelta(weeks=weeks)
    waits = defaultdict(list)
    for submitted, admitted in Job.objects.filter(team=team, admitted_at__gte=since).values_list(
        "submitted_at", "admitted_at"
    ):
        week = (admitted - timedelta(days=admitted.weekday())).date()
        waits[week].append((admitted - submitted).total_seconds())
    return [
        {
            "week": week.isoformat(),
            "jobs": len(w),
            "median_wait_s": statistics.median(w),
            "p90_wait_s": _p90(w),
        }
        for week, w in sorted(waits.items())
    ]


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def job_counts(team: Team) -> dict[str, int]:
    counts = dict(
        Job.objects.filter(team=team)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    return {state: counts.get(state, 0) for state in Job.State.values}

"""Read models shared by the REST API and the dashboard: quota vs usage, fair-share
standing, GPU-hours (showback) and wait times. Each function is a fixed number
of aggregate queries, whatever the number of jobs."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import (
    Aggregate,
    Avg,
    Count,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
    Subquery,
    Sum,
)
from django.db.models.functions import TruncDate, TruncWeek
from django.utils import timezone

from portal.core.models import (
    Allocation,
    Gpu,
    GpuFlavor,
    Job,
    Quota,
    ReclaimBackoff,
    Team,
    Usage,
)
from portal.core.scheduling.teams import scheduler_teams
from scheduler.requeue import reclaim_cooldown_end, reclaim_count_end
from scheduler.standing import Standing, standings


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
    """Fair-share standing of the team and its cohort peers, lowest share (served first)
    first, computed by the scheduler itself (scheduler.standing, docs/scheduling.md)."""
    now = now or timezone.now()
    # The cohort's team ids as a subquery of each query below, not a query of its own.
    ids = Team.objects.filter(cohort=team.cohort).values("pk") if team.cohort_id else [team.pk]
    teams = scheduler_teams(now, settings.BERTH["FAIRSHARE_HALF_LIFE_S"], team_ids=ids)
    used = {
        (teams[team_id].name, flavor): n
        for team_id, flavor, n in (
            Allocation.objects.filter(active=True, job__team__in=ids)
            .values_list("job__team_id", "job__flavor__name")
            .annotate(n=Count("pk"))
            .values_list("job__team_id", "job__flavor__name", "n")
        )
    }
    standing = standings(teams.values(), used, settings.BERTH["FAIRSHARE_HALF_LIFE_S"])
    return sorted(standing.values(), key=lambda s: (s.share, s.team))


@dataclass
class FlavorBackoff:
    """A team's reclaims in a row of one flavor (the reclaim backoff, scheduler.requeue)."""

    flavor: str
    reclaims: int
    last_reclaim_at: datetime
    may_borrow_from: datetime  # the cooldown's end: its jobs that would borrow wait until then
    count_resets_after: datetime  # not reclaimed again by then, the count starts again at 1


def may_borrow_from(reclaims: int, last_reclaim_at: datetime) -> datetime:
    """Return when a team reclaimed `reclaims` times in a row, the last at
    `last_reclaim_at`, may borrow the flavor again (scheduler.requeue.reclaim_cooldown_end)."""
    return _instant(reclaim_cooldown_end(reclaims, last_reclaim_at.timestamp()))


def reclaim_backoff(team: Team, now: datetime) -> list[FlavorBackoff]:
    """The team's reclaim backoff per flavor whose count still holds at `now`, by flavor,
    in one query; none while `BERTH_RECLAIM_BACKOFF` is off (the passes ignore the rows
    then). A row past `count_resets_after` is left out: a next reclaim counts from 1."""
    if not settings.BERTH["RECLAIM_BACKOFF"]:
        return []
    rows = (
        ReclaimBackoff.objects.filter(team=team)
        .order_by("flavor__name")
        .values_list("flavor__name", "reclaims", "last_reclaim_at")
    )
    out = []
    for flavor, count, at in rows:
        resets = reclaim_count_end(count, at.timestamp())
        if now.timestamp() <= resets:  # as scheduler.requeue.count_reclaims counts
            out.append(
                FlavorBackoff(flavor, count, at, may_borrow_from(count, at), _instant(resets))
            )
    return out


def _instant(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


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
                **{f: round(gpu_hours(table.get((day, f), 0.0)), 2) for f in flavors},
            }
        )
    return out


def gpu_hours(gpu_seconds: float) -> float:
    """GPU-hours from the GPU-seconds of Usage rows: the one unit of showback and budgets."""
    return gpu_seconds / 3600


def gpu_hours_used(
    since: dict[tuple[int, int], datetime], recent: datetime
) -> dict[tuple[int, int], tuple[float, float]]:
    """GPU-hours each (team id, flavor id) used since its own start, and since `recent`.

    What showback counts (the pass's hourly Usage rows, up to the last pass), summed
    over the hours that begin at or after the start: the used figure of GPU-hour
    budgets (portal.core.budgets). One query for all pairs; pairs with no usage get
    (0.0, 0.0).
    """
    if not since:
        return {}
    within = Q()
    for (team_id, flavor_id), start in since.items():
        within |= Q(team_id=team_id, flavor_id=flavor_id, hour__gte=start)
    rows = (
        Usage.objects.filter(within)
        .values_list("team_id", "flavor_id")
        .annotate(s=Sum("gpu_seconds"), r=Sum("gpu_seconds", filter=Q(hour__gte=recent)))
        .values_list("team_id", "flavor_id", "s", "r")
        .order_by()
    )
    out = dict.fromkeys(since, (0.0, 0.0))
    for team_id, flavor_id, total, last in rows:
        out[(team_id, flavor_id)] = (gpu_hours(total or 0.0), gpu_hours(last or 0.0))
    return out


def wait_by_week(team: Team, weeks: int = 8, now: datetime | None = None) -> list[dict]:
    """Median and p90 queueing delay (submit → admission) of jobs admitted each week.

    Weeks start on Monday (UTC). The median interpolates between the two middle
    waits; p90 is the nearest-rank percentile (a wait some job really had). On
    PostgreSQL one aggregate query computes both, so a team with thousands of
    jobs costs no more rows than weeks; other databases compute them in Python.
    """
    now = now or timezone.now()
    jobs = Job.objects.filter(team=team, admitted_at__gte=now - timedelta(weeks=weeks))
    if connection.vendor == "postgresql":
        return _wait_by_week_sql(jobs)
    waits = defaultdict(list)
    for submitted, admitted in jobs.values_list("submitted_at", "admitted_at"):
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


class _Percentile(Aggregate):
    """PostgreSQL's ordered-set aggregates: percentile_cont (interpolated), percentile_disc (nearest rank)."""

    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, *, nearest_rank: bool):
        function = "percentile_disc" if nearest_rank else "percentile_cont"
        super().__init__(expression, fraction=float(fraction), function=function)


def _wait_by_week_sql(jobs) -> list[dict]:
    wait_s = Func(
        F("admitted_at") - F("submitted_at"),
        template="EXTRACT(EPOCH FROM %(expressions)s)::double precision",
        output_field=FloatField(),
    )
    rows = (
        jobs.annotate(week=TruncWeek("admitted_at"), wait_s=wait_s)
        .values("week")
        .annotate(
            n=Count("pk"),
            median=_Percentile("wait_s", 0.5, nearest_rank=False),
            p90=_Percentile("wait_s", 0.9, nearest_rank=True),
        )
        .order_by("week")
    )
    return [
        {
            "week": r["week"].date().isoformat(),
            "jobs": r["n"],
            "median_wait_s": r["median"],
            "p90_wait_s": r["p90"],
        }
        for r in rows
    ]


def _p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile: the ⌈0.9·n⌉-th smallest value."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def job_counts(team: Team) -> dict[str, int]:
    counts = dict(
        Job.objects.filter(team=team)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    return {state: counts.get(state, 0) for state in Job.State.values}


# A running job whose GPUs average below this utilization is flagged as idle.
IDLE_UTILIZATION_PCT = 10.0
# Jobs younger than this are not flagged: they may still be loading data or compiling.
IDLE_GRACE_S = 600


@dataclass
class IdleJob:
    job_id: int
    name: str
    submitted_by: str
    gpus: int  # GPUs the job holds
    reporting: int  # of those, GPUs whose agent reports utilization
    avg_utilization_pct: float


def idle_jobs(
    team: Team,
    *,
    threshold_pct: float = IDLE_UTILIZATION_PCT,
    grace_s: float = IDLE_GRACE_S,
    now: datetime | None = None,
) -> list[IdleJob]:
    """Running jobs of the team whose allocated GPUs average under `threshold_pct` utilization.

    The average is over the job's GPUs of each GPU's latest telemetry sample
    (the agent's last heartbeat); GPUs that report nothing are left out, and a
    job with no reporting GPU is not flagged. One query.
    """
    now = now or timezone.now()
    rows = (
        Allocation.objects.filter(
            active=True,
            job__team=team,
            job__state=Job.State.RUNNING,
            job__started_at__lte=now - timedelta(seconds=grace_s),
        )
        .values("job_id", "job__name", "job__submitted_by__username")
        .annotate(
            gpus=Count("pk"),
            reporting=Count("gpu__utilization_pct"),
            avg=Avg("gpu__utilization_pct"),
        )
        .filter(reporting__gt=0, avg__lt=threshold_pct)
        .order_by("avg", "job_id")
    )
    return [
        IdleJob(
            job_id=r["job_id"],
            name=r["job__name"],
            submitted_by=r["job__submitted_by__username"] or "",
            gpus=r["gpus"],
            reporting=r["reporting"],
            avg_utilization_pct=round(r["avg"], 1),
        )
        for r in rows
    ]


def cohort_demand(team: Team) -> dict[str, dict[str, dict[str, int]]]:
    """GPUs held and GPUs wanted by pending jobs, per team of the cohort and flavor.

    {team slug: {flavor: {"used": n, "pending": n}}}. Two aggregate queries;
    no job of another team is named.
    """
    teams = (
        Team.objects.filter(cohort=team.cohort)
        if team.cohort_id
        else Team.objects.filter(pk=team.pk)
    )
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: {"used": 0, "pending": 0})
    )
    for slug, flavor, n in (
        Job.objects.filter(team__in=teams, state=Job.State.PENDING)
        .values_list("team__slug", "flavor__name")
        .annotate(n=Sum(F("workers") * F("gpus_per_worker")))
        .values_list("team__slug", "flavor__name", "n")
    ):
        out[slug][flavor]["pending"] = n or 0
    for slug, flavor, n in (
        Allocation.objects.filter(active=True, job__team__in=teams)
        .values_list("job__team__slug", "job__flavor__name")
        .annotate(n=Count("pk"))
        .values_list("job__team__slug", "job__flavor__name", "n")
    ):
        out[slug][flavor]["used"] = n
    return {slug: dict(flavors) for slug, flavors in out.items()}


@dataclass(frozen=True)
class Overcommit:
    """A flavor whose teams' nominal quotas add up to more GPUs than the cluster has."""

    flavor: str
    nominal: int  # the teams' nominal quotas, summed
    gpus: int  # the cluster's GPUs of the flavor that are not lost

    @property
    def message(self) -> str:
        return (
            f"{self.flavor}: the teams' nominal quotas add up to {self.nominal} GPUs, but the "
            f"cluster has {self.gpus}; not every team can get its guaranteed GPUs at once."
        )


def overcommitted_flavors(flavors: list[str] | None = None) -> list[Overcommit]:
    """Flavors (of `flavors`, else all) whose summed nominal quota exceeds the cluster's GPUs.

    A flavor with no registered GPU yet (its nodes have not reported) is not
    flagged: the cluster page already shows it has no nodes. Lost GPUs do not count.
    """
    nominal = (
        Quota.objects.filter(flavor=OuterRef("pk"))
        .order_by()
        .values("flavor")
        .annotate(n=Sum("nominal"))
        .values("n")
    )
    gpus = (
        Gpu.objects.filter(node__flavor=OuterRef("pk"))
        .exclude(health=Gpu.Health.LOST)
        .order_by()
        .values("node__flavor")
        .annotate(n=Count("pk"))
        .values("n")
    )
    rows = GpuFlavor.objects.annotate(nominal=Subquery(nominal), gpus=Subquery(gpus))
    if flavors is not None:
        rows = rows.filter(name__in=flavors)
    return [
        Overcommit(name, total, n)
        for name, total, n in rows.order_by("name").values_list("name", "nominal", "gpus")
        if n and total and total > n
    ]

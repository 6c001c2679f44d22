"""GPU-hour budgets as people and the pass read them: period, used, forecast, state.

One read (`budget_statuses`: the budgets, then their usage in one query through
reports.gpu_hours_used, the showback figure) serves the scheduling snapshot, the
team overview, the API, the showback CSV, `berth share` and /metrics, so they
all say the same numbers. The rule itself is scheduler/budgets.py.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from portal.core import reports
from portal.core.models import Budget
from scheduler import model as m

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """Return the start of `now`'s calendar month (UTC) and of the next one."""
    now = now.astimezone(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start, start.replace(year=year, month=month)


@dataclass(frozen=True)
class BudgetStatus:
    """One budget at `now`: its period, GPU-hours used, and what that means."""

    budget_id: int
    team_id: int
    flavor_id: int
    team: str
    flavor: str
    period: str
    window_days: int
    limit: float
    soft: float | None
    warned_period: str
    now: datetime
    starts_at: datetime
    resets_at: datetime | None  # None for a rolling window
    used: float = 0.0
    last_day: float = 0.0  # GPU-hours of the last 24 hours: the burn rate

    @property
    def period_key(self) -> str:
        """'2026-12' for a calendar month; 'rolling' for a window (re-armed below soft)."""
        return self.starts_at.strftime("%Y-%m") if self.resets_at else "rolling"

    @property
    def state(self) -> str:
        """'exhausted' at the hard limit, 'warn' at the soft threshold, else 'ok'."""
        if self.used >= self.limit:
            return "exhausted"
        if self.soft is not None and self.used >= self.soft:
            return "warn"
        return "ok"

    @property
    def percent(self) -> float:
        return round(100 * self.used / self.limit, 1)

    @property
    def forecast(self) -> float | None:
        """GPU-hours at month end if the last 24 hours' burn rate goes on; None if rolling."""
        if self.resets_at is None:
            return None
        hours_left = max(0.0, (self.resets_at - self.now) / HOUR)
        return round(self.used + self.last_day / 24 * hours_left, 1)

    @property
    def sentence(self) -> str:
        """'team vision used 4,100 of 5,000 h100 GPU-hours this month (soft threshold 4,000)'."""
        when = "this month" if self.resets_at else f"in the last {self.window_days} days"
        text = f"team {self.team} used {self.used:,.0f} of {self.limit:,.0f} {self.flavor} GPU-hours {when}"
        return text + (f" (soft threshold {self.soft:,.0f})" if self.soft is not None else "")

    def for_scheduler(self) -> m.Budget:
        return m.Budget(
            team=self.team,
            flavor=self.flavor,
            limit=self.limit,
            used=self.used,
            period=self.period,
            resets_at=self.resets_at.timestamp() if self.resets_at else None,
            window_days=self.window_days,
        )


def budget_statuses(
    now: datetime, *, team_ids: Collection[int] | None = None
) -> list[BudgetStatus]:
    """Every budget (or those of `team_ids`) at `now`, by team and flavor: two queries,
    the second only if there is a budget."""
    rows = Budget.objects.values_list(
        "pk",
        "team_id",
        "flavor_id",
        "team__slug",
        "flavor__name",
        "period",
        "window_days",
        "limit_gpu_hours",
        "soft_gpu_hours",
        "warned_period",
    ).order_by("team__slug", "flavor__name")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    month_start, month_end = month_bounds(now)
    found = []
    for pk, team_id, flavor_id, team, flavor, period, days, limit, soft, warned in rows:
        monthly = period == Budget.Period.MONTH
        # Usage rows are hourly: a window starts at the top of its first hour.
        start = (
            month_start
            if monthly
            else (now - days * DAY).replace(minute=0, second=0, microsecond=0)
        )
        found.append(
            BudgetStatus(
                pk, team_id, flavor_id, team, flavor, period, days, limit, soft, warned, now,
                start, month_end if monthly else None,
            )
        )  # fmt: skip
    used = reports.gpu_hours_used({(b.team_id, b.flavor_id): b.starts_at for b in found}, now - DAY)
    return [_with_usage(b, *used[(b.team_id, b.flavor_id)]) for b in found]


def _with_usage(status: BudgetStatus, used: float, last_day: float) -> BudgetStatus:
    return replace(status, used=used, last_day=last_day)


def team_budgets(team_id: int, now: datetime) -> list[BudgetStatus]:
    """The team's budgets at `now`, by flavor (the overview, the API, the CSV)."""
    return budget_statuses(now, team_ids=[team_id])


def as_row(status: BudgetStatus) -> dict:
    """A budget as the API, the CSV and `berth share` show it."""
    return {
        "flavor": status.flavor,
        "period": status.period,
        "window_days": status.window_days if status.resets_at is None else None,
        "used_gpu_hours": round(status.used, 1),
        "soft_gpu_hours": status.soft,
        "limit_gpu_hours": status.limit,
        "percent_used": status.percent,
        "forecast_gpu_hours": status.forecast,
        "state": status.state,
        "starts_at": status.starts_at,
        "resets_at": status.resets_at,
    }

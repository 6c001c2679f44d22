"""GPU-hour budgets in a replay: the simulator's side of scheduler.budgets.

`--budget TEAM[:FLAVOR]=GPU_HOURS` (TEAM may be `*`: every team) gives teams a
calendar-month budget (UTC months of the trace's clock, which is epoch seconds).
The ledger counts each budgeted team and flavor's GPU-seconds in the current
month (ended attempts, plus running jobs up to now), hands the core one
`Budget` per pair at each pass, and counts the jobs that waited with
`budget_exhausted`. The core decides; nothing here admits or refuses a job.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler.budgets import job_gpu_hours
from scheduler.model import Budget, PendingJob, RunningJob, Team
from scheduler.reasons import BUDGET_EXHAUSTED

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A budget flag: team ('*' for every team), flavor ('*' for every flavor), GPU-hours."""

    team: str
    flavor: str
    gpu_hours: float


def budget_arg(text: str) -> BudgetSpec:
    """Parse --budget TEAM[:FLAVOR]=GPU_HOURS."""
    who, sep, hours = text.partition("=")
    team, _, flavor = who.partition(":")
    try:
        value = float(hours)
    except ValueError:
        value = -1.0
    if not sep or not team or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected TEAM[:FLAVOR]=GPU_HOURS with GPU_HOURS > 0, got {text!r}"
        )
    return BudgetSpec(team, flavor or "*", value)


def month_bounds(t: float) -> tuple[float, float]:
    """Return the start of the UTC calendar month holding epoch second t, and of the next."""
    d = datetime.fromtimestamp(t, UTC)
    start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.timestamp(), start.replace(year=year, month=month).timestamp()


class BudgetLedger:
    """Each budgeted (team, flavor)'s GPU-seconds in the current month of the replay."""

    def __init__(self, specs: Iterable[BudgetSpec], teams: Iterable[Team], flavors: Iterable[str]):
        self.limits: dict[tuple[str, str], float] = {}
        names, kinds = [t.name for t in teams], sorted(flavors)
        for s in specs:  # a later flag overrides an earlier one for the same pair
            for team in names if s.team == "*" else [s.team]:
                for flavor in kinds if s.flavor == "*" else [s.flavor]:
                    self.limits[(team, flavor)] = s.gpu_hours
        self.month = (-1.0, -1.0)
        self.ended: dict[tuple[str, str], float] = {}
        self.blocked: set[int] = set()

    def _roll(self, now: float) -> None:
        if not self.month[0] <= now < self.month[1]:
            self.month = month_bounds(now)
            self.ended = {}

    def release(self, run: RunningJob, now: float) -> None:
        """Count the GPU-seconds an attempt used this month when it ends or stops."""
        key = (run.team, run.flavor)
        if key in self.limits:
            self._roll(now)
            seconds = run.gpus * max(0.0, now - max(run.started_at, self.month[0]))
            self.ended[key] = self.ended.get(key, 0.0) + seconds

    def budgets(self, now: float, running: Iterable[RunningJob]) -> tuple[Budget, ...]:
        """Return the core's Budget of every budgeted pair at `now`."""
        self._roll(now)
        start, end = self.month
        used = dict(self.ended)
        for r in running:
            key = (r.team, r.flavor)
            if key in self.limits:
                used[key] = used.get(key, 0.0) + r.gpus * max(0.0, now - max(r.started_at, start))
        return tuple(
            Budget(team, flavor, limit, used.get((team, flavor), 0.0) / HOUR, "month", end)
            for (team, flavor), limit in sorted(self.limits.items())
        )

    def note(self, verdicts) -> None:
        """Remember the jobs told `budget_exhausted` (the summary's budget_blocked_jobs)."""
        self.blocked.update(v.job_id for v in verdicts if v.reason_code == BUDGET_EXHAUSTED)

    def fits(self, job: PendingJob) -> bool:
        """Return whether the job fits its whole budget, so that a reset may start it."""
        return job_gpu_hours(job) <= self.limits.get((job.team, job.flavor), math.inf)

    def next_reset(self) -> float:
        return self.month[1]

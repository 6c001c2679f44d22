"""What-if arithmetic: the same history replayed with and without a change, team by team."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from scheduler.model import Quota, Team

CHANGES = ("nominal", "borrowing_limit", "weight")
METRICS = ("mean_wait_s", "p90_wait_s", "gpu_hours")


def apply_change(
    teams: Sequence[Team], team: str, change: str, value: float | None, flavor: str | None = None
) -> tuple[Team, ...]:
    """Return the teams with one setting of one team changed.

    nominal and borrowing_limit are per flavor (borrowing_limit None: no
    limit); weight is the team's fair-share weight.
    """
    if change not in CHANGES:
        raise ValueError(f"unknown change {change!r}; known: {', '.join(CHANGES)}")
    if team not in {t.name for t in teams}:
        raise ValueError(f"no team {team!r}")
    out = []
    for t in teams:
        if t.name == team:
            t = _changed(t, change, value, flavor)
        out.append(t)
    return tuple(out)


def _changed(t: Team, change: str, value: float | None, flavor: str | None) -> Team:
    if change == "weight":
        if value is None or value <= 0:
            raise ValueError("a weight must be above 0")
        return replace(t, weight=float(value))
    if flavor is None:
        raise ValueError(f"a {change} change needs a flavor")
    quota = t.quotas.get(flavor, Quota(0))
    if change == "nominal":
        if value is None or value < 0:
            raise ValueError("a nominal quota must be 0 or more")
        quota = replace(quota, nominal=int(value))
        if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
            quota = replace(quota, lending_limit=quota.nominal)
    else:
        if value is not None and value < 0:
            raise ValueError("a borrowing limit must be 0 or more")
        quota = replace(quota, borrowing_limit=None if value is None else int(value))
    return replace(t, quotas={**t.quotas, flavor: quota})


def compare(base: dict, changed: dict, teams: Iterable[str] | None = None) -> list[dict]:
    """Return, per team, each metric before, after and the difference (after - before).

    `base` and `changed` are simulation summaries (their per_team entries);
    `teams` limits the rows (default: every team in either run).
    """
    b, c = base["per_team"], changed["per_team"]
    names = sorted(set(b) | set(c)) if teams is None else sorted(teams)
    rows = []
    for name in names:
        before, after = b.get(name, {}), c.get(name, {})
        row = {"team": name, "jobs": before.get("jobs", after.get("jobs", 0))}
        for m in METRICS:
            x, y = float(before.get(m, 0.0)), float(after.get(m, 0.0))
            row[m] = {"before": x, "after": y, "delta": round(y - x, 1)}
        rows.append(row)
    return rows

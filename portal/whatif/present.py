"""Turn a run's stored results into rows for the page and the admin."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.sim.results import duration

from .models import WhatIfRun


@dataclass
class Cell:
    before: str
    after: str
    delta: str
    better: bool | None  # None: no change
    label: str = ""


@dataclass
class Row:
    team: str
    jobs: int
    changed: bool  # the team whose setting the run changes
    mean_wait: Cell
    p90_wait: Cell
    gpu_hours: Cell

    @property
    def cells(self) -> tuple[Cell, Cell, Cell]:
        return (self.mean_wait, self.p90_wait, self.gpu_hours)


def _wait(m: dict, label: str) -> Cell:
    d = m["delta"]
    sign = "+" if d > 0 else "−" if d < 0 else "±"
    return Cell(
        duration(m["before"]),
        duration(m["after"]),
        f"{sign}{duration(abs(d))}",
        None if d == 0 else d < 0,
        label,
    )


def _hours(m: dict) -> Cell:
    d = m["delta"]
    return Cell(
        f"{m['before']:,.0f}",
        f"{m['after']:,.0f}",
        f"{d:+,.0f}",
        None if round(d) == 0 else d > 0,
        "GPU-hours",
    )


def result_rows(run: WhatIfRun, shown: set[str] | None) -> list[Row]:
    """Return one row per team the viewer may see (shown None: all), the changed team first."""
    rows = []
    for t in run.results.get("teams", []):
        if shown is not None and t["team"] not in shown:
            continue
        rows.append(
            Row(
                team=t["team"],
                jobs=t["jobs"],
                changed=t["team"] == run.team.slug,
                mean_wait=_wait(t["mean_wait_s"], "Mean wait"),
                p90_wait=_wait(t["p90_wait_s"], "p90 wait"),
                gpu_hours=_hours(t["gpu_hours"]),
            )
        )
    rows.sort(key=lambda r: (not r.changed, r.team))
    return rows

"""Plain-text output: tables, durations and times people can read at a glance."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def table(rows: list[list], headers: list[str]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def duration(seconds: float) -> str:
    """`42s`, `5m12s`, `3h05m`, `2d04h`."""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def when(value: str | None, now: datetime | None = None) -> str | None:
    """`in 20m (12:30 UTC)` / `5m ago (12:10 UTC)`; the date too when it is not today."""
    moment = parse_time(value)
    if moment is None:
        return None
    now = now or datetime.now(UTC)
    delta = (moment - now).total_seconds()
    clock = moment.astimezone(UTC)
    stamp = clock.strftime("%H:%M UTC" if clock.date() == now.date() else "%Y-%m-%d %H:%M UTC")
    if abs(delta) < 30:
        return f"now ({stamp})"
    return f"in {duration(delta)} ({stamp})" if delta > 0 else f"{duration(-delta)} ago ({stamp})"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def shape(job: dict) -> str:
    return f"{job['workers']} × {job['gpus_per_worker']} {job['flavor']} ({job['gpus']} GPUs)"

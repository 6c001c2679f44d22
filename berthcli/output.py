"""Plain-text output: tables, durations and times people can read at a glance."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime

# The same instants and command lines as the portal's pages (berthtext).
from berthtext import ISO_INSTANT
from berthtext import command_line as command_line


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
    """`in 20m (12:30 UTC)` / `30s ago (12:10 UTC)`; the date too when it is not today."""
    parts = _parts(value, now)
    return parts and f"{parts[0]} ({parts[1]})"


def at(value: str | None, now: datetime | None = None) -> str | None:
    """`12:30 UTC (in 20m)`: for a sentence that says "from …", "since …", "by …"."""
    parts = _parts(value, now)
    return parts and f"{parts[1]} ({parts[0]})"


def _parts(value: str | None, now: datetime | None) -> tuple[str, str] | None:
    """(relative, clock) for an ISO instant: ("in 20m", "12:30 UTC"), or None."""
    moment = parse_time(value)
    if moment is None:
        return None
    now = now or datetime.now(UTC)
    return _relative(moment, now), _stamp(moment, now)


def times_in(text: str, now: datetime | None = None) -> str:
    """A sentence from the portal with each instant in it as `at` writes it; what only
    looks like one (a user's cancel reason with month 13) stays as written."""

    def shown(match: re.Match) -> str:
        try:
            return at(match.group(0), now)
        except ValueError:
            return match.group(0)

    return ISO_INSTANT.sub(shown, text)


def _relative(moment: datetime, now: datetime) -> str:
    """`in 20m`, `29s ago`, or `now` under a second: the web's threshold too
    (portal.dashboard.format.relative, NOW_SECONDS; this CLI may not import the portal)."""
    delta = (moment - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def _stamp(moment: datetime, now: datetime) -> str:
    clock = moment.astimezone(UTC)
    return clock.strftime("%H:%M UTC" if clock.date() == now.date() else "%Y-%m-%d %H:%M UTC")


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def shape(job: dict) -> str:
    gpus = job["gpus"]
    return f"{job['workers']} × {job['gpus_per_worker']} {job['flavor']} ({gpus} GPU{'' if gpus == 1 else 's'})"

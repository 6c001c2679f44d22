"""Spans of time in words for the sentences people read ("12 min", "3 h 20 min").

The scheduler's reasons, the portal's pages and events use this one formatter;
instants are never written as offsets ("+3593 s") but as absolute UTC instants
(scheduler.explain.instant), which each page or the CLI renders for its reader.
"""

from __future__ import annotations

from functools import lru_cache


def duration(seconds: float | None) -> str:
    """Return '45 s', '12 min', '3 h 20 min' or '2 d 4 h'; '—' for None."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@lru_cache(maxsize=4096)  # a pass's reasons name the same few instants thousands of times
def instant(t: float) -> str:
    """Return epoch seconds `t` as an ISO 8601 UTC instant: '2026-12-01T10:06:00Z'.

    Pages and the CLI find these in reasons and show each reader a relative time
    with the absolute one beside it. Arithmetic, not a clock (the core may not
    import datetime): the civil date of day t // 86400 by Howard Hinnant's
    civil_from_days (https://howardhinnant.github.io/date_algorithms.html).
    """
    days, rest = divmod(round(t), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    era, doe = divmod(days + 719468, 146097)
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}Z"

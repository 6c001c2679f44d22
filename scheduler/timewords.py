"""Spans of time in words for the sentences people read ("12 min", "3 h 20 min").

The scheduler's reasons, the portal's pages and events use this one formatter;
instants are never written as offsets ("+3593 s") but as absolute UTC instants
(scheduler.explain.instant), which each page or the CLI renders for its reader.
"""

from __future__ import annotations


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

"""Small formatters for people: durations, relative times, GPU counts."""

from __future__ import annotations

from datetime import datetime

from berthtext import command_line  # one quoting for the web and the CLI
from scheduler.timewords import duration

__all__ = ["NOW_SECONDS", "command_line", "duration", "parse_duration", "relative"]


# Under this many seconds a time is "now", on the web and in `berth` alike
# (berthcli.output._relative keeps its own copy: the CLI may not import the portal).
NOW_SECONDS = 1


def relative(when: datetime | None, now: datetime, *, about: bool = False) -> str:
    """Return 'in 12 min', '29 s ago' or 'now' (under NOW_SECONDS); '—' for None.

    The web's one relative time. `about=True` rounds it to one unit for a time
    shown beside its clock, 'in about 2 h', '12 min ago' (the `with_times`
    filter); otherwise it is `duration`'s, 'in 1 h 30 min'. `berth` says the
    same with its own units ('29s ago', berthcli.output._relative), and the same
    threshold for "now".
    """
    if when is None:
        return "—"
    delta = (when - now).total_seconds()
    span = abs(delta)
    if span < NOW_SECONDS:
        return "now"
    words = _about(span) if about else duration(span)
    return f"in {words}" if delta > 0 else f"{words} ago"


def _about(span: float) -> str:
    if span < 60:
        return duration(span)
    if span < 3600:
        return f"{round(span / 60)} min"
    if span < 48 * 3600:
        return f"about {round(span / 3600)} h"
    return f"about {round(span / 86400)} d"


def parse_duration(text: str) -> int:
    """Parse '3600', '90m', '2h', '1h30m', '1d' into seconds; raise ValueError otherwise."""
    text = text.strip().lower().replace(" ", "")
    if text.isdigit():
        return int(text)
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    total, number = 0, ""
    for char in text:
        if char.isdigit():
            number += char
        elif char in units and number:
            total, number = total + int(number) * units[char], ""
        else:
            raise ValueError(text)
    if number or not text:
        raise ValueError(text)
    return total

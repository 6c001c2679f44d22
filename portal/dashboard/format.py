"""Small formatters for people: durations, relative times, GPU counts."""

from __future__ import annotations

from datetime import datetime

from berthcli.output import command_line  # one quoting for the web and the CLI
from scheduler.timewords import duration

__all__ = ["command_line", "duration", "in_words", "parse_duration", "relative"]


def relative(when: datetime | None, now: datetime) -> str:
    """Return 'in 12 min', '5 min ago' or 'now'; '—' for None."""
    if when is None:
        return "—"
    delta = (when - now).total_seconds()
    if abs(delta) < 30:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


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


def in_words(when: datetime, now: datetime) -> str:
    """Return 'in about 2 h', 'in 12 min', 'in under a minute', '5 min ago': a time a
    person reads at a glance (the exact one goes in a tooltip beside it)."""
    delta = (when - now).total_seconds()
    span = abs(delta)
    if span < 60:
        return "in under a minute" if delta > 0 else "just now"
    if span < 3600:
        words = f"{round(span / 60)} min"
    elif span < 48 * 3600:
        words = f"about {round(span / 3600)} h"
    else:
        words = f"about {round(span / 86400)} d"
    return f"in {words}" if delta > 0 else f"{words} ago"

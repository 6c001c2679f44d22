"""Small formatters for people: durations, relative times, GPU counts."""

from __future__ import annotations

from datetime import datetime

from scheduler.timewords import duration

__all__ = ["duration", "parse_duration", "relative"]


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

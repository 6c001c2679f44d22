"""Typed readers for settings from the environment.

Each helper raises ImproperlyConfigured naming the variable when its value is
malformed, so a typo in a deployment fails at start-up instead of running with
a silently different configuration (healthchecks' hc/settings.py does the same).
"""

from __future__ import annotations

import math
import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    """Return the variable's value, the default, or raise if it is required and unset."""
    value = _raw(name)
    if value is None:
        if required:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be ≥ {minimum}, got {number}")
    return number


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """A finite number (nan and inf are refused: a duration of inf fails later, at the
    first use, far from the variable that caused it)."""
    value = _raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be ≥ {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be ≤ {maximum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; empty items are dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def env_rate(name: str, default: str) -> str:
    """A rate like `10/min` or `10/15min` (see parse_rate)."""
    value = _raw(name) or default
    try:
        parse_rate(value)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name} must be a rate like 10/min or 10/15min, got {value!r}"
        ) from None
    return value


PLACEHOLDER_MARK = "change-me"


def refuse_placeholder(name: str, value: str | None) -> None:
    """Refuse a value still holding deploy/berth.env.example's placeholder (production only).

    An unedited example file would otherwise run with a signing key or a metrics
    token that anyone can read in the repository.
    """
    if value and PLACEHOLDER_MARK in value.lower():
        raise ImproperlyConfigured(
            f"{name} still holds the placeholder from deploy/berth.env.example; "
            "set it to a long random value, e.g. "
            'python3 -c "import secrets; print(secrets.token_urlsafe(64))"'
        )


PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")


def parse_rate(rate: str) -> tuple[int, int]:
    """`"3000/min"` → (3000, 60); `"10/15min"` → (10, 900). ValueError if malformed."""
    match = _RATE.match(rate.lower())
    if match is None or match.group(3) not in PERIODS or match.group(2) == "0":
        raise ValueError(f"not a rate like 3000/min or 10/15min: {rate!r}")
    count, multiple, unit = match.groups()
    return int(count), int(multiple or 1) * PERIODS[unit]

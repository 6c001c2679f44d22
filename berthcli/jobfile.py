"""Job specs from the command line and job files (YAML or JSON).

A file holds one job (a mapping), or many: a list, or `{"team": …, "jobs": [...]}`,
which `berth submit` sends as one all-or-none bulk submission. Flags given on the
command line override the file, for every job in it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SpecFileError(Exception):
    """The job file or a flag cannot be read; the message says where."""


def parse_duration(text: str | int) -> int:
    """Seconds from `90m`, `2h30m`, `1d`, `45s`, or Slurm's clock forms `MM:SS`,
    `HH:MM:SS`, `D-HH`, `D-HH:MM:SS`. A bare number is refused: Slurm reads it as
    minutes and Berth's fields count seconds, so it would be silently wrong for someone."""
    if isinstance(text, int):
        return text
    text = str(text).strip().lower()
    if text.isdigit():
        raise SpecFileError(f"give the duration {text!r} a unit: {text}s, {text}m or {text}h")
    unit = _DURATION.match(text)
    if text and unit:
        d, h, m, s = (int(g or 0) for g in unit.groups())
        return ((d * 24 + h) * 60 + m) * 60 + s
    clock = _CLOCK.match(text)
    if clock and (":" in text or "-" in text):
        days, first, second, third = clock.groups()
        if days is not None:  # D-HH[:MM[:SS]]
            h, m, s = int(first), int(second or 0), int(third or 0)
        elif third is not None:  # HH:MM:SS
            h, m, s = int(first), int(second), int(third)
        else:  # MM:SS
            h, m, s = 0, int(first), int(second)
        return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s
    raise SpecFileError(f"cannot read the duration {text!r} (try 90m, 2h, 1d or 1:30:00)")


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SpecFileError(f"--env wants NAME=VALUE, got {item!r}")
        env[name] = value
    return env


def load_file(path: str) -> tuple[str | None, list[dict], bool]:
    """Return (team, jobs, is_bulk) from a YAML or JSON file (`-` reads stdin)."""
    try:
        text = Path("/dev/stdin").read_text() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SpecFileError(
            f"{path} is not valid {'JSON' if path.endswith('.json') else 'YAML'}: {exc}"
        ) from None
    if isinstance(data, list):
        return None, _jobs(data, path), True
    if isinstance(data, dict) and "jobs" in data:
        extra = set(data) - {"team", "jobs"}
        if extra:
            raise SpecFileError(
                f"{path}: next to `jobs` only `team` is allowed, not {sorted(extra)}"
            )
        return data.get("team"), _jobs(data["jobs"], path), True
    if isinstance(data, dict):
        return data.pop("team", None), [data], False
    raise SpecFileError(f"{path} should hold a job (a mapping) or a list of jobs")


def _jobs(items: Any, path: str) -> list[dict]:
    if not isinstance(items, list) or not all(isinstance(j, dict) for j in items):
        raise SpecFileError(f"{path}: `jobs` should be a list of mappings")
    return items


def normalise(job: dict) -> dict:
    """Accept friendlier spellings in files: a command string, durations like `2h`."""
    job = dict(job)
    if isinstance(job.get("command"), str):
        job["command"] = shlex.split(job["command"])
    for key in ("max_runtime_seconds", "grace_period_seconds"):
        if isinstance(job.get(key), str):
            job[key] = parse_duration(job[key])
    if "time" in job:
        job["max_runtime_seconds"] = parse_duration(job.pop("time"))
    if not job.get("name") and job.get("command"):
        job["name"] = Path(str(job["command"][0])).name[:200]
    return job

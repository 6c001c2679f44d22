"""What a valid job-array spec is: Slurm's `--array` grammar, parsed once for the API,
the CLI (which sends the text as written) and the dashboard.

    0-99        indices 0 to 99
    1,3,5-9     a list of indices and ranges
    0-99:4      a range with a step (0, 4, 8, … 96)
    0-99%8      any of these, at most 8 tasks holding GPUs at once

Indices are sorted and must not repeat; an array has at most MAX_TASKS tasks, its
indices are below MAX_INDEX (Slurm's MaxArraySize bounds both the same way) and its
limit is at most MAX_TASKS.
Every problem is a sentence for the `array` field (jobspec.SpecError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from portal.core.jobspec import SpecError

MAX_TASKS = 10_000
MAX_INDEX = 1_000_000  # indices 0 … 999,999
MAX_SPEC_CHARS = 2000
INDEX_PLACEHOLDER = "{index}"
# Set by Berth in every task's environment; a spec may not set them itself.
ARRAY_ENV = (
    "BERTH_ARRAY_ID",
    "BERTH_ARRAY_INDEX",
    "BERTH_ARRAY_SIZE",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
)
_PART = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?\Z")  # ASCII digits only
_LIMIT = re.compile(r"[0-9]+\Z")
EXAMPLES = "e.g. 0-99, 1,3,5-9, 0-99:4 or 0-99%8"


@dataclass(frozen=True)
class ArraySpec:
    """The parsed spec: the task indices in order and the concurrency limit (None: none)."""

    text: str
    indices: tuple[int, ...]
    limit: int | None = None

    @property
    def size(self) -> int:
        return len(self.indices)


def parse_array(text: object) -> ArraySpec:
    """Return the ArraySpec of `text`, or raise SpecError on the `array` field."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(f"Give the task indices as text, {EXAMPLES}.")
    text = text.strip()
    if len(text) > MAX_SPEC_CHARS:
        raise _bad(f"At most {MAX_SPEC_CHARS} characters.")
    body, sep, limit_text = text.partition("%")
    limit = _limit(limit_text) if sep else None
    indices: list[int] = []
    for part in body.split(","):
        indices += _indices(part.strip())
        if len(indices) > MAX_TASKS:
            raise _bad(f"At most {MAX_TASKS:,} tasks in one array.")
    seen: set[int] = set()
    for i in indices:  # one pass: counted per index, 10,000 of them cost a second of CPU
        if i in seen:
            raise _bad(f"Index {i} appears twice.")
        seen.add(i)
    return ArraySpec(text, tuple(sorted(indices)), limit)


def _indices(part: str) -> list[int]:
    match = _PART.match(part)
    if match is None:
        raise _bad(f"{part!r} is not an index or a range: {EXAMPLES}.")
    first, last, step = (int(g) if g is not None else None for g in match.groups())
    last = first if last is None else last
    if last >= MAX_INDEX:
        raise _bad(f"Indices must be below {MAX_INDEX:,} ({last} is not).")
    if last < first:
        raise _bad(f"The range {part} ends before it starts.")
    if step is not None and step < 1:
        raise _bad(f"The step in {part} must be at least 1.")
    step = step or 1
    if (last - first) // step + 1 > MAX_TASKS:
        raise _bad(f"At most {MAX_TASKS:,} tasks in one array.")
    return list(range(first, last + 1, step))


def _limit(text: str) -> int:
    if not _LIMIT.match(text) or int(text) < 1:
        raise _bad(f"After % give how many tasks may run at once, a whole number ≥ 1: {EXAMPLES}.")
    if int(text) > MAX_TASKS:  # (no more tasks than that: beyond the column's range, a 500)
        raise _bad(f"After % give at most {MAX_TASKS:,}, the most tasks an array has.")
    return int(text)


def _bad(message: str) -> SpecError:
    return SpecError({"array": [message]})


def compact(indices: list[int] | tuple[int, ...]) -> str:
    """Return indices as squeue writes them: `0-3,7,9-11` (sorted, runs as ranges)."""
    parts, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(_run(run))
        run = [i]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def task_values(values: dict, index: int) -> dict:
    """A task's field values: `{index}` replaced in its name and each command argument."""
    out = dict(values)
    name = values.get("name")
    if isinstance(name, str):
        out["name"] = name.replace(INDEX_PLACEHOLDER, str(index))
    command = values.get("command")
    if isinstance(command, list):
        out["command"] = [
            a.replace(INDEX_PLACEHOLDER, str(index)) if isinstance(a, str) else a for a in command
        ]
    return out


def task_env(env: dict, array_id: int, index: int, spec: ArraySpec) -> dict:
    """A task's environment: its own plus the array's names (ARRAY_ENV), as Slurm sets
    them for `sbatch --array` so ported scripts keep working."""
    return dict(env) | {
        "BERTH_ARRAY_ID": str(array_id),
        "BERTH_ARRAY_INDEX": str(index),
        "BERTH_ARRAY_SIZE": str(spec.size),
        "SLURM_ARRAY_JOB_ID": str(array_id),
        "SLURM_ARRAY_TASK_ID": str(index),
        "SLURM_ARRAY_TASK_COUNT": str(spec.size),
        "SLURM_ARRAY_TASK_MIN": str(spec.indices[0]),
        "SLURM_ARRAY_TASK_MAX": str(spec.indices[-1]),
    }

"""The agent protocol's one schema (docs/protocol.md): every field of a registration and
a heartbeat with its type, range, length and character rules, checked before anything
is read from or written to the database.

Limits come from the columns the values are stored in, taken from the models (so a
value PostgreSQL or SQLite would refuse is a 400 naming the field, never a 500 that
the agent retries until its node goes not ready), and from the protocol itself (a
percentage is 0 to 100). Text never holds NUL (PostgreSQL cannot store it) nor a lone
surrogate (not UTF-8); identity fields also no control or bidi control characters. Unknown fields are
ignored, so a newer agent can talk to an older portal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.backends.base.operations import BaseDatabaseOperations
from django.utils.dateparse import parse_datetime

from portal.core.actions.heartbeat import GpuReport
from portal.core.actions.nodes import Registration
from portal.core.actions.workers import WORKER_KEY, WorkerReport
from portal.core.models import Gpu, Node, Worker

MAX_ERRORS = 20
# Control characters, and the bidi controls that make a name read as another.
_CONTROL = re.compile("[\x00-\x1f\x7f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class Invalid(Exception):
    """The body breaks the schema; `fields` names each bad field ("gpus[0].uuid")."""

    def __init__(self, fields: dict[str, list[str]]):
        super().__init__("Malformed field." if len(fields) == 1 else "Malformed fields.")
        self.fields = fields


class Errors(dict):
    def add(self, where: str, message: str) -> None:
        if len(self) < MAX_ERRORS:
            self.setdefault(where, []).append(message)


def column_length(model, name: str) -> int:
    return model._meta.get_field(name).max_length


def column_range(model, name: str) -> tuple[int, int]:
    """The integer range of a column, the same on every database (Django's own table)."""
    internal = model._meta.get_field(name).get_internal_type()
    return BaseDatabaseOperations.integer_field_ranges[internal]


# --- field kinds ------------------------------------------------------------------------
#
# A scalar kind's `check(value)` returns the clean value or raises Bad with the reason;
# the containers (Obj, List) carry the field's path and build it only for an error
# (this runs for 2,000 heartbeats every 10 s).


class Bad(Exception):
    """Why a value was refused."""


@dataclass(frozen=True)
class Text:
    """A string of at most `max_length` characters. `single_line` refuses control
    characters; `overflow="tail"` keeps the end of a longer value (log tails), "head"
    its start (free-text reasons); identity fields refuse a longer value."""

    max_length: int
    min_length: int = 0
    single_line: bool = True
    overflow: str = "refuse"
    choices: tuple[str, ...] = ()
    pattern: re.Pattern | None = None
    pattern_hint: str = ""

    def check(self, value: Any) -> str:
        if type(value) is not str:
            raise Bad("Expected a string.")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise Bad("Not valid Unicode (a lone surrogate).") from None
        if self.single_line:  # the control characters include NUL
            if _CONTROL.search(value):
                raise Bad(
                    "May not contain NUL characters."
                    if "\x00" in value
                    else "May not contain control or bidi control characters."
                )
        elif "\x00" in value:
            raise Bad("May not contain NUL characters.")
        if len(value) > self.max_length:
            if self.overflow == "refuse":
                raise Bad(f"At most {self.max_length} characters.")
            value = (
                value[-self.max_length :] if self.overflow == "tail" else value[: self.max_length]
            )
        if len(value) < self.min_length:
            raise Bad(f"At least {self.min_length} character(s).")
        if self.choices and value not in self.choices:
            raise Bad(f"One of {', '.join(self.choices)}.")
        if self.pattern and not self.pattern.fullmatch(value):
            raise Bad(self.pattern_hint)
        return value


@dataclass(frozen=True)
class Num:
    """A JSON number in the range: where `integer`, a JSON integer (not 1.0, "1" or
    true); else any finite number, as a float."""

    low: int
    high: int
    integer: bool = False

    def check(self, value: Any) -> int | float:
        kind = type(value)
        if kind is not int and (self.integer or kind is not float):
            raise Bad("Expected an integer." if self.integer else "Expected a number.")
        if not self.low <= value <= self.high:  # NaN compares false: refused too
            what = "An integer" if self.integer else "A finite number"
            raise Bad(f"{what} between {self.low} and {self.high}.")
        return value if self.integer else float(value)


@dataclass(frozen=True)
class Time:
    """An ISO 8601 time; one without an offset is UTC (the protocol's times are UTC)."""

    def check(self, value: Any) -> datetime:
        if type(value) is not str or len(value) > 40 or "\x00" in value:
            raise Bad("Expected an ISO 8601 time.")
        try:
            parsed = parse_datetime(value)
            if parsed is not None:
                parsed = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
        except (ValueError, OverflowError):
            parsed = None
        if parsed is None or parsed.year < 1970:
            raise Bad("Expected a real ISO 8601 time after 1970.")
        return parsed


@dataclass(frozen=True)
class F:
    """A field of an object: its kind, whether it must be present, whether it may be
    null (an optional field that is null or absent takes its default)."""

    kind: Any
    required: bool = False
    null: bool = False
    default: Any = None


class Obj:
    def __init__(self, fields: dict[str, F]):
        self.fields = fields
        self._plan = [
            (name, f.kind, isinstance(f.kind, Obj | List), f.required, f.null, f.default)
            for name, f in fields.items()
        ]

    def clean(self, value: Any, where: str, errors: Errors) -> dict | None:
        if type(value) is not dict:
            return errors.add(where or "body", "Expected a JSON object.")
        out, get, prefix = {}, value.get, f"{where}." if where else ""
        for name, kind, nested, required, null, default in self._plan:
            raw = get(name)
            if raw is None:
                if required and (not null or name not in value):
                    errors.add(prefix + name, "This field is required.")
                out[name] = default
            elif nested:
                out[name] = kind.clean(raw, prefix + name, errors)
            else:
                try:
                    out[name] = kind.check(raw)
                except Bad as exc:
                    errors.add(prefix + name, str(exc))
                    out[name] = None
        return out


@dataclass(frozen=True)
class List:
    item: Obj
    max_items: int
    unique: tuple[str, ...] = ()  # keys of the items that must be unique across the list

    def clean(self, value: Any, where: str, errors: Errors) -> list | None:
        if type(value) is not list:
            return errors.add(where, "Expected a list.")
        if len(value) > self.max_items:
            return errors.add(where, f"At most {self.max_items} entries.")
        items = [self.item.clean(v, f"{where}[{i}]", errors) for i, v in enumerate(value)]
        for key in self.unique:
            seen = [item[key] for item in items if item is not None]
            if len(set(seen)) != len(seen):
                errors.add(where, f"Each entry's {key} must be unique.")
        return items


# --- the protocol ------------------------------------------------------------------------

GPU = Obj(
    {
        "index": F(Num(*column_range(Gpu, "index"), integer=True), required=True),
        "uuid": F(Text(column_length(Gpu, "uuid"), min_length=1), required=True),
        "name": F(Text(column_length(Gpu, "product_name"), min_length=1), required=True),
        "memory_total_mib": F(Num(*column_range(Gpu, "memory_mib"), integer=True), default=0),
        "memory_used_mib": F(Num(*column_range(Gpu, "memory_used_mib"), integer=True), null=True),
        "utilization_pct": F(Num(0, 100), null=True),
        "temperature_c": F(Num(-273, 1000), null=True),
        "power_w": F(Num(0, 1_000_000), null=True),
        "health": F(Text(16, choices=tuple(Gpu.Health.values)), default="healthy"),
        "health_reason": F(Text(column_length(Gpu, "health_reason"), overflow="head"), default=""),
    }
)

WORKER_STATES = ("starting", "running", "stopping", "exited", "failed_to_start")
LOG_TAIL_CHARS = 8192

WORKER = Obj(
    {
        "key": F(
            Text(40, pattern=WORKER_KEY, pattern_hint="A worker key: <job id>.<attempt>.<rank>."),
            required=True,
        ),
        "state": F(Text(16, choices=WORKER_STATES), required=True),
        "exit_code": F(Num(*column_range(Worker, "exit_code"), integer=True), null=True),
        "started_at": F(Time(), null=True),
        "finished_at": F(Time(), null=True),
        "log_tail": F(Text(LOG_TAIL_CHARS, single_line=False, overflow="tail"), null=True),
    }
)

MAX_GPUS, MAX_WORKERS = 256, 4096
GPUS = F(List(GPU, MAX_GPUS, unique=("uuid", "index")), required=True)
AGENT_VERSION = F(Text(column_length(Node, "agent_version")), default="")

HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")

REGISTRATION = Obj(
    {
        "bootstrap_token": F(Text(128), default=""),
        "hostname": F(
            Text(
                column_length(Node, "hostname"),
                min_length=1,
                pattern=HOSTNAME,
                pattern_hint="A host name: letters, digits, '.', '-' and '_'.",
            ),
            required=True,
        ),
        "rack": F(Text(column_length(Node, "rack")), default=""),
        "block": F(Text(column_length(Node, "block")), default=""),
        "agent_version": AGENT_VERSION,
        "gpus": GPUS,
    }
)

HEARTBEAT = Obj(
    {
        "agent_version": AGENT_VERSION,
        "gpus": GPUS,
        "workers": F(List(WORKER, MAX_WORKERS, unique=("key",)), default=[]),
    }
)


@dataclass(frozen=True)
class Heartbeat:
    agent_version: str
    gpus: list[GpuReport]
    workers: list[WorkerReport]


def _checked(schema: Obj, data: Any) -> dict:
    errors = Errors()
    clean = schema.clean(data, "", errors)
    if errors:
        raise Invalid(dict(errors))
    return clean


def parse_registration(data: Any) -> tuple[Registration, str]:
    """The registration and the bootstrap token it carries ("" when none)."""
    clean = _checked(REGISTRATION, data)
    token = clean.pop("bootstrap_token")
    return Registration(**clean | {"gpus": [GpuReport(**g) for g in clean["gpus"]]}), token


def parse_heartbeat(data: Any) -> Heartbeat:
    clean = _checked(HEARTBEAT, data)
    return Heartbeat(
        agent_version=clean["agent_version"],
        gpus=[GpuReport(**g) for g in clean["gpus"]],
        workers=[WorkerReport(**w) for w in clean["workers"]],
    )

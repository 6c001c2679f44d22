"""Workers as the protocol names them: specs from the portal, statuses the runtimes report.

See docs/protocol.md: a worker is keyed ``"<job_id>.<attempt>.<rank>"``; the
portal sends specs in ``run`` and stop orders in ``stop``; the agent reports a
status per worker until the portal acknowledges its exit.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STARTING = "starting"
RUNNING = "running"
STOPPING = "stopping"
EXITED = "exited"
FAILED_TO_START = "failed_to_start"
LIVE_STATES = frozenset({STARTING, RUNNING, STOPPING})
TERMINAL_STATES = frozenset({EXITED, FAILED_TO_START})

LOG_TAIL_BYTES = 8 * 1024
# The protocol's default for a live worker the portal no longer wants.
DEFAULT_STOP_SIGNAL = signal.SIGTERM
DEFAULT_GRACE_S = 30.0

# Keys end up in file and container names, so they are checked strictly.
KEY_RE = re.compile(r"^(\d{1,18})\.(\d{1,9})\.(\d{1,9})$")

# Signals a stop order may use: the shim forwards these to the worker's
# process group; SIGKILL goes straight to the kill step.
STOP_SIGNALS = frozenset(
    {
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGKILL,
    }
)


def valid_key(key: object) -> bool:
    return isinstance(key, str) and KEY_RE.match(key) is not None


def key_order(key: str) -> tuple[int, int, int]:
    """Sort keys by (job, attempt, rank) so rank 0, usually the rendezvous master, starts first."""
    match = KEY_RE.match(key)
    if match is None:
        raise ValueError(f"malformed worker key {key!r}")
    job, attempt, rank = match.groups()
    return int(job), int(attempt), int(rank)


def parse_signal(value: object) -> signal.Signals:
    """Return the signal named by ``value`` ("SIGUSR1", "USR1" or 10); ValueError if not a stop signal."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            sig = signal.Signals(value)
        elif isinstance(value, str):
            name = value.strip().upper()
            sig = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        else:
            raise ValueError
    except (KeyError, ValueError):
        raise ValueError(f"unknown signal {value!r}") from None
    if sig not in STOP_SIGNALS:
        raise ValueError(f"signal {sig.name} cannot be used to stop a worker")
    return sig


def utc_iso(ts: float | None) -> str | None:
    """Format a Unix time as the protocol's ISO 8601 UTC string (whole seconds)."""
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def tail_text(data: bytes, limit: int = LOG_TAIL_BYTES) -> str:
    """Return the last lines of ``data`` as text of at most ``limit`` UTF-8 bytes.

    Starts at a line boundary when one is near, and re-checks the size after
    decoding because replacement characters can grow the text. A NUL a worker printed
    becomes a replacement character: the portal refuses text with NUL in it.
    """
    chunk = data[-limit:]
    if len(data) > limit:
        newline = chunk.find(b"\n")
        if 0 <= newline < len(chunk) - 1:
            chunk = chunk[newline + 1 :]
    text = chunk.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    while len(text.encode("utf-8")) > limit:
        text = text[len(text) // 8 + 1 :]
    return text


def _require(data: Mapping[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value


def _optional_int(data: Mapping[str, Any], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    return _require(data, name, int)


def _str_list(data: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = data.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"field {name!r} must be a list of strings")
    return tuple(value)


def _str_map(data: Mapping[str, Any], name: str) -> dict[str, str]:
    value = data.get(name) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"field {name!r} must be an object of strings")
    return {k: str(v) for k, v in value.items()}


@dataclass(frozen=True)
class WorkerSpec:
    """One entry of the heartbeat reply's ``run`` list: what to start and where."""

    key: str
    job_id: int
    attempt: int
    rank: int
    world_size: int
    image: str = ""
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_uuids: tuple[str, ...] = ()
    master_addr: str = ""
    master_port: int = 0
    max_runtime_s: int | None = None

    @classmethod
    def from_json(cls, data: object) -> WorkerSpec:
        """Validate a ``run`` entry; ValueError names the first bad field."""
        if not isinstance(data, dict):
            raise ValueError("run entry must be an object")
        key = data.get("key")
        if not valid_key(key):
            raise ValueError(f"malformed worker key {key!r}")
        spec = cls(
            key=key,
            job_id=_require(data, "job_id", int),
            attempt=_require(data, "attempt", int),
            rank=_require(data, "rank", int),
            world_size=_require(data, "world_size", int),
            image=str(data.get("image") or ""),
            command=_str_list(data, "command"),
            env=_str_map(data, "env"),
            gpu_uuids=_str_list(data, "gpu_uuids"),
            master_addr=str(data.get("master_addr") or ""),
            master_port=_optional_int(data, "master_port") or 0,
            max_runtime_s=_optional_int(data, "max_runtime_s"),
        )
        if key_order(key) != (spec.job_id, spec.attempt, spec.rank):
            raise ValueError(f"key {key!r} does not match job_id/attempt/rank")
        if not 0 <= spec.rank < spec.world_size:
            raise ValueError(f"rank {spec.rank} is outside world_size {spec.world_size}")
        return spec

    def gang_env(self) -> dict[str, str]:
        """The environment every worker of a gang gets (docs/protocol.md, "gang environment")."""
        return {
            "BERTH_JOB_ID": str(self.job_id),
            "BERTH_ATTEMPT": str(self.attempt),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": "0",
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }

    def environment(self) -> dict[str, str]:
        """The worker's environment in every runtime: the job's env, then the gang env and
        CUDA_VISIBLE_DEVICES, which the job cannot override. CUDA accepts GPU UUIDs there, so
        ranks see exactly their GPUs whatever the index order."""
        return {**self.env, **self.gang_env(), "CUDA_VISIBLE_DEVICES": ",".join(self.gpu_uuids)}


@dataclass(frozen=True)
class StopOrder:
    """One entry of the reply's ``stop`` list, or the agent's own stop of an unwanted worker."""

    key: str
    signal: signal.Signals = DEFAULT_STOP_SIGNAL
    grace_s: float = DEFAULT_GRACE_S
    reason: str = ""

    @classmethod
    def from_json(cls, data: object) -> StopOrder:
        """Parse a ``stop`` entry. Only a bad key rejects it: a worker the portal wants stopped is
        stopped, with SIGTERM / 30 s standing in for an unusable signal or grace period."""
        if not isinstance(data, dict) or not valid_key(data.get("key")):
            raise ValueError(f"malformed stop entry {data!r}")
        notes = [str(data.get("reason") or "")]
        try:
            sig = parse_signal(data.get("signal", "SIGTERM"))
        except ValueError as exc:
            sig = DEFAULT_STOP_SIGNAL
            notes.append(f"{exc}; using {sig.name}")
        grace = data.get("grace_period_s", DEFAULT_GRACE_S)
        if not isinstance(grace, int | float) or isinstance(grace, bool) or not grace >= 0:
            notes.append(f"bad grace_period_s {grace!r}; using {DEFAULT_GRACE_S:.0f} s")
            grace = DEFAULT_GRACE_S
        return cls(data["key"], sig, float(grace), "; ".join(n for n in notes if n))


@dataclass(frozen=True)
class WorkerStatus:
    """What a runtime knows about one worker; ``detail`` explains a failed start."""

    key: str
    state: str
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    detail: str = ""

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "state": self.state,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


def exit_code_of(returncode: int) -> int:
    """Map a Popen return code to the protocol's exit code: signal n becomes 128 + n."""
    return 128 - returncode if returncode < 0 else returncode

"""Agent settings from flags and BERTH_* environment variables (a flag wins over its variable).

Every value is checked here, once; a bad one raises ConfigError naming both the
flag and the variable, and the CLI turns that into one line and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agents import __version__

T = TypeVar("T")

DEFAULT_STATE_DIR = "/var/lib/berth-agent"
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
DEFAULT_DISCONNECT_LIMIT_S = 60.0
# A node token older than this is rotated (docs/agent.md, "Token rotation"): 30 days.
DEFAULT_TOKEN_MAX_AGE_S = 30 * 24 * 3600.0
PULL_POLICIES = ("missing", "always", "never")
# request: a device request by GPU UUID (real GPUs, NVIDIA container toolkit);
# none: no device request (simulated GPUs, an engine without GPU support).
DOCKER_GPU_MODES = ("request", "none")


class ConfigError(Exception):
    """A setting is missing or malformed."""


@dataclass(frozen=True)
class AgentConfig:
    portal_url: str
    state_dir: Path
    node_token: str | None = None
    node_token_file: Path | None = None
    bootstrap_token: str | None = None
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    disconnect_limit_s: float = DEFAULT_DISCONNECT_LIMIT_S
    runtime: str = "process"
    pull: str = "missing"
    docker_gpus: str = "request"
    nvml: str = "nvml"
    fake_gpus: int = 8
    fake_product: str = "NVIDIA H100 80GB HBM3"
    fake_gpu_memory_mib: int = 81559
    fake_faults_file: Path | None = None
    max_starts: int = 4
    hostname: str = "localhost"
    rack: str = ""
    block: str = ""
    request_timeout_s: float = 10.0
    token_max_age_s: float = DEFAULT_TOKEN_MAX_AGE_S
    stop_workers_on_exit: bool = False
    log_format: str = "text"
    log_level: str = "INFO"

    @property
    def token_path(self) -> Path:
        """Where the node token is read from and, after registration, written to."""
        return self.node_token_file or self.state_dir / "node_token"


# (flag, environment variable, default, help)
_OPTIONS: list[tuple[str, str, str | None, str]] = [
    (
        "--portal-url",
        "BERTH_PORTAL_URL",
        None,
        "base URL of the portal, e.g. https://berth.example.org",
    ),
    (
        "--node-token",
        "BERTH_NODE_TOKEN",
        None,
        "node token (prefer a token file: env and argv can leak)",
    ),
    (
        "--node-token-file",
        "BERTH_NODE_TOKEN_FILE",
        None,
        "file holding the node token [STATE_DIR/node_token]",
    ),
    (
        "--bootstrap-token",
        "BERTH_BOOTSTRAP_TOKEN",
        None,
        "bootstrap token for the first registration",
    ),
    (
        "--state-dir",
        "BERTH_STATE_DIR",
        DEFAULT_STATE_DIR,
        "worker files, stop deadlines and the node token",
    ),
    (
        "--heartbeat-interval",
        "BERTH_HEARTBEAT_INTERVAL",
        "5",
        "seconds between heartbeats until the portal says",
    ),
    (
        "--disconnect-limit",
        "BERTH_DISCONNECT_LIMIT",
        "60",
        "seconds without contact before all workers stop",
    ),
    ("--runtime", "BERTH_RUNTIME", "process", "how workers run: process, docker or fake"),
    (
        "--pull",
        "BERTH_PULL",
        "missing",
        "docker: pull a worker's image when it is missing, always, or never (one try, no retries)",
    ),
    (
        "--docker-gpus",
        "BERTH_DOCKER_GPUS",
        "request",
        "docker: request a worker's GPUs by UUID (request), or not at all for simulated GPUs (none)",
    ),
    ("--nvml", "BERTH_NVML", "nvml", "GPU backend: nvml (real) or fake (simulated)"),
    ("--fake-gpus", "BERTH_FAKE_GPUS", "8", "number of simulated GPUs (--nvml fake)"),
    (
        "--fake-product",
        "BERTH_FAKE_PRODUCT",
        "NVIDIA H100 80GB HBM3",
        "NVML product name of simulated GPUs (maps to a GPU flavor)",
    ),
    (
        "--fake-gpu-memory-mib",
        "BERTH_FAKE_GPU_MEMORY_MIB",
        "81559",
        "memory of each simulated GPU in MiB",
    ),
    (
        "--fake-faults-file",
        "BERTH_FAKE_FAULTS_FILE",
        None,
        "JSON file scripting simulated GPU faults",
    ),
    ("--max-starts", "BERTH_MAX_STARTS", "4", "most worker starts in flight at once"),
    ("--hostname", "BERTH_HOSTNAME", None, "node name reported to the portal [this host's name]"),
    ("--rack", "BERTH_RACK", "", "rack topology label"),
    ("--block", "BERTH_BLOCK", "", "NVLink / network block topology label"),
    (
        "--request-timeout",
        "BERTH_REQUEST_TIMEOUT",
        "10",
        "seconds before a portal request is given up",
    ),
    (
        "--token-max-age",
        "BERTH_TOKEN_MAX_AGE",
        str(int(DEFAULT_TOKEN_MAX_AGE_S)),
        "seconds before the agent rotates the node token in its token file (0: never)",
    ),
    ("--log-format", "BERTH_LOG_FORMAT", "text", "text or json (one JSON object per line)"),
    ("--log-level", "BERTH_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
]
_ALIASES = {"--fake-product": ("--fake-gpu-name",)}
_STOP_ON_EXIT_ENV = "BERTH_STOP_WORKERS_ON_EXIT"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth-agent",
        description="Berth node agent: reports GPUs to the portal and runs the workers it assigns.",
    )
    for flag, env, default, help_text in _OPTIONS:
        shown = f" [{default}]" if default not in (None, "") and "[" not in help_text else ""
        parser.add_argument(flag, *_ALIASES.get(flag, ()), help=f"{help_text}{shown} (env {env})")
    parser.add_argument(
        "--stop-workers-on-exit",
        action="store_true",
        default=None,
        help=f"stop all workers when the agent exits; by default they keep running and are "
        f"re-adopted by the next agent (env {_STOP_ON_EXIT_ENV}=1)",
    )
    parser.add_argument("--version", action="version", version=f"berth-agent {__version__}")
    return parser


class _Values:
    """Look up a setting by flag, falling back to its variable and default; convert with errors named."""

    def __init__(self, args: argparse.Namespace, environ: Mapping[str, str]):
        self._args = args
        self._environ = environ
        self._meta = {flag: (env, default) for flag, env, default, _ in _OPTIONS}

    def raw(self, flag: str) -> str | None:
        value = getattr(self._args, flag[2:].replace("-", "_"))
        env, default = self._meta[flag]
        if value is None:
            value = self._environ.get(env, default)
        return value

    def get(self, flag: str, convert: Callable[[str], T] = str) -> T | None:
        value = self.raw(flag)
        if value is None:
            return None
        try:
            return convert(value)
        except ValueError as exc:
            env = self._meta[flag][0]
            raise ConfigError(f"invalid {flag} / {env}: {value!r}: {exc}") from None


def positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError("must be a number > 0")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be an integer >= 1")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError("must be a number >= 0")
    return value


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be an integer >= 0")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return convert


def url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) < 10:
        raise ValueError("must be an http:// or https:// URL")
    return text.rstrip("/")


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> AgentConfig:
    """Return the agent's settings; ConfigError on the first bad value (argparse exits 2 on bad flags)."""
    args = build_parser().parse_args(argv)
    values = _Values(args, environ)
    portal_url = values.get("--portal-url", url)
    if portal_url is None:
        raise ConfigError("the portal URL is required: --portal-url or BERTH_PORTAL_URL")
    token_file = values.get("--node-token-file", Path)
    faults_file = values.get("--fake-faults-file", Path)
    stop_on_exit = args.stop_workers_on_exit
    if stop_on_exit is None:
        stop_on_exit = _env_bool(environ, _STOP_ON_EXIT_ENV)
    return AgentConfig(
        portal_url=portal_url,
        state_dir=Path(values.get("--state-dir", non_empty)),
        node_token=values.get("--node-token", non_empty),
        node_token_file=token_file,
        bootstrap_token=values.get("--bootstrap-token", non_empty),
        heartbeat_interval_s=values.get("--heartbeat-interval", positive_float),
        disconnect_limit_s=values.get("--disconnect-limit", positive_float),
        runtime=values.get("--runtime", one_of("process", "docker", "fake")),
        pull=values.get("--pull", one_of(*PULL_POLICIES)),
        docker_gpus=values.get("--docker-gpus", one_of(*DOCKER_GPU_MODES)),
        nvml=values.get("--nvml", one_of("nvml", "fake")),
        fake_gpus=values.get("--fake-gpus", count),
        fake_product=values.get("--fake-product", non_empty),
        fake_gpu_memory_mib=values.get("--fake-gpu-memory-mib", positive_int),
        fake_faults_file=faults_file,
        max_starts=values.get("--max-starts", positive_int),
        hostname=values.get("--hostname", non_empty) or socket.gethostname(),
        rack=values.get("--rack") or "",
        block=values.get("--block") or "",
        request_timeout_s=values.get("--request-timeout", positive_float),
        token_max_age_s=values.get("--token-max-age", non_negative_float),
        stop_workers_on_exit=stop_on_exit,
        log_format=values.get("--log-format", one_of("text", "json")),
        log_level=values.get(
            "--log-level", lambda t: one_of("DEBUG", "INFO", "WARNING", "ERROR")(t.upper())
        ),
    )


def _env_bool(environ: Mapping[str, str], name: str) -> bool:
    try:
        return boolean(environ.get(name, ""))
    except ValueError:
        raise ConfigError(f"invalid {name}: {environ[name]!r}: must be true or false") from None

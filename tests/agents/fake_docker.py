"""A faithful fake of the Docker SDK surface DockerRuntime uses, for tests without an engine.

Same method signatures as docker 7.x (``test_docker_runtime.py`` compares
them), the SDK's own exception classes, the same keyword validation as
``containers.run``, and the same caching: a Container's ``attrs`` is a
snapshot that only ``reload()`` (or a fresh ``get``/``list``) refreshes.

Each image has a scripted behaviour: which signals end it, whether it exits
by itself, whether starting it fails (as with a broken GPU runtime).
"""

from __future__ import annotations

import copy
import itertools
import signal as signals
from dataclasses import dataclass, field
from typing import Any

import requests
from docker.errors import APIError, ImageNotFound, NotFound
from docker.models.containers import RUN_CREATE_KWARGS, RUN_HOST_CONFIG_KWARGS

NOW = "2026-11-30T10:00:00.123456789Z"
LATER = "2026-11-30T10:05:00.987654321Z"
NEVER = "0001-01-01T00:00:00Z"


def api_error(status: int, explanation: str, cls: type[APIError] = APIError) -> APIError:
    response = requests.Response()
    response.status_code = status
    response.url = "http+docker://localhost/v1.45/containers"
    response.reason = {404: "Not Found", 409: "Conflict", 500: "Internal Server Error"}.get(
        status, ""
    )
    return cls(f"{status} error", response=response, explanation=explanation)


@dataclass
class Behaviour:
    """How a fake image acts: signals in ``honours`` end it with 128 + n; SIGKILL always does."""

    honours: set[int] = field(default_factory=lambda: {signals.SIGTERM, signals.SIGINT})
    start_error: str | None = None
    output: bytes = b"hello from the container\n"


class FakeEngine:
    def __init__(self) -> None:
        self.behaviours: dict[str, Behaviour] = {}
        self.missing_images: set[str] = set()
        self.containers: dict[str, dict[str, Any]] = {}
        self.run_calls: list[dict[str, Any]] = []
        self.kills: list[tuple[str, Any]] = []
        self._ids = itertools.count(1)

    def behaviour(self, image: str) -> Behaviour:
        return self.behaviours.setdefault(image, Behaviour())

    def find(self, id_or_name: str) -> dict[str, Any]:
        for attrs in self.containers.values():
            if id_or_name in (attrs["Id"], attrs["Name"].lstrip("/")):
                return attrs
        raise api_error(404, f"No such container: {id_or_name}", NotFound)

    def create(
        self, image: str, command: Any, name: str | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        if name and any(a["Name"] == f"/{name}" for a in self.containers.values()):
            raise api_error(409, f'Conflict. The container name "/{name}" is already in use')
        if image in self.missing_images:
            raise api_error(404, f"pull access denied for {image}", ImageNotFound)
        cid = f"{next(self._ids):064x}"
        env = kwargs.get("environment") or {}
        self.containers[cid] = {
            "Id": cid,
            "Name": f"/{name or cid[:12]}",
            "Image": f"sha256:{cid}",
            "Config": {
                "Image": image,
                "Cmd": command,
                "Env": [f"{k}={v}" for k, v in env.items()],
                "Labels": dict(kwargs.get("labels") or {}),
            },
            "HostConfig": {
                "DeviceRequests": [dict(r) for r in kwargs.get("device_requests") or []]
            },
            "State": {
                "Status": "created",
                "Running": False,
                "ExitCode": 0,
                "StartedAt": NEVER,
                "FinishedAt": NEVER,
                "OOMKilled": False,
            },
            "_logs": b"",
        }
        return self.containers[cid]

    def start(self, attrs: dict[str, Any]) -> None:
        behaviour = self.behaviour(attrs["Config"]["Image"])
        if behaviour.start_error:
            raise api_error(500, behaviour.start_error)
        attrs["State"].update(Status="running", Running=True, StartedAt=NOW)
        attrs["_logs"] += behaviour.output

    def exit(self, id_or_name: str, code: int) -> None:
        """Script a container ending by itself."""
        attrs = self.find(id_or_name)
        attrs["State"].update(Status="exited", Running=False, ExitCode=code, FinishedAt=LATER)

    def signal(self, attrs: dict[str, Any], sig: Any) -> None:
        if not attrs["State"]["Running"]:
            raise api_error(409, f"Container {attrs['Id'][:12]} is not running")
        number = _signal_number(sig)
        self.kills.append((attrs["Name"].lstrip("/"), sig))
        if number == signals.SIGKILL or number in self.behaviour(attrs["Config"]["Image"]).honours:
            self.exit(attrs["Id"], 128 + number)


def _signal_number(sig: Any) -> int:
    """Docker accepts "SIGTERM", "TERM" or a number; None means SIGKILL."""
    if sig is None:
        return signals.SIGKILL
    if isinstance(sig, int):
        return sig
    name = sig.upper()
    return signals.Signals[name if name.startswith("SIG") else f"SIG{name}"]


def _public(attrs: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy({k: v for k, v in attrs.items() if not k.startswith("_")})


class Container:
    """docker.models.containers.Container: attrs is a snapshot until reload()."""

    def __init__(self, engine: FakeEngine, attrs: dict[str, Any]):
        self._engine = engine
        self.attrs = _public(attrs)

    @property
    def id(self):
        return self.attrs.get("Id")

    @property
    def name(self):
        if self.attrs.get("Name") is not None:
            return self.attrs["Name"].lstrip("/")

    @property
    def labels(self):
        return self.attrs["Config"].get("Labels") or {}

    @property
    def status(self):
        return self.attrs["State"]["Status"]

    def reload(self):
        self.attrs = _public(self._engine.find(self.id))

    def logs(self, **kwargs):
        data = self._engine.find(self.id)["_logs"]
        tail = kwargs.get("tail", "all")
        if tail != "all":
            data = b"".join(data.splitlines(keepends=True)[-int(tail) :])
        return data

    def kill(self, signal=None):
        self._engine.signal(self._engine.find(self.id), signal)

    def stop(self, **kwargs):
        attrs = self._engine.find(self.id)
        if attrs["State"]["Running"]:
            self._engine.signal(attrs, "SIGTERM")
        if attrs["State"]["Running"]:
            self._engine.signal(attrs, "SIGKILL")

    def wait(self, **kwargs):
        attrs = self._engine.find(self.id)
        if attrs["State"]["Running"]:
            raise requests.exceptions.ReadTimeout("fake engine: container still running")
        return {"StatusCode": attrs["State"]["ExitCode"], "Error": None}

    def remove(self, **kwargs):
        attrs = self._engine.find(self.id)
        if attrs["State"]["Running"] and not kwargs.get("force"):
            raise api_error(409, "You cannot remove a running container. Stop the container first")
        del self._engine.containers[attrs["Id"]]


class ContainerCollection:
    """docker.models.containers.ContainerCollection."""

    _ALLOWED = (
        set(RUN_CREATE_KWARGS) | set(RUN_HOST_CONFIG_KWARGS) | {"detach", "stream", "platform"}
    )

    def __init__(self, engine: FakeEngine):
        self._engine = engine

    def run(self, image, command=None, stdout=True, stderr=False, remove=False, **kwargs):
        unexpected = set(kwargs) - self._ALLOWED
        if unexpected:
            raise TypeError(
                f"run() got unexpected keyword arguments {', '.join(sorted(unexpected))}"
            )
        if not kwargs.get("detach"):
            raise NotImplementedError("the fake only runs detached containers")
        self._engine.run_calls.append({"image": image, "command": command, **kwargs})
        attrs = self._engine.create(image, command, kwargs.get("name"), kwargs)
        self._engine.start(attrs)
        return Container(self._engine, attrs)

    def get(self, container_id):
        return Container(self._engine, self._engine.find(container_id))

    def list(
        self,
        all=False,
        before=None,
        filters=None,
        limit=-1,
        since=None,
        sparse=False,
        ignore_removed=False,
    ):
        wanted = (filters or {}).get("label", [])
        wanted = [wanted] if isinstance(wanted, str) else wanted
        found = []
        for attrs in self._engine.containers.values():
            if not all and not attrs["State"]["Running"]:
                continue
            if _labels_match(attrs["Config"]["Labels"], wanted):
                found.append(Container(self._engine, attrs))
        return found


def _labels_match(labels: dict[str, str], wanted: list[str]) -> bool:
    """Docker's label filter: every "key" must exist and every "key=value" must match."""
    for item in wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


class FakeDockerClient:
    """docker.DockerClient, reduced to what the agent uses."""

    def __init__(self, engine: FakeEngine | None = None):
        self.engine = engine or FakeEngine()
        self.containers = ContainerCollection(self.engine)
        self.closed = False

    def ping(self, *args, **kwargs):
        return True

    def close(self):
        self.closed = True

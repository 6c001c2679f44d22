"""The Docker SDK surface DockerRuntime uses, faking only what a real engine cannot show here:
an engine with the NVIDIA container toolkit, which grants a device request for GPU UUIDs.

Everything else is tested against a real engine (tests/agents/test_docker_runtime.py).
Same method signatures as docker 7.x (the tests compare them), the same keyword
validation as ``containers.create``, and the engine's record of a device request.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from docker.errors import NotFound
from docker.models.containers import RUN_CREATE_KWARGS, RUN_HOST_CONFIG_KWARGS

NOW = "2026-11-30T10:00:00.123456789Z"
NEVER = "0001-01-01T00:00:00Z"


class Container:
    """docker.models.containers.Container: attrs is a snapshot of the engine's record."""

    def __init__(self, engine: dict[str, dict[str, Any]], attrs: dict[str, Any]):
        self._engine = engine
        self.attrs = copy.deepcopy(attrs)

    @property
    def labels(self):
        return self.attrs["Config"].get("Labels") or {}

    @property
    def status(self):
        return self.attrs["State"]["Status"]

    def start(self, **kwargs):
        self._engine[self.attrs["Id"]]["State"].update(Status="running", StartedAt=NOW)

    def kill(self, signal=None):
        self._engine[self.attrs["Id"]]["State"].update(Status="exited", ExitCode=137)

    def remove(self, **kwargs):
        del self._engine[self.attrs["Id"]]

    def logs(self, **kwargs):
        return b""


def _device_request_record(request: dict[str, Any]) -> dict[str, Any]:
    """How the engine stores a DeviceRequest in HostConfig (all five fields, as dockerd does)."""
    return {"Driver": "", "Count": 0, "DeviceIDs": [], "Capabilities": [], "Options": {}, **request}


class ContainerCollection:
    """docker.models.containers.ContainerCollection."""

    _ALLOWED = set(RUN_CREATE_KWARGS) | set(RUN_HOST_CONFIG_KWARGS)

    def __init__(self, engine: dict[str, dict[str, Any]]):
        self._engine = engine
        self._ids = itertools.count(1)

    def create(self, image, command=None, **kwargs):
        unexpected = set(kwargs) - self._ALLOWED
        if unexpected:
            raise TypeError(f"create() got unexpected keyword arguments {sorted(unexpected)}")
        cid = f"{next(self._ids):064x}"
        self._engine[cid] = {
            "Id": cid,
            "Name": f"/{kwargs.get('name') or cid[:12]}",
            "Config": {"Image": image, "Cmd": command, "Labels": dict(kwargs.get("labels") or {})},
            "HostConfig": {
                "DeviceRequests": [
                    _device_request_record(dict(r)) for r in kwargs.get("device_requests") or []
                ],
            },
            "State": {"Status": "created", "ExitCode": 0, "StartedAt": NEVER, "FinishedAt": NEVER},
        }
        return Container(self._engine, self._engine[cid])

    def get(self, container_id):
        for attrs in self._engine.values():
            if container_id in (attrs["Id"], attrs["Name"].lstrip("/")):
                return Container(self._engine, attrs)
        raise NotFound(f"No such container: {container_id}")

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
        return [
            Container(self._engine, attrs)
            for attrs in self._engine.values()
            if (all or attrs["State"]["Status"] == "running")
            and _labels_match(attrs["Config"]["Labels"], wanted)
        ]


def _labels_match(labels: dict[str, str], wanted: list[str]) -> bool:
    """Docker's label filter: every "key" must exist and every "key=value" must match."""
    for item in wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


class ImageCollection:
    """docker.models.images.ImageCollection: every image is present."""

    def get(self, name):
        return name


class FakeApi:
    """docker.api.client.APIClient, for pulls: none are needed, every image is present."""

    def pull(
        self,
        repository,
        tag=None,
        stream=False,
        auth_config=None,
        decode=False,
        platform=None,
        all_tags=False,
    ):
        return iter(())


class FakeDockerClient:
    """docker.DockerClient, reduced to what the agent uses."""

    def __init__(self):
        self.engine: dict[str, dict[str, Any]] = {}
        self.containers = ContainerCollection(self.engine)
        self.images = ImageCollection()
        self.api = FakeApi()

    def ping(self, *args, **kwargs):
        return True

    def close(self):
        pass

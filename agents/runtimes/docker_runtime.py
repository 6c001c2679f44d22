"""Workers as Docker containers, through the Docker SDK for Python.

Containers carry labels (``berth.key``, ``berth.job``, ``berth.rank``,
``berth.attempt`` and ``berth.node``), so a restarted agent finds its workers
by label filter; an exited container is kept until the portal acknowledges its
exit code, then removed. GPUs are requested by UUID with a device request,
which the NVIDIA container toolkit turns into exactly those devices; an engine
without it refuses the request, and the worker fails to start with the
engine's message. Containers use the node's network namespace: the gang's
rendezvous (``MASTER_ADDR:MASTER_PORT`` on rank 0's node) and NCCL between
nodes need it. Their IPC namespace (``/dev/shm``, System V shared memory) is
the job's own: the first worker of a job attempt on a node is created
``shareable``, with a ``/dev/shm`` as large as the node's, and that attempt's
other workers on the node join it, so NCCL and DataLoader workers within the
job share memory while another tenant's job on the same node sees none of it.

A start is one attempt: the image is pulled at most once (``--pull``), and
whatever the engine refuses is a permanent ``failed_to_start`` with its exit
code chosen as ``docker run`` chooses it (125 the engine refused, 126 the
command cannot be run, 127 it was not found).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest
from docker.utils import parse_repository_tag

from agents.runtimes.base import Runtime, RuntimeUnavailable, StartFailed, StopBook
from agents.workers import (
    EXITED,
    FAILED_TO_START,
    LOG_TAIL_BYTES,
    RUNNING,
    STARTING,
    STOPPING,
    WorkerSpec,
    WorkerStatus,
    key_order,
    tail_text,
    valid_key,
)

log = logging.getLogger(__name__)

LABEL_KEY = "berth.key"
LABEL_JOB = "berth.job"
LABEL_RANK = "berth.rank"
LABEL_ATTEMPT = "berth.attempt"
LABEL_NODE = "berth.node"
LOG_TAIL_LINES = 200
LABEL_IPC = "berth.ipc"  # on the worker whose IPC namespace its job's others on the node join
# The node's network namespace: the gang's rendezvous and NCCL between nodes need
# it. Not the node's IPC namespace (NVIDIA's containers ask for --ipc=host): that
# would put every tenant's /dev/shm in one place. Each job attempt gets its own,
# as large as the node's /dev/shm (Docker's default is 64 MiB, too small for NCCL).
NETWORK_MODE = "host"
IPC_OWNER = "shareable"
DEFAULT_SHM_BYTES = 64 * 1024 * 1024
# `docker run`'s exit codes when the engine cannot run a container (docker/cli
# cli/command/container/run.go, runStartContainerErr).
ENGINE_REFUSED_EXIT = 125
_CANNOT_INVOKE = ("permission denied", "is a directory")
_NOT_FOUND = ("executable file not found", "no such file or directory")
ENGINE_ERRORS = (DockerException, requests.RequestException)
# Docker's zero time for "not finished yet".
_NEVER = "0001-01-01T00:00:00Z"


def node_shm_bytes(path: str = "/dev/shm") -> int:
    """The size of the node's /dev/shm, which a job's private one matches (the kernel
    makes it half the memory); Docker's 64 MiB default where the node has none."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return DEFAULT_SHM_BYTES
    return max(stats.f_blocks * stats.f_frsize, DEFAULT_SHM_BYTES)


def container_name(key: str) -> str:
    return f"berth-{key}"


def docker_time(value: str | None) -> str | None:
    """Shorten Docker's RFC 3339 nanosecond times to the protocol's whole-second UTC form."""
    if not value or value.startswith("0001-01-01"):
        return None
    return value[:19] + "Z"


def start_exit_code(message: str) -> int:
    """The exit code ``docker run`` gives when the engine cannot run the container."""
    lowered = message.lower()
    if any(text in lowered for text in _NOT_FOUND):
        return 127
    if any(text in lowered for text in _CANNOT_INVOKE):
        return 126
    return ENGINE_REFUSED_EXIT


def refused(what: str, exc: Exception | None = None, *, starting: bool = False) -> StartFailed:
    """A permanent start failure in the engine's own words (an APIError's explanation); only a
    refused container start can mean the command itself (126, 127)."""
    message = f"{what}: {getattr(exc, 'explanation', None) or exc}" if exc else what
    return StartFailed(message, start_exit_code(message) if starting else ENGINE_REFUSED_EXIT)


class DockerRuntime(Runtime):
    name = "docker"

    def __init__(
        self,
        client: Any,
        state_dir: Path,
        node: str,
        *,
        pull: str = "missing",
        gpus: str = "request",
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(StopBook(state_dir / "stops" / "docker"), clock)
        self._client = client
        self._node = node
        self._pull = pull
        self._gpus = gpus
        # Keys whose start is in progress: a "created" container for any
        # other key is a leftover of a start that never finished.
        self._starting: set[str] = set()

    @classmethod
    def from_env(cls, state_dir: Path, node: str, **options: str) -> DockerRuntime:
        """Connect to the engine named by DOCKER_HOST (or the local socket); fail clearly if absent."""
        import docker

        try:
            client = docker.from_env()
            client.ping()
        except ENGINE_ERRORS as exc:
            raise RuntimeUnavailable(
                f"Docker engine unavailable: {exc} — is dockerd running and may this user use it? "
                "use --runtime process to run workers as plain processes"
            ) from exc
        return cls(client, state_dir, node, **options)

    def start(self, spec: WorkerSpec) -> None:
        if not spec.image:
            raise StartFailed("the docker runtime needs an image")
        self._starting.add(spec.key)
        try:
            self._ensure_image(spec.image)
            owner = self._ipc_owner(spec)
            try:
                self._create_and_start(spec, owner)
            except StartFailed:
                if owner is None or self._ipc_owner(spec) == owner:
                    raise
                # The worker whose namespace it would join ended between the look
                # and the start ("can't join IPC of container …"): hold its own.
                self._create_and_start(spec, None)
        finally:
            self._starting.discard(spec.key)

    def _create_and_start(self, spec: WorkerSpec, ipc_owner: str | None) -> None:
        container = self._create(spec, ipc_owner)
        if container is not None:
            self._start_container(spec, container)

    def _ensure_image(self, image: str) -> None:
        """Make the image available as the pull policy says, with one pull at most."""
        if self._pull == "always":
            self._pull_image(image)
            return
        try:
            self._client.images.get(image)
        except ImageNotFound:
            if self._pull == "never":
                raise refused(
                    f"image {image} is not on this node and the agent runs with --pull never"
                ) from None
            self._pull_image(image)
        except ENGINE_ERRORS as exc:
            raise refused(f"docker cannot look up image {image}", exc) from exc

    def _pull_image(self, image: str) -> None:
        """Pull once; the daemon's error (an unknown image, no registry) fails the start."""
        repository, tag = parse_repository_tag(image)
        log.info("pulling image %s", image)
        try:
            progress = self._client.api.pull(
                repository, tag=tag or "latest", stream=True, decode=True
            )
            errors = [
                line["error"] for line in progress if isinstance(line, dict) and line.get("error")
            ]
        except ENGINE_ERRORS as exc:
            raise refused(f"cannot pull image {image}", exc) from exc
        if errors:
            raise refused(f"cannot pull image {image}: {errors[-1]}")

    def _create(self, spec: WorkerSpec, ipc_owner: str | None = None) -> Any | None:
        """Create the container; None when one of this key already exists (it is adopted).

        Its IPC namespace is ``ipc_owner``'s (a running worker of the same job attempt on
        this node), or, with none, its own: ``shareable``, as large as the node's /dev/shm.
        """
        if ipc_owner:
            ipc = {"labels": self._labels(spec), "ipc_mode": f"container:{ipc_owner}"}
        else:
            ipc = {
                "labels": {**self._labels(spec), LABEL_IPC: IPC_OWNER},
                "ipc_mode": IPC_OWNER,
                "shm_size": node_shm_bytes(),
            }
        try:
            return self._client.containers.create(
                spec.image,
                command=list(spec.command) or None,
                name=container_name(spec.key),
                environment=spec.environment(),
                device_requests=self._device_requests(spec),
                network_mode=NETWORK_MODE,
                **ipc,
            )
        except APIError as exc:
            if exc.status_code != 409:
                raise refused(f"docker could not create a container of {spec.image}", exc) from exc
            log.warning("container for worker %s already exists; adopting it", spec.key)
            return None
        except ENGINE_ERRORS as exc:
            raise refused(f"docker could not create a container of {spec.image}", exc) from exc

    def _start_container(self, spec: WorkerSpec, container: Any) -> None:
        """Start the created container; a refused start (say, GPUs the engine cannot give)
        removes it, or it would look like a worker that may still start."""
        try:
            container.start()
        except ENGINE_ERRORS as exc:
            self._remove_leftover(spec.key)
            raise refused(f"docker could not start {spec.image}", exc, starting=True) from exc

    def _ipc_owner(self, spec: WorkerSpec) -> str | None:
        """The id of the running worker that holds this job attempt's IPC namespace on
        this node, or None."""
        filters = {
            "label": [
                f"{LABEL_NODE}={self._node}",
                f"{LABEL_JOB}={spec.job_id}",
                f"{LABEL_ATTEMPT}={spec.attempt}",
                f"{LABEL_IPC}={IPC_OWNER}",
            ]
        }
        try:
            running = self._client.containers.list(filters=filters, ignore_removed=True)
        except ENGINE_ERRORS as exc:
            raise refused(f"docker could not list the workers of job {spec.job_id}", exc) from exc
        return running[0].id if running else None

    def _labels(self, spec: WorkerSpec) -> dict[str, str]:
        return {
            LABEL_KEY: spec.key,
            LABEL_JOB: str(spec.job_id),
            LABEL_RANK: str(spec.rank),
            LABEL_ATTEMPT: str(spec.attempt),
            LABEL_NODE: self._node,
        }

    def _device_requests(self, spec: WorkerSpec) -> list[DeviceRequest]:
        if not spec.gpu_uuids or self._gpus == "none":
            return []
        return [DeviceRequest(device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])]

    def _remove_leftover(self, key: str) -> None:
        """A refused start leaves a created container behind; remove it."""
        with contextlib.suppress(DockerException):
            self._client.containers.get(container_name(key)).remove(force=True)

    def list(self) -> list[WorkerStatus]:
        filters = {"label": [LABEL_KEY, f"{LABEL_NODE}={self._node}"]}
        containers = self._client.containers.list(all=True, filters=filters, ignore_removed=True)
        statuses = [self._status(c) for c in containers if valid_key(c.labels.get(LABEL_KEY))]
        return sorted(statuses, key=lambda s: key_order(s.key))

    def _status(self, container: Any) -> WorkerStatus:
        key = container.labels[LABEL_KEY]
        state = container.attrs.get("State") or {}
        status = state.get("Status")
        started_at = docker_time(state.get("StartedAt"))
        if status in ("exited", "dead"):
            return WorkerStatus(
                key,
                EXITED,
                exit_code=state.get("ExitCode"),
                started_at=started_at,
                finished_at=docker_time(state.get("FinishedAt", _NEVER)),
            )
        if status == "created" and key not in self._starting:
            return WorkerStatus(
                key, FAILED_TO_START, detail="container was created but never started"
            )
        if status == "created":
            return WorkerStatus(key, STARTING)
        return WorkerStatus(key, STOPPING if self.stopping(key) else RUNNING, started_at=started_at)

    def _container(self, key: str) -> Any | None:
        try:
            return self._client.containers.get(container_name(key))
        except NotFound:
            return None

    def _signal(self, key: str, sig: signal.Signals) -> None:
        self._send(key, sig.name)

    def _kill(self, key: str) -> None:
        self._send(key, "SIGKILL")

    def _send(self, key: str, signame: str) -> None:
        container = self._container(key)
        if container is None:
            return
        try:
            container.kill(signal=signame)
        except APIError as exc:
            # 409: the container is not running any more; that is what we wanted.
            if exc.status_code != 409:
                raise

    def log_tail(self, key: str, limit: int = LOG_TAIL_BYTES) -> str:
        container = self._container(key)
        if container is None:
            return ""
        try:
            return tail_text(container.logs(stdout=True, stderr=True, tail=LOG_TAIL_LINES), limit)
        except ENGINE_ERRORS:
            return ""  # a log tail is nice to have; never let it cost a heartbeat

    def forget(self, key: str) -> None:
        container = self._container(key)
        if container is not None:
            if container.status in ("running", "paused", "restarting"):
                log.warning("not forgetting worker %s: its container is still running", key)
                return
            with contextlib.suppress(NotFound):
                container.remove(v=True)
        self._stops.discard(key)

    def close(self) -> None:
        self._client.close()

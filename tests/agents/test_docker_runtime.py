"""The Docker runtime against a real Docker engine (tests/dockerd.py starts a private one
when none answers). Only the GPU-granting success path, which needs the NVIDIA container
toolkit, runs against the SDK fake in tests/agents/fake_docker.py."""

from __future__ import annotations

import inspect
import signal
import time
import uuid

import pytest
from docker.api.client import APIClient
from docker.models.containers import Container as RealContainer
from docker.models.containers import ContainerCollection as RealCollection
from docker.models.images import ImageCollection as RealImages

from agents.runtimes.base import StartFailed
from agents.runtimes.docker_runtime import DockerRuntime, node_shm_bytes
from agents.workers import EXITED, FAILED_TO_START, RUNNING, STOPPING
from tests.agents.conftest import make_spec, wait_until
from tests.agents.fake_docker import Container, ContainerCollection, FakeApi, FakeDockerClient
from tests.agents.fake_docker import ImageCollection as FakeImages
from tests.dockerd import IMAGE

# One Docker engine serves the test processes (make test: pytest-xdist); its tests run in
# one of them, in turn, so containers named by job id and labelled by node never meet
# (tests/workers.py).
pytestmark = pytest.mark.xdist_group("docker")

# What the runtime asks for a worker's GPUs, as the engine records it in HostConfig.
GPU_REQUEST = {
    "Driver": "",
    "Count": 0,
    "DeviceIDs": ["GPU-aaaa", "GPU-bbbb"],
    "Capabilities": [["gpu"]],
    "Options": {},
}


@pytest.fixture
def node(docker_engine):
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    docker_engine.remove_containers(f"berth.node={name}")


@pytest.fixture
def make_runtime(docker_engine, node, tmp_path):
    def make(**options) -> DockerRuntime:
        return DockerRuntime(docker_engine.client, tmp_path, node, **options)

    return make


@pytest.fixture
def runtime(make_runtime):
    return make_runtime(gpus="none")


def spec(key: str, script: str, **fields):
    return make_spec(key, ("sh", "-c", script), image=IMAGE, **fields)


def ended(rt: DockerRuntime, key: str, timeout: float = 15.0):
    return wait_until(
        lambda: next((s for s in rt.poll() if s.key == key and s.state == EXITED), None),
        timeout,
        f"worker {key} to exit",
    )


def test_a_worker_runs_as_a_labelled_container_with_the_gang_env(runtime, docker_engine, node):
    runtime.start(
        spec("42.1.3", "env | sort; echo oops >&2; exit 3", world_size=4, env={"EPOCHS": "3"})
    )
    status = ended(runtime, "42.1.3")
    assert status.exit_code == 3 and status.started_at and status.finished_at
    container = docker_engine.client.containers.get("berth-42.1.3")
    assert container.labels == {
        "berth.key": "42.1.3",
        "berth.job": "42",
        "berth.rank": "3",
        "berth.attempt": "1",
        "berth.node": node,
        "berth.ipc": "shareable",  # the first worker of its job on the node holds its IPC
    }
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    assert container.attrs["HostConfig"]["IpcMode"] == "shareable"  # the job's own, below
    assert container.attrs["HostConfig"]["ShmSize"] == node_shm_bytes()
    assert container.attrs["HostConfig"]["DeviceRequests"] in (None, [])  # --docker-gpus none
    lines = runtime.log_tail("42.1.3").splitlines()
    for expected in (
        "EPOCHS=3",
        "RANK=3",
        "WORLD_SIZE=4",
        "LOCAL_RANK=0",
        "MASTER_ADDR=gpu-node-05",
        "MASTER_PORT=29500",
        "BERTH_JOB_ID=42",
        "BERTH_ATTEMPT=1",
        "CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb",
        "oops",
    ):
        assert expected in lines


def test_a_jobs_workers_on_a_node_share_memory_and_another_tenants_job_sees_none_of_it(
    runtime, docker_engine
):
    """Security: with the node's IPC namespace (--ipc=host) every job on a node shares one
    /dev/shm, so a co-located tenant reads another's NCCL and DataLoader buffers."""
    secret = f"berth-secret-{uuid.uuid4().hex[:8]}"
    runtime.start(spec("51.1.0", f"echo s3cret > /dev/shm/{secret} && echo written; sleep 60"))
    wait_until(lambda: "written" in runtime.log_tail("51.1.0"), 15, "rank 0 to write /dev/shm")
    runtime.start(spec("51.1.1", f"cat /dev/shm/{secret}", world_size=2))
    runtime.start(spec("52.1.0", f"ls /dev/shm && test ! -e /dev/shm/{secret} && df -k /dev/shm"))
    try:
        same_job, other_job = ended(runtime, "51.1.1"), ended(runtime, "52.1.0")
        assert same_job.exit_code == 0 and "s3cret" in runtime.log_tail("51.1.1")
        assert other_job.exit_code == 0, runtime.log_tail("52.1.0")
        # and the other job's /dev/shm is not Docker's 64 MiB but as large as the node's
        size_kib = int(runtime.log_tail("52.1.0").splitlines()[-1].split()[1])
        assert size_kib == node_shm_bytes() // 1024
        owner = docker_engine.client.containers.get("berth-51.1.0")
        joiner = docker_engine.client.containers.get("berth-51.1.1")
        assert joiner.attrs["HostConfig"]["IpcMode"] == f"container:{owner.id}"
    finally:
        runtime.stop("51.1.0", signal.SIGKILL, 0)


def test_a_worker_whose_jobs_namespace_ended_just_before_its_start_holds_its_own(
    runtime, docker_engine, monkeypatch
):
    runtime.start(spec("54.1.0", "true"))
    gone = docker_engine.client.containers.get("berth-54.1.0").id
    ended(runtime, "54.1.0")
    looks = iter([gone])  # the first look saw rank 0 still running; it ended before the start
    real = runtime._ipc_owner
    monkeypatch.setattr(runtime, "_ipc_owner", lambda s: next(looks, None) or real(s))
    runtime.start(spec("54.1.1", "echo ok", world_size=2))
    assert ended(runtime, "54.1.1").exit_code == 0
    joiner = docker_engine.client.containers.get("berth-54.1.1")
    assert joiner.attrs["HostConfig"]["IpcMode"] == "shareable"


def test_the_engine_records_the_gpu_request_and_refuses_it_without_nvidia(
    make_runtime, docker_engine
):
    runtime = make_runtime()  # --docker-gpus request, the default
    worker = spec("43.0.0", "true")
    created = runtime._create(worker)
    assert created.attrs["HostConfig"]["DeviceRequests"] == [GPU_REQUEST]
    created.remove(force=True)
    started = time.monotonic()
    with pytest.raises(StartFailed) as failure:
        runtime.start(worker)
    assert time.monotonic() - started < 10
    assert 'could not select device driver "" with capabilities: [[gpu]]' in str(failure.value)
    assert failure.value.exit_code == 125
    assert runtime.list() == []  # the refused container is removed, not left "created"


def test_a_command_the_image_lacks_fails_to_start_with_127(runtime):
    with pytest.raises(StartFailed, match="executable file not found") as failure:
        runtime.start(make_spec("44.0.0", ("no-such-command",), image=IMAGE))
    assert failure.value.exit_code == 127


def test_stop_delivers_the_signal_once_then_kills_after_the_grace_period(runtime):
    # A container's PID 1 gets no default signal actions: `sleep` ignores SIGTERM, the trap does not.
    runtime.start(
        spec("45.0.0", "trap 'echo checkpoint; exit 0' TERM; while :; do sleep 0.1; done")
    )
    runtime.start(spec("45.0.1", "exec sleep 60"))
    wait_until(lambda: {s.state for s in runtime.poll()} == {RUNNING}, 10, "both running")
    stopped_at = time.monotonic()  # before the first order: the grace period runs from each
    for key in ("45.0.0", "45.0.1"):
        runtime.stop(key, signal.SIGTERM, 2)
        runtime.stop(key, signal.SIGTERM, 2)  # repeated orders: signalled once
    assert ended(runtime, "45.0.0", 2).exit_code == 0
    assert "checkpoint" in runtime.log_tail("45.0.0")
    assert {s.key: s.state for s in runtime.list()}["45.0.1"] == STOPPING
    assert ended(runtime, "45.0.1").exit_code == 137
    assert time.monotonic() - stopped_at >= 2


def test_a_restarted_runtime_readopts_its_own_containers_only(
    runtime, make_runtime, docker_engine, tmp_path
):
    runtime.start(spec("46.0.0", "exec sleep 30"))
    runtime.start(spec("46.0.1", "exit 7"))
    other = DockerRuntime(docker_engine.client, tmp_path, "test-other-node", gpus="none")
    try:
        other.start(spec("47.0.0", "exec sleep 30"))
        ended(runtime, "46.0.1")
        restarted = make_runtime(gpus="none")
        assert [(s.key, s.state, s.exit_code) for s in restarted.list()] == [
            ("46.0.0", RUNNING, None),
            ("46.0.1", EXITED, 7),
        ]
        restarted.start(spec("46.0.0", "exec sleep 30"))  # a repeated start adopts the container
        assert len(docker_engine.client.containers.list(filters={"label": "berth.job=46"})) == 1
    finally:
        docker_engine.remove_containers("berth.node=test-other-node")


def test_created_but_never_started_container_is_a_failed_start(runtime, docker_engine, node):
    docker_engine.client.containers.create(
        IMAGE, ["true"], name="berth-48.0.0", labels={"berth.key": "48.0.0", "berth.node": node}
    )
    (status,) = runtime.list()
    assert status.state == FAILED_TO_START and "never started" in status.detail


def test_forget_removes_exited_containers_only(runtime):
    runtime.start(spec("49.0.0", "exit 0"))
    runtime.start(spec("49.0.1", "exec sleep 30"))
    ended(runtime, "49.0.0")
    for key in ("49.0.0", "49.0.1", "99.0.0"):
        runtime.forget(key)
    assert [s.key for s in runtime.list()] == ["49.0.1"]


@pytest.mark.parametrize(
    ("pull", "image", "message"),
    [
        ("never", "berth-test/absent:1", "not on this node and the agent runs with --pull never"),
        ("missing", "berth-test/absent:1", "cannot pull image berth-test/absent:1: "),
        ("always", IMAGE, f"cannot pull image {IMAGE}: "),  # there is no registry to pull it from
    ],
)
def test_pull_policies_fail_an_image_they_cannot_get_at_once(make_runtime, pull, image, message):
    runtime = make_runtime(pull=pull, gpus="none")
    started = time.monotonic()
    with pytest.raises(StartFailed, match=message) as failure:
        runtime.start(make_spec("50.0.0", ("true",), image=image))
    assert time.monotonic() - started < 30
    assert failure.value.exit_code == 125
    assert runtime.list() == []


def test_pull_never_runs_an_image_the_node_has(make_runtime):
    runtime = make_runtime(pull="never", gpus="none")
    runtime.start(spec("51.0.0", "exit 0"))
    assert ended(runtime, "51.0.0").exit_code == 0


# -- the GPU-granting path, which needs the NVIDIA container toolkit: the SDK fake --------


@pytest.mark.parametrize(
    ("fake", "real", "methods"),
    [
        (ContainerCollection, RealCollection, ["create", "list", "get"]),
        (Container, RealContainer, ["start", "kill", "remove", "logs"]),
        (FakeImages, RealImages, ["get"]),
        (FakeApi, APIClient, ["pull"]),
    ],
)
def test_fake_sdk_has_the_real_signatures(fake, real, methods):
    for name in methods:
        assert inspect.signature(getattr(fake, name)) == inspect.signature(getattr(real, name)), (
            name
        )


def test_an_engine_with_the_nvidia_toolkit_runs_the_worker_with_exactly_its_gpus(tmp_path):
    client = FakeDockerClient()
    runtime = DockerRuntime(client, tmp_path, "gpu-node-07")
    runtime.start(make_spec("52.0.0", ("python", "train.py")))
    (container,) = client.containers.list()
    assert container.attrs["HostConfig"]["DeviceRequests"] == [GPU_REQUEST]
    assert [(s.key, s.state) for s in runtime.list()] == [("52.0.0", RUNNING)]

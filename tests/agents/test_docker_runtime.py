"""The Docker runtime against a faithful fake of the Docker SDK (no engine needed)."""

from __future__ import annotations

import inspect
import signal

import docker
import pytest
from docker.models.containers import Container as RealContainer
from docker.models.containers import ContainerCollection as RealCollection
from docker.types import DeviceRequest

from agents.runtimes.base import StartFailed
from agents.runtimes.docker_runtime import DockerRuntime
from agents.workers import EXITED, FAILED_TO_START, RUNNING, STOPPING
from tests.agents.conftest import make_spec
from tests.agents.fake_docker import Behaviour, Container, ContainerCollection, FakeDockerClient


@pytest.fixture
def client():
    return FakeDockerClient()


@pytest.fixture
def runtime(client, tmp_path):
    return DockerRuntime(client, tmp_path, node="gpu-node-07")


def statuses(rt):
    return {s.key: s for s in rt.poll()}


@pytest.mark.parametrize(
    ("fake", "real", "methods"),
    [
        (ContainerCollection, RealCollection, ["run", "list", "get"]),
        (Container, RealContainer, ["kill", "stop", "wait", "remove", "reload", "logs"]),
    ],
)
def test_fake_sdk_has_the_real_signatures(fake, real, methods):
    for name in methods:
        assert inspect.signature(getattr(fake, name)) == inspect.signature(getattr(real, name)), (
            name
        )


def test_start_runs_a_labelled_container_with_exactly_its_gpus(runtime, client):
    spec = make_spec("42.1.3", ("python", "train.py"), world_size=4, env={"EPOCHS": "3"})
    runtime.start(spec)
    (call,) = client.engine.run_calls
    assert call["image"] == "busybox"
    assert call["command"] == ["python", "train.py"]
    assert call["detach"] is True
    assert call["name"] == "berth-42.1.3"
    assert call["labels"] == {
        "berth.key": "42.1.3",
        "berth.job": "42",
        "berth.rank": "3",
        "berth.attempt": "1",
        "berth.node": "gpu-node-07",
    }
    assert call["environment"]["EPOCHS"] == "3"
    assert call["environment"]["RANK"] == "3" and call["environment"]["WORLD_SIZE"] == "4"
    assert call["environment"]["MASTER_ADDR"] == "gpu-node-05"
    (request,) = call["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert request["DeviceIDs"] == ["GPU-aaaa", "GPU-bbbb"]
    assert request["Capabilities"] == [["gpu"]]
    status = statuses(runtime)["42.1.3"]
    assert (status.state, status.started_at) == (RUNNING, "2026-11-30T10:00:00Z")


def test_worker_without_gpus_requests_none(runtime, client):
    runtime.start(make_spec("1.0.0", gpu_uuids=()))
    assert client.engine.run_calls[0]["device_requests"] == []


def test_exit_code_and_log_tail_come_from_the_container(runtime, client):
    runtime.start(make_spec("2.0.0"))
    client.engine.exit("berth-2.0.0", 3)
    status = statuses(runtime)["2.0.0"]
    assert (status.state, status.exit_code, status.finished_at) == (
        EXITED,
        3,
        "2026-11-30T10:05:00Z",
    )
    assert runtime.log_tail("2.0.0") == "hello from the container\n"


def test_restarted_runtime_readopts_its_own_containers_only(client, tmp_path):
    first = DockerRuntime(client, tmp_path, node="gpu-node-07")
    first.start(make_spec("3.0.0"))
    DockerRuntime(client, tmp_path, node="gpu-node-08").start(make_spec("4.0.0"))
    client.containers.run("busybox", detach=True, name="unrelated", labels={"app": "x"})
    restarted = DockerRuntime(client, tmp_path, node="gpu-node-07")
    assert [(s.key, s.state) for s in restarted.list()] == [("3.0.0", RUNNING)]


def test_stop_sends_the_jobs_signal_then_kills_after_grace(client, tmp_path):
    clock = [1000.0]
    runtime = DockerRuntime(client, tmp_path, node="n", clock=lambda: clock[0])
    client.engine.behaviours["busybox"] = Behaviour(honours=set())  # ignores SIGUSR1
    runtime.start(make_spec("5.0.0"))
    runtime.stop("5.0.0", signal.SIGUSR1, 30)
    runtime.stop("5.0.0", signal.SIGUSR1, 30)  # repeated stop orders: signalled once
    assert statuses(runtime)["5.0.0"].state == STOPPING
    clock[0] += 31
    runtime.poll()  # the grace period is over: this poll kills
    assert statuses(runtime)["5.0.0"].exit_code == 137
    assert client.engine.kills == [("berth-5.0.0", "SIGUSR1"), ("berth-5.0.0", "SIGKILL")]


def test_container_honouring_sigterm_exits_143(runtime, client):
    runtime.start(make_spec("6.0.0"))
    runtime.stop("6.0.0", signal.SIGTERM, 30)
    assert statuses(runtime)["6.0.0"].exit_code == 143


def test_missing_image_fails_to_start(runtime, client):
    client.engine.missing_images.add("nope:latest")
    with pytest.raises(StartFailed, match="pull access denied"):
        runtime.start(make_spec("7.0.0", image="nope:latest"))
    assert runtime.list() == []


def test_failed_container_start_leaves_no_container_behind(runtime, client):
    client.engine.behaviours["busybox"] = Behaviour(
        start_error='could not select device driver "" with capabilities: [[gpu]]'
    )
    with pytest.raises(StartFailed, match="could not select device driver"):
        runtime.start(make_spec("8.0.0"))
    assert client.engine.containers == {}


def test_created_but_never_started_container_is_a_failed_start(runtime, client):
    client.engine.create(
        "busybox",
        None,
        "berth-9.0.0",
        {"labels": {"berth.key": "9.0.0", "berth.node": "gpu-node-07"}},
    )
    status = statuses(runtime)["9.0.0"]
    assert status.state == FAILED_TO_START and "never started" in status.detail


def test_existing_container_of_the_same_key_is_adopted_not_failed(runtime, client):
    runtime.start(make_spec("10.0.0"))
    runtime.start(make_spec("10.0.0"))
    assert len(client.engine.containers) == 1


def test_forget_removes_exited_containers_only(runtime, client):
    runtime.start(make_spec("11.0.0"))
    runtime.start(make_spec("12.0.0"))
    client.engine.exit("berth-11.0.0", 0)
    runtime.forget("11.0.0")
    runtime.forget("12.0.0")
    runtime.forget("99.0.0")
    assert [s.key for s in runtime.list()] == ["12.0.0"]


def test_no_engine_is_a_clear_error(monkeypatch, tmp_path):
    def unreachable(**kwargs):
        raise docker.errors.DockerException(
            "Error while fetching server API version: connection refused"
        )

    monkeypatch.setattr(docker, "from_env", unreachable)
    from agents.runtimes import RuntimeUnavailable

    with pytest.raises(RuntimeUnavailable, match="Docker engine unavailable.*--runtime process"):
        DockerRuntime.from_env(tmp_path, "n")

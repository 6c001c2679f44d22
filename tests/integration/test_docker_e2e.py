"""Real node agents with ``--runtime docker`` and the fake NVML backend, against a live
portal, running real containers on a real Docker engine (tests/dockerd.py starts a private
dockerd when none answers; without one the module is skipped, naming the cause).

The engine here has no NVIDIA runtime: the agents run with ``--docker-gpus none`` (the fake
GPUs are not devices the engine could give), except where the test is that the engine's
refusal of a GPU device request fails the job clearly and for good.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from portal.agentapi.desired import master_port
from portal.core.actions.jobs import cancel_job
from portal.core.actions.nodes import issue_bootstrap_token
from portal.core.models import Job, Node, Worker
from portal.core.scheduling import run_pass
from tests.dockerd import IMAGE
from tests.integration.test_agent_e2e import portal, register, state_of, submit, wait_for

__all__ = ["portal"]  # the live portal, its team and agents (test_agent_e2e.py)

State = Job.State
TRAP_TERM = "trap 'echo stopping; exit 143' TERM; echo up; while :; do sleep 0.2; done"
# Rank 1 fails when the test sends it SIGUSR2 (through the engine); rank 0 runs until stopped.
RANK_1_FAILS_ON_USR2 = (
    f"if [ \"$RANK\" = 1 ]; then trap 'exit $CODE' USR2; echo up; while :; do sleep 0.2; done; fi; "
    f"{TRAP_TERM}"
)

# One Docker engine serves the test processes (make test: pytest-xdist); its tests run in
# one of them, in turn, so containers named by job id and labelled by node never meet
# (tests/workers.py).
pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("docker"),
]


@pytest.fixture
def docker_portal(portal, docker_engine):
    """The live portal; every agent started runs containers, removed at the end by node label."""
    team, user, agents = portal
    # Bootstrap tokens are bound to a hostname pattern and a use count (issue 18).
    _, agents.token = issue_bootstrap_token(acting_user=None, hostname_pattern="dock-*", max_uses=4)
    start = agents.start

    def start_docker(host, rack="r1", *extra, url="", gpus="none"):
        return start(host, rack, "docker", "--docker-gpus", gpus, *extra, url=url)

    agents.start = start_docker
    yield team, user, agents
    for host in list(agents.procs):
        agents.stop(host, signal.SIGKILL)
    for path in agents.tmp.iterdir():
        docker_engine.remove_containers(f"berth.node={path.name}")


def containers(engine, job: Job) -> dict[int, object]:
    labels = {"label": f"berth.job={job.pk}"}
    found = engine.client.containers.list(all=True, filters=labels, ignore_removed=True)
    return {int(c.labels["berth.rank"]): c for c in found}


def workers(job: Job) -> dict[int, Worker]:
    return {w.rank: w for w in Worker.objects.filter(job=job)}


def one_node_ready() -> bool:
    return Node.objects.filter(condition=Node.Condition.READY).count() == 1


def all_up(job: Job) -> bool:
    """Every worker printed "up": its traps are set."""
    tails = [w.log_tail for w in Worker.objects.filter(job=job)]
    return len(tails) > 0 and all(tail.startswith("up\n") for tail in tails)


def all_exited(job: Job) -> bool:
    return not Worker.objects.filter(job=job).exclude(state=Worker.State.EXITED).exists()


def test_a_gang_runs_as_two_labelled_containers_and_succeeds(docker_portal, docker_engine):
    team, user, agents = docker_portal
    register(agents, "dock-a", "dock-b")
    script = 'echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK at $MASTER_ADDR:$MASTER_PORT"; echo warn >&2'
    job = submit(team, user, ["sh", "-c", script], image=IMAGE)
    run_pass()
    wait_for(lambda: state_of(job) == State.SUCCEEDED, what="success")
    master, port = workers(job)[0].node.hostname, master_port(job.pk)  # one port per job
    for rank, worker in workers(job).items():
        assert worker.exit_code == 0
        # stdout and stderr are separate streams: their lines may come in either order
        lines = sorted(worker.log_tail.splitlines())
        assert lines == [f"rank {rank}/2 local 0 at {master}:{port}", "warn"]
    # Acknowledged exits are removed from the engine.
    wait_for(lambda: not containers(docker_engine, job), what="containers removed")


def test_a_failing_container_fails_the_gang_and_the_other_is_stopped(docker_portal, docker_engine):
    team, user, agents = docker_portal
    register(agents, "dock-a", "dock-b")
    job = submit(team, user, ["sh", "-c", RANK_1_FAILS_ON_USR2], image=IMAGE, env={"CODE": "3"})
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING and all_up(job), what="both up")
    assert len(containers(docker_engine, job)) == 2
    for rank, container in containers(docker_engine, job).items():
        assert container.labels["berth.job"] == str(job.pk)
        assert container.labels["berth.attempt"] == "0"
        assert container.labels["berth.key"] == f"{job.pk}.0.{rank}"
        assert container.labels["berth.node"] == workers(job)[rank].node.hostname
    containers(docker_engine, job)[1].kill(signal="SIGUSR2")
    wait_for(lambda: state_of(job) == State.FAILED, what="failure")
    assert job.exit_code == 3 and job.reason == "Worker rank 1 exited with code 3."
    wait_for(lambda: all_exited(job), what="the other worker to stop")
    assert workers(job)[0].exit_code == 143
    assert workers(job)[0].log_tail == "up\nstopping\n"


def test_cancel_checkpoints_a_trapping_worker_and_kills_one_that_ignores_the_signal(
    docker_portal,
):
    team, user, agents = docker_portal
    register(agents, "dock-a")
    # PID 1 of a container gets no default signal action: `sleep` ignores SIGUSR1.
    script = (
        'if [ "$RANK" = 1 ]; then echo up; exec sleep 60; fi; '
        "trap 'echo checkpoint; exit 0' USR1; echo up; while :; do sleep 0.2; done"
    )
    job = submit(
        team,
        user,
        ["sh", "-c", script],
        gpus=2,
        image=IMAGE,
        checkpoint_signal="SIGUSR1",
        grace_period_seconds=4,
    )
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING and all_up(job), what="both up")
    cancelled = cancel_job(job, actor=user).finished_at
    wait_for(lambda: all_exited(job), what="the kill after the grace period")
    checkpointed, ignored = workers(job)[0], workers(job)[1]
    assert checkpointed.exit_code == 0 and checkpointed.log_tail == "up\ncheckpoint\n"
    assert ignored.exit_code == 137
    # The engine's times (whole seconds): one ended within the grace period, one after it.
    assert (checkpointed.finished_at - cancelled).total_seconds() < 4
    assert (ignored.finished_at - cancelled).total_seconds() >= 4 - 1
    assert state_of(job) == State.CANCELLED


def test_a_restarted_agent_readopts_its_containers_and_reports_one_that_exited(
    docker_portal, docker_engine
):
    team, user, agents = docker_portal
    register(agents, "dock-a")
    job = submit(
        team, user, ["sh", "-c", RANK_1_FAILS_ON_USR2], gpus=2, image=IMAGE, env={"CODE": "7"}
    )
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING and all_up(job), what="both up")
    agents.stop("dock-a", signal.SIGKILL)
    containers(docker_engine, job)[1].kill(signal="SIGUSR2")  # rank 1 exits while nobody watches
    wait_for(lambda: containers(docker_engine, job)[1].status == "exited", what="rank 1 exited")
    assert state_of(job) == State.RUNNING
    agents.start("dock-a")
    wait_for(lambda: state_of(job) == State.FAILED, what="the exit reported")
    assert job.exit_code == 7 and workers(job)[1].exit_code == 7
    wait_for(lambda: all_exited(job), what="rank 0 stopped")
    assert workers(job)[0].exit_code == 143 and workers(job)[0].log_tail == "up\nstopping\n"
    assert Worker.objects.filter(job=job).count() == 2
    assert agents.log("dock-a").count("starting worker") == 2  # both in the first life only


class Relay:
    """A TCP relay between an agent and the portal that the test can cut (the network edge)."""

    def __init__(self, url: str):
        self._target = (urlsplit(url).hostname, urlsplit(url).port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self._target)
            except OSError:
                return
            self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        for sock in [self._listener, *self._sockets]:  # shutdown wakes the blocked accept()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def test_an_agent_cut_off_from_the_portal_stops_its_containers(
    docker_portal, docker_engine, live_server, settings
):
    team, user, agents = docker_portal
    settings.BERTH = {**settings.BERTH, "AGENT_DISCONNECT_LIMIT_S": 2.0}
    relay = Relay(live_server.url)
    agents.start("dock-a", url=relay.url)
    wait_for(one_node_ready, what="registration")
    job = submit(team, user, ["sh", "-c", TRAP_TERM], workers=1, image=IMAGE)
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING, what="running")
    relay.cut()
    wait_for(
        lambda: containers(docker_engine, job)[0].status == "exited", timeout=15, what="fencing"
    )
    container = containers(docker_engine, job)[0]
    assert container.attrs["State"]["ExitCode"] == 143
    assert "stopping" in container.logs().decode()
    assert "no successful heartbeat" in agents.log("dock-a"), agents.log("dock-a")


def test_engine_refusals_fail_the_job_for_good_with_the_engines_words(docker_portal):
    team, user, agents = docker_portal
    agents.start("dock-a", "r1", "--pull", "never", gpus="request")
    wait_for(one_node_ready, what="registration")
    gpu_job = submit(team, user, ["true"], workers=1, gpus=1, image=IMAGE)
    absent = submit(team, user, ["true"], workers=1, gpus=1, image="berth-test/absent:1")
    submitted = time.monotonic()
    run_pass()
    wait_for(lambda: state_of(gpu_job) == state_of(absent) == State.FAILED, what="both failed")
    assert time.monotonic() - submitted < 10
    refusal = 'could not select device driver "" with capabilities: [[gpu]]'
    for job, words in (
        (gpu_job, refusal),
        (
            absent,
            "image berth-test/absent:1 is not on this node and the agent runs with --pull never",
        ),
    ):
        assert job.exit_code == 125
        assert re.fullmatch(r"Worker rank 0 failed to start \(exit code 125\): .+\.", job.reason)
        assert words in job.reason
        event = job.events.get(kind="failed")
        assert words in event.message and words in event.data["detail"]
    time.sleep(2)  # several heartbeats later: no second try, the jobs stay failed
    run_pass()
    assert agents.log("dock-a").count("starting worker") == 2
    assert Worker.objects.filter(job__in=[gpu_job, absent]).count() == 2
    assert state_of(gpu_job) == state_of(absent) == State.FAILED

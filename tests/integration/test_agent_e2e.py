"""Real node agents (subprocesses, fake NVML, process runtime running real short
commands) against a live portal over HTTP. The scheduling pass and the node
monitor are called from the test, as beat would call them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from portal.core.actions.jobs import submit_job
from portal.core.actions.node_monitor import monitor_nodes
from portal.core.actions.nodes import issue_bootstrap_token
from portal.core.jobspec import clean_job_spec
from portal.core.models import AuditEntry, GpuFlavor, Job, Node, Queue, Worker
from portal.core.scheduling import run_pass
from tests.factories import make_team, make_user

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = "NVIDIA H100 80GB HBM3"
State = Job.State

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


class Agents:
    """Starts berth-agent processes and cleans up them and their workers."""

    def __init__(self, url: str, token: str, tmp: Path):
        self.url, self.token, self.tmp = url, token, tmp
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, host: str, rack: str = "r1", runtime: str = "process", *extra: str, url: str = ""
    ) -> subprocess.Popen:
        state = self.tmp / host
        argv = [
            sys.executable,
            "-m",
            "agents",
            "--portal-url",
            url or self.url,
            "--bootstrap-token",
            self.token,
            "--hostname",
            host,
            "--rack",
            rack,
            "--block",
            rack,
            "--nvml",
            "fake",
            "--fake-gpus",
            "4",
            "--fake-product",
            PRODUCT,
            "--runtime",
            runtime,
            "--state-dir",
            str(state),
            "--heartbeat-interval",
            "0.3",
            *extra,
        ]
        log = open(self.tmp / f"{host}.log", "ab")  # noqa: SIM115 — owned by the child
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs[host] = proc
        return proc

    def stop(self, host: str, sig=signal.SIGTERM) -> None:
        proc = self.procs.pop(host)
        os.killpg(proc.pid, sig)
        proc.wait(20)

    def close(self) -> None:
        for host in list(self.procs):
            self.stop(host)
        # Workers outlive a killed agent by design; end them so nothing leaks.
        subprocess.run(["pkill", "-f", str(self.tmp)], check=False)

    def log(self, host: str) -> str:
        return (self.tmp / f"{host}.log").read_text(errors="replace")


@pytest.fixture
def portal(live_server, settings, tmp_path):
    settings.BERTH = {
        **settings.BERTH,
        "HEARTBEAT_INTERVAL_S": 0.3,
        "AGENT_DISCONNECT_LIMIT_S": 30.0,
    }
    flavor = GpuFlavor.objects.create(
        name="h100-80gb", display_name=PRODUCT, product_names=[PRODUCT]
    )
    team = make_team("alpha", quotas={flavor: 8})
    Queue.objects.create(team=team, name="default")
    user = make_user("lead")
    _, bootstrap = issue_bootstrap_token(acting_user=None, hostname_pattern="node-*", max_uses=3)
    agents = Agents(live_server.url, bootstrap, tmp_path)
    yield team, user, agents
    agents.close()


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def submit(team, user, command, workers=2, gpus=4, **fields) -> Job:
    spec = clean_job_spec(
        team,
        {
            "name": "e2e",
            "image": "none",
            "command": command,
            "flavor": "h100-80gb",
            "workers": workers,
            "gpus_per_worker": gpus,
            "max_runtime_seconds": 300,
            "grace_period_seconds": 2,
            **fields,
        },
    )
    return submit_job(team=team, spec=spec, user=user).job


def state_of(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def register(agents: Agents, *hosts: str) -> None:
    for i, host in enumerate(hosts):
        agents.start(host, rack="r1" if i < 2 else "r2")
    wait_for(
        lambda: Node.objects.filter(condition=Node.Condition.READY).count() == len(hosts),
        what="registration",
    )


def test_a_gang_runs_on_two_agents_and_succeeds(portal):
    team, user, agents = portal
    register(agents, "node-a", "node-b")
    job = submit(
        team,
        user,
        [
            "python3",
            "-c",
            "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], os.environ['CUDA_VISIBLE_DEVICES'].count('GPU-'))",
        ],
    )
    run_pass()
    assert state_of(job) == State.ADMITTED
    wait_for(lambda: state_of(job) == State.SUCCEEDED, what="success")
    logs = sorted(Worker.objects.filter(job=job).values_list("log_tail", flat=True))
    assert logs == ["rank 0 of 2 4\n", "rank 1 of 2 4\n"]
    kinds = list(job.events.values_list("kind", flat=True))
    # A gang this quick may end before a heartbeat ever saw it running.
    assert kinds in (
        ["submitted", "admitted", "started", "succeeded"],
        ["submitted", "admitted", "succeeded"],
    )
    assert job.started_at and job.finished_at and job.exit_code == 0


def test_a_failing_worker_fails_the_gang_and_the_other_is_stopped(portal):
    team, user, agents = portal
    register(agents, "node-a", "node-b")
    job = submit(
        team, user, ["sh", "-c", 'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; exec sleep 60']
    )
    run_pass()
    wait_for(lambda: state_of(job) == State.FAILED, what="failure")
    assert job.exit_code == 3
    wait_for(
        lambda: not Worker.objects.filter(job=job).exclude(state=Worker.State.EXITED).exists(),
        what="the surviving worker to stop",
    )
    rank0 = Worker.objects.get(job=job, rank=0)
    assert rank0.exit_code == 128 + signal.SIGTERM
    assert not job.allocations.filter(active=True).exists()


def test_node_loss_requeues_the_gang_and_it_runs_elsewhere(portal, settings):
    team, user, agents = portal
    settings.BERTH = {**settings.BERTH, "AGENT_DISCONNECT_LIMIT_S": 3.0}
    register(agents, "node-a", "node-b", "node-c")
    job = submit(team, user, ["sleep", "60"], workers=1, gpus=4)
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING, what="running")
    worker = Worker.objects.get(job=job)
    lost = worker.node.hostname
    agents.stop(lost, signal.SIGKILL)  # the agent dies; its worker is orphaned
    # Fencing: without lease renewals the orphan stops itself after the disconnect limit,
    # before the portal would start the gang elsewhere.
    result = agents.tmp / lost / "workers" / worker.key / "result.json"
    wait_for(result.exists, timeout=20, what="the orphaned worker to fence itself")
    assert json.loads(result.read_text())["exit_code"] == 128 + signal.SIGTERM

    later = timezone.now() + timedelta(seconds=settings.BERTH["NODE_NOT_READY_AFTER_S"] + 1)
    monitor_nodes(later)
    monitor_nodes(later + timedelta(seconds=settings.BERTH["NODE_EVICT_AFTER_S"] + 1))
    assert state_of(job) == State.PENDING and job.attempt == 1
    assert job.events.filter(kind="node_lost").exists()
    # The clock jump made every node look silent; the live agents' next heartbeats revive theirs.
    wait_for(
        lambda: Node.objects.filter(condition=Node.Condition.READY).count() == 2,
        what="live nodes ready",
    )
    Job.objects.filter(pk=job.pk).update(eligible_at=timezone.now())  # its requeue backoff is over
    run_pass()
    assert state_of(job) == State.ADMITTED
    new_worker = Worker.objects.get(job=job, attempt=1)
    assert new_worker.node.hostname != lost
    wait_for(lambda: state_of(job) == State.RUNNING, what="running again elsewhere")


def test_restarted_agent_readopts_its_worker_without_a_duplicate(portal):
    team, user, agents = portal
    register(agents, "node-a")
    job = submit(team, user, ["sh", "-c", "echo started; sleep 4; echo done"], workers=1, gpus=4)
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING, what="running")
    agents.stop("node-a")  # SIGTERM: the agent leaves its workers running
    agents.start("node-a")  # same state dir and node token
    wait_for(lambda: state_of(job) == State.SUCCEEDED, what="success after re-adoption")
    assert Worker.objects.filter(job=job).count() == 1
    assert Worker.objects.get(job=job).log_tail == "started\ndone\n"  # one run, not two
    assert "starting worker" in agents.log("node-a")
    assert agents.log("node-a").count("starting worker") == 1


def test_an_agent_rotates_its_token_after_a_lost_rotation_reply_and_keeps_its_work(portal):
    """The portal rotated the node's token, the reply never reached the agent (here the test
    sends the rotation and drops the reply, the agent being down): the agent starts again
    with the old token file, which still works, rotates with it once the file is older than
    --token-max-age, saves the new token, and the old one is retired; its worker runs on."""
    team, user, agents = portal
    register(agents, "node-a")
    job = submit(team, user, ["sleep", "60"], workers=1, gpus=4)
    run_pass()
    wait_for(lambda: state_of(job) == State.RUNNING, what="running")
    agents.stop("node-a")  # SIGTERM: its worker keeps running
    token_file = agents.tmp / "node-a" / "node_token"
    old = token_file.read_text().strip()
    node = Node.objects.get(hostname="node-a")
    gpus = [
        {"index": g.index, "uuid": g.uuid, "name": PRODUCT, "memory_total_mib": 81559}
        for g in node.gpus.order_by("index")
    ]
    lost = requests.post(
        agents.url + "/api/agent/v1/register",
        json={"hostname": "node-a", "rack": "r1", "block": "r1", "gpus": gpus},
        headers={"Authorization": f"Bearer {old}"},
        timeout=10,
    )
    assert lost.status_code == 201  # committed; the agent never sees this reply
    two_days_ago = time.time() - 2 * 86400
    os.utime(token_file, (two_days_ago, two_days_ago))

    agents.start("node-a", "r1", "process", "--token-max-age", "86400")
    wait_for(lambda: token_file.read_text().strip() != old, what="the new token saved")
    new = token_file.read_text().strip()
    assert new != lost.json()["node_token"]
    wait_for(
        lambda: AuditEntry.objects.filter(target_id=str(node.pk), action="retire_token").exists(),
        what="the old token retired",
    )
    beat = agents.url + "/api/agent/v1/heartbeat"
    for refused in (old, lost.json()["node_token"]):
        auth = {"Authorization": f"Bearer {refused}"}
        answer = requests.post(beat, json={}, headers=auth, timeout=10)
        assert answer.status_code == 401
    notes = AuditEntry.objects.filter(target_id=str(node.pk), action="rotate_token")
    assert sorted(n.note.split(" from ")[0] for n in notes) == [
        "by its current token",
        "by its previous token",
    ]
    assert state_of(job) == State.RUNNING and Worker.objects.filter(job=job).count() == 1
    assert Node.objects.get(hostname="node-a").pk == node.pk
    assert "node token rotated" in agents.log("node-a")

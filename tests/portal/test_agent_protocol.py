"""The portal side of the agent protocol (docs/protocol.md), over HTTP with the test client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.core.actions.jobs import cancel_job
from portal.core.actions.node_monitor import monitor_nodes
from portal.core.models import (
    Allocation,
    AuditEntry,
    Gpu,
    Job,
    JobEvent,
    Node,
    NodeBootstrapToken,
    Worker,
)
from portal.core.scheduling.apply import apply_plan
from portal.core.scheduling.snapshot import PassContext
from portal.core.secrets import new_secret
from scheduler import model as m
from tests.portal.agent_helpers import admit, beat, inventory, make_job, node_token, report

State = Job.State


# --- registration ------------------------------------------------------------------------


@pytest.fixture
def bootstrap(db):
    secret = new_secret("bbt")
    NodeBootstrapToken.objects.create(prefix=secret.prefix, token_hash=secret.digest)
    return secret.plaintext


def test_register_trades_bootstrap_token_for_node_token(client, cluster, bootstrap):
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-new-{i}",
            "name": "NVIDIA H100 80GB HBM3",
            "memory_total_mib": 81559,
        }
        for i in range(8)
    ]
    response = client.post(
        "/api/agent/v1/register",
        {
            "bootstrap_token": bootstrap,
            "hostname": "gpu-new",
            "rack": "r9",
            "block": "b9",
            "gpus": gpus,
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    node = Node.objects.get(hostname="gpu-new")
    assert node.flavor == cluster.h100 and node.rack == "r9" and node.gpus.count() == 8
    assert body["node_token"] and node.token_hash and body["node_token"] not in node.token_hash
    assert beat(client, node, body["node_token"]).status_code == 200
    assert NodeBootstrapToken.objects.get().uses == 1


@pytest.mark.parametrize("token", ["", "bbt_wrong"])
def test_register_with_a_bad_bootstrap_token_is_refused(client, cluster, bootstrap, token):
    response = client.post(
        "/api/agent/v1/register",
        {
            "bootstrap_token": token,
            "hostname": "x",
            "gpus": [{"index": 0, "uuid": "GPU-x", "name": "NVIDIA H100 80GB HBM3"}],
        },
        content_type="application/json",
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert not Node.objects.filter(hostname="x").exists()


def test_register_with_unknown_gpu_product_is_refused_with_reason(client, cluster, bootstrap):
    response = client.post(
        "/api/agent/v1/register",
        {
            "bootstrap_token": bootstrap,
            "hostname": "x",
            "gpus": [{"index": 0, "uuid": "GPU-x", "name": "NVIDIA GeForce RTX 4090"}],
        },
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "RTX 4090" in response.json()["error"]["message"]
    assert not Node.objects.filter(hostname="x").exists()


# --- authentication and malformed heartbeats -------------------------------------------


def test_heartbeat_needs_a_valid_node_token(client, cluster):
    node = cluster.nodes[0]
    for auth in (
        {},
        {"HTTP_AUTHORIZATION": "Bearer bnt_forged"},
        {"HTTP_AUTHORIZATION": "Basic abc"},
    ):
        response = client.post(
            "/api/agent/v1/heartbeat", {"gpus": []}, content_type="application/json", **auth
        )
        assert response.status_code == 401
        assert set(response.json()["error"]) == {"code", "message", "fields"}
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        '{"gpus": "many"}',
        '{"gpus": [{"index": "zero", "uuid": "u", "name": "n"}]}',
        '{"gpus": [], "workers": [{"key": "1.0.0", "state": "dancing"}]}',
        '{"gpus": [], "workers": [{"key": "nonsense", "state": "running"}]}',
    ],
)
def test_malformed_heartbeat_is_400_and_changes_nothing(client, cluster, body):
    node = cluster.nodes[0]
    token = node_token(node)
    response = client.post(
        "/api/agent/v1/heartbeat",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"parse_error", "invalid", "protocol"}
    node.refresh_from_db()
    assert node.last_heartbeat_at is None and node.gpus.filter(health="healthy").count() == 8


def test_a_node_cannot_report_another_nodes_worker(client, cluster):
    job = make_job(cluster)
    admit(job, [cluster.nodes[1]])
    intruder = cluster.nodes[0]
    token = node_token(intruder)
    response = beat(client, intruder, token, [report(job, 0, "exited", exit_code=0)])
    assert response.status_code == 400
    assert "not assigned to this node" in response.json()["error"]["message"]
    job.refresh_from_db()
    assert job.state == State.ADMITTED
    assert Worker.objects.get(job=job).state == Worker.State.ASSIGNED
    intruder.refresh_from_db()
    assert intruder.last_heartbeat_at is None


# --- the gang's life through heartbeats --------------------------------------------------


def test_admitted_gang_is_sent_to_its_nodes_runs_and_succeeds(client, cluster):
    a, b = cluster.nodes[0], cluster.nodes[1]
    ta, tb = node_token(a), node_token(b)
    job = make_job(cluster, workers=2, gpus_per_worker=2)
    admit(job, [a, b])

    reply = beat(client, a, ta).json()
    (entry,) = reply["run"]
    assert entry["key"] == f"{job.pk}.0.0" and entry["world_size"] == 2 and entry["rank"] == 0
    assert entry["gpu_uuids"] == ["GPU-h100-0-0", "GPU-h100-0-1"]
    assert entry["master_addr"] == a.hostname and entry["env"] == {"EPOCHS": "3"}
    assert reply["stop"] == [] and reply["ack"] == []

    beat(client, a, ta, [report(job, 0, "running")])
    job.refresh_from_db()
    assert job.state == State.ADMITTED  # rank 1 is not running yet
    beat(client, b, tb, [report(job, 1, "running")])
    job.refresh_from_db()
    assert job.state == State.RUNNING and job.started_at

    beat(client, a, ta, [report(job, 0, "exited", 0)])
    reply = beat(client, b, tb, [report(job, 1, "exited", 0)]).json()
    assert reply["ack"] == [f"{job.pk}.0.1"] and reply["run"] == []
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED and job.exit_code == 0
    assert not Allocation.objects.filter(job=job, active=True).exists()
    assert Worker.objects.get(job=job, rank=1).log_tail == "rank 1 exited\n"
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == ["submitted", "admitted", "started", "succeeded"]


def test_gangs_whose_rank_0_share_a_node_get_different_master_ports(client, cluster, settings):
    settings.BERTH = {**settings.BERTH, "MASTER_PORT_FIRST": 30000, "MASTER_PORT_COUNT": 7}
    a, b = cluster.nodes[0], cluster.nodes[1]
    ta, tb = node_token(a), node_token(b)
    first, second = (make_job(cluster, workers=2, gpus_per_worker=1) for _ in range(2))
    admit(first, [a, b])
    admit(
        second, [a, b], first_gpu=1
    )  # rank 0 of both on node a, whose network the containers share

    on_a = {e["job_id"]: e["master_port"] for e in beat(client, a, ta).json()["run"]}
    on_b = {e["job_id"]: e["master_port"] for e in beat(client, b, tb).json()["run"]}
    assert on_a == on_b == {j.pk: 30000 + j.pk % 7 for j in (first, second)}
    assert on_a[first.pk] != on_a[second.pk]


# The counts are those of the heartbeat's hand-written PostgreSQL statements.
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts PostgreSQL's prepared statements"
)


@postgresql_only
def test_a_steady_beat_of_a_busy_node_reads_its_workers_and_gpus_in_one_query(
    client, cluster, django_assert_num_queries
):
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster, workers=1, gpus_per_worker=2)
    admit(job, [node])
    beat(client, node, token, [report(job, 0, "running")])  # assigned -> running
    gpus, running = inventory(node), [report(job, 0, "running")]

    # token, workers with their GPUs' UUIDs, node update, savepoint and its release
    with django_assert_num_queries(5):
        reply = beat(client, node, token, running, gpus=gpus).json()
    (entry,) = reply["run"]
    assert entry["gpu_uuids"] == ["GPU-h100-0-0", "GPU-h100-0-1"]


def test_one_failed_worker_fails_the_gang_and_stops_the_rest(client, cluster):
    a, b = cluster.nodes[0], cluster.nodes[1]
    ta, tb = node_token(a), node_token(b)
    job = make_job(cluster, workers=2, checkpoint_signal="SIGUSR1", grace_period_seconds=45)
    admit(job, [a, b])
    beat(client, a, ta, [report(job, 0, "running")])
    beat(client, b, tb, [report(job, 1, "running")])

    beat(client, b, tb, [report(job, 1, "exited", 3)])
    job.refresh_from_db()
    assert job.state == State.FAILED and job.exit_code == 3 and "rank 1" in job.reason
    assert job.stop_requested_at is not None  # rank 0 stops from now (the scheduler reads it)
    reply = beat(client, a, ta, [report(job, 0, "running")]).json()
    assert reply["run"] == []
    assert reply["stop"] == [
        {"key": f"{job.pk}.0.0", "signal": "SIGUSR1", "grace_period_s": 45, "reason": "gang failed"}
    ]
    beat(client, a, ta, [report(job, 0, "exited", 143)])
    assert not Allocation.objects.filter(job=job, active=True).exists()
    job.refresh_from_db()
    assert job.state == State.FAILED and job.exit_code == 3  # the first failure is the job's


def test_a_beat_replies_with_the_job_state_it_locked_not_the_one_it_read(
    client, cluster, monkeypatch
):
    """Node A reports its worker running while node B's report that fails the gang
    commits between A's read of its workers and A's lock of the job (here: the job fails
    right after A's worker rows are written). A's reply must say stop, from the state it
    locked, not run on the job as it read it."""
    from portal.core.actions import workers as worker_actions

    a, b = cluster.nodes[0], cluster.nodes[1]
    ta = node_token(a)
    job = make_job(cluster, workers=2, checkpoint_signal="SIGUSR1", grace_period_seconds=45)
    admit(job, [a, b])
    real = worker_actions.bulk_set

    def then_b_fails_the_gang(*args, **kwargs):
        real(*args, **kwargs)
        Job.objects.filter(pk=job.pk).update(state=State.FAILED, reason_code="worker_failed")

    monkeypatch.setattr(worker_actions, "bulk_set", then_b_fails_the_gang)
    reply = beat(client, a, ta, [report(job, 0, "running")]).json()
    assert reply["run"] == []
    assert [s["reason"] for s in reply["stop"]] == ["gang failed"]


def test_preempted_gang_stops_then_requeues_with_its_submit_time(client, cluster):
    a = cluster.nodes[0]
    ta = node_token(a)
    job = make_job(cluster)
    submitted = job.submitted_at
    admit(job, [a])
    beat(client, a, ta, [report(job, 0, "running")])
    apply_plan(
        m.Plan(preemptions=(m.Preemption(job.pk, "reclaim", "Team beta reclaims its quota.", 99),)),
        PassContext(now=timezone.now()),
    )
    reply = beat(client, a, ta, [report(job, 0, "running")]).json()
    assert [s["reason"] for s in reply["stop"]] == ["preempted"]
    job.refresh_from_db()
    assert job.state == State.PREEMPTING

    beat(client, a, ta, [report(job, 0, "exited", 143)])
    job.refresh_from_db()
    assert job.state == State.PENDING and job.attempt == 1 and job.restart_count == 1
    assert job.submitted_at == submitted
    preempted = job.events.get(kind="preempted")
    assert preempted.data == {"reason": "reclaim", "preemptor": 99} and "beta" in preempted.message
    assert job.events.filter(kind="requeued").exists()
    # The old attempt's key is acknowledged but never desired again.
    assert beat(client, a, ta).json()["run"] == []


def test_requeue_past_the_restart_limit_fails_the_job(client, cluster):
    a = cluster.nodes[0]
    ta = node_token(a)
    job = make_job(cluster, max_restarts=0)
    admit(job, [a])
    apply_plan(
        m.Plan(preemptions=(m.Preemption(job.pk, "priority", "higher priority", 1),)),
        PassContext(now=timezone.now()),
    )
    beat(client, a, ta, [report(job, 0, "exited", 143)])
    job.refresh_from_db()
    assert job.state == State.FAILED and job.reason_code == "restart_limit"


def test_worker_never_started_is_dropped_when_its_job_is_cancelled(client, cluster, personas):
    a = cluster.nodes[0]
    ta = node_token(a)
    job = make_job(cluster)
    admit(job, [a])
    cancel_job(job, actor=personas.lead_a)
    reply = beat(client, a, ta).json()  # the agent never started it
    assert reply["run"] == []
    assert Worker.objects.get(job=job).state == Worker.State.EXITED
    assert not Allocation.objects.filter(job=job, active=True).exists()


def test_inventory_updates_gpu_health_and_marks_missing_gpus_lost(client, cluster):
    node = cluster.nodes[0]
    token = node_token(node)
    gpus = inventory(node, {2: {"health": "unhealthy", "health_reason": "XID 79"}})
    gpus = [g for g in gpus if g["index"] != 7]
    assert beat(client, node, token, gpus=gpus).status_code == 200
    health = dict(node.gpus.values_list("index", "health"))
    assert health[2] == "unhealthy" and health[7] == "lost" and health[0] == "healthy"
    assert Gpu.objects.get(node=node, index=0).utilization_pct == 50.0
    node.refresh_from_db()
    assert node.condition == Node.Condition.READY and node.last_heartbeat_at


def test_gpus_that_swap_indices_are_written_not_a_500(client, cluster):
    """A node's GPUs reported in another PCI order after a reboot (the same UUIDs, their
    indices exchanged): the (node, index) uniqueness was checked row by row inside the
    one UPDATE, and every beat answered 500 (a security review's case). The node stays
    ready and each GPU keeps its UUID with its new index."""
    node = cluster.nodes[0]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200
    gpus = inventory(node)
    gpus[0]["index"], gpus[1]["index"] = gpus[1]["index"], gpus[0]["index"]
    gpus[2]["index"], gpus[3]["index"], gpus[4]["index"] = (
        gpus[3]["index"],
        gpus[4]["index"],
        gpus[2]["index"],
    )
    response = beat(client, node, token, gpus=gpus)
    assert response.status_code == 200, response.content
    assert dict(node.gpus.values_list("uuid", "index")) == {g["uuid"]: g["index"] for g in gpus}
    assert set(node.gpus.values_list("health", flat=True)) == {"healthy"}


@postgresql_only
def test_unchanged_inventory_touches_no_gpu_row_until_telemetry_is_due(
    client, cluster, monkeypatch, django_assert_num_queries
):
    """The marks of the last written inventory are on the node's row, so any web process
    can skip the GPU rows; telemetry is written when due, a health change at once."""
    from portal.core.actions import heartbeat

    node = cluster.nodes[0]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200  # first beat: the whole inventory
    node.refresh_from_db()
    assert node.inventory_digest and node.telemetry_at
    before = dict(node.gpus.values_list("index", "updated_at"))

    busy = inventory(node, {0: {"utilization_pct": 99.0}})
    # token, workers, node update, savepoint and its release: no GPU query
    with django_assert_num_queries(5):
        assert beat(client, node, token, gpus=busy).status_code == 200
    assert dict(node.gpus.values_list("index", "updated_at")) == before
    assert Gpu.objects.get(node=node, index=0).utilization_pct == 50.0

    # Telemetry due: one statement writes it, the identity is not read back.
    monkeypatch.setattr(heartbeat, "TELEMETRY_EVERY_S", 0.0)
    with django_assert_num_queries(6):
        beat(client, node, token, gpus=busy)
    assert Gpu.objects.get(node=node, index=0).utilization_pct == 99.0
    monkeypatch.setattr(heartbeat, "TELEMETRY_EVERY_S", 3600.0)

    # A health change is written at once, even before telemetry is due.
    sick = inventory(node, {3: {"health": "unhealthy", "health_reason": "XID 48"}})
    beat(client, node, token, gpus=sick)
    assert Gpu.objects.get(node=node, index=3).health == "unhealthy"


# --- node loss and max run time -------------------------------------------------------------


def test_silent_node_goes_not_ready_then_its_gangs_are_requeued(client, cluster, settings):
    a, b = cluster.nodes[0], cluster.nodes[1]
    ta, tb = node_token(a), node_token(b)
    job = make_job(cluster, workers=2)
    admit(job, [a, b])
    beat(client, a, ta, [report(job, 0, "running")])
    beat(client, b, tb, [report(job, 1, "running")])
    now = timezone.now()

    monitor_nodes(now + timedelta(seconds=settings.BERTH["NODE_NOT_READY_AFTER_S"] - 5))
    a.refresh_from_db()
    assert a.condition == Node.Condition.READY

    # b keeps beating; a goes silent.
    Node.objects.filter(pk=b.pk).update(last_heartbeat_at=now + timedelta(seconds=200))
    later = now + timedelta(seconds=settings.BERTH["NODE_NOT_READY_AFTER_S"] + 1)
    monitor_nodes(later)
    a.refresh_from_db()
    assert a.state == "not_ready"
    job.refresh_from_db()
    assert job.state == State.RUNNING  # not yet evicted

    monitor_nodes(later + timedelta(seconds=settings.BERTH["NODE_EVICT_AFTER_S"] + 1))
    job.refresh_from_db()
    assert job.state == State.PENDING and job.attempt == 1
    assert job.events.filter(kind="node_lost").exists()
    assert Worker.objects.get(job=job, rank=0).state == Worker.State.LOST
    assert job.stop_requested_at is not None  # b's worker stops from now (RunningJob's end)
    # The surviving worker on b is told to stop; the pending job waits for it.
    reply = beat(client, b, tb, [report(job, 1, "running", attempt=0)]).json()
    assert [s["reason"] for s in reply["stop"]] == ["requeued"]
    trail = AuditEntry.objects.filter(target_type="node", target_id=str(a.pk)).order_by("id")
    assert [e.action for e in trail] == ["not_ready", "evict"]
    assert trail.last().note == "1 worker(s) lost"


def test_job_past_its_max_runtime_is_stopped(client, cluster):
    a = cluster.nodes[0]
    ta = node_token(a)
    job = make_job(cluster)
    admit(job, [a])
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now() - timedelta(seconds=3601))
    assert monitor_nodes()["timed_out"] == [job.pk]
    job.refresh_from_db()
    assert job.state == State.FAILED and job.reason_code == "timeout"
    reply = beat(client, a, ta, [report(job, 0, "running")]).json()
    assert reply["stop"][0]["reason"] == "max run time exceeded"
    assert JobEvent.objects.filter(job=job, kind="timeout").count() == 1


def test_a_preempted_job_past_its_max_runtime_fails_instead_of_being_requeued(client, cluster):
    """A victim whose max run time ends during its grace period is over there, as a
    running job is (the simulator ends it there too): it fails with `timeout` and is not
    requeued for a fresh attempt, and it keeps the stop time its preemption gave it (its
    preemptor's claim counts on it). Before, the sweep skipped stopping jobs and the job
    came back pending once its workers exited."""
    a = cluster.nodes[0]
    ta = node_token(a)
    job = make_job(cluster)
    admit(job, [a])
    told = timezone.now() - timedelta(seconds=10)
    Job.objects.filter(pk=job.pk).update(
        state=State.PREEMPTING,
        stop_requested_at=told,
        admitted_at=timezone.now() - timedelta(seconds=3601),
    )
    assert monitor_nodes()["timed_out"] == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.reason_code, job.stop_requested_at) == (State.FAILED, "timeout", told)
    beat(client, a, ta, [report(job, 0, "exited", 143)])
    job.refresh_from_db()
    assert (job.state, job.restart_count) == (State.FAILED, 0)
    assert (
        JobEvent.objects.filter(job=job, kind="timeout", from_state=State.PREEMPTING).count() == 1
    )


@pytest.mark.parametrize("moved", ["readmitted", "preempted"])
def test_the_timeout_sweep_decides_on_the_rows_it_locks(client, cluster, monkeypatch, moved):
    """The sweep reads the active jobs, then locks the overdue ones. What happens to a
    job in between decides: one requeued and admitted again (a new attempt, a fresh
    admission time) is not timed out; one preempted in between is, with the stopping
    job's event. Before, the sweep failed the readmitted job's new attempt."""
    from portal.core.actions import node_monitor

    job = make_job(cluster)
    admit(job, [cluster.nodes[0]])
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now() - timedelta(seconds=3601))
    real = node_monitor.transition

    def in_between(*args, **kwargs):
        if moved == "readmitted":  # stopped, requeued and admitted again meanwhile
            Job.objects.filter(pk=job.pk).update(
                attempt=job.attempt + 1, admitted_at=timezone.now(), state=State.ADMITTED
            )
        else:
            Job.objects.filter(pk=job.pk).update(
                state=State.PREEMPTING, stop_requested_at=timezone.now()
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(node_monitor, "transition", in_between)
    timed_out = monitor_nodes()["timed_out"]
    job.refresh_from_db()
    if moved == "readmitted":
        assert timed_out == [] and (job.state, job.attempt) == (State.ADMITTED, 1)
        assert not JobEvent.objects.filter(job=job, kind="timeout").exists()
    else:
        assert timed_out == [job.pk] and job.state == State.FAILED
        event = JobEvent.objects.get(job=job, kind="timeout")
        assert event.from_state == State.PREEMPTING and "not requeued" in event.message


def test_a_heartbeat_leaves_its_node_ready_even_if_marked_not_ready_after_it_read_it(
    client, cluster, monkeypatch
):
    """The node monitor may mark a node not ready between a beat's read of its row and
    its write: the beat, proof that the node is alive, still leaves it ready (before, it
    wrote only its time, and the node stayed unschedulable until its next beat)."""
    from portal.core.actions import heartbeat

    node = cluster.nodes[0]
    token = node_token(node)
    beat(client, node, token)
    real = heartbeat.sync_inventory

    def in_between(row, gpus, now):
        Node.objects.filter(pk=node.pk).update(
            condition=Node.Condition.NOT_READY, not_ready_since=now
        )
        return real(row, gpus, now)

    monkeypatch.setattr(heartbeat, "sync_inventory", in_between)
    assert beat(client, node, token).status_code == 200
    node.refresh_from_db()
    assert (node.condition, node.not_ready_since) == (Node.Condition.READY, None)


def test_a_gpu_removed_and_the_rest_renumbered_is_written_not_a_500(client, cluster):
    """A GPU missing from the report holds its index until it is marked lost: the GPUs
    that take it wait for that (a review's cases, here and below)."""
    node = cluster.nodes[0]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200
    gpus = inventory(node)
    gone = gpus.pop(0)  # GPU 0 taken out; the others enumerate from 0 again
    for g in gpus:
        g["index"] -= 1
    response = beat(client, node, token, gpus=gpus)
    assert response.status_code == 200, response.content[:300]
    assert node.gpus.get(uuid=gone["uuid"]).health == "lost"


@pytest.mark.parametrize("planned_by_index", [False, True])
def test_the_last_gpu_removed_and_the_first_takes_its_index(client, cluster, planned_by_index):
    """`planned_by_index`: on PostgreSQL, with the pk index driving the UPDATE's join (as
    on a large GPU table); by the heap's order alone the moved rows came after the
    missing one, and the test passed without the fix."""
    from django.db import connection

    if planned_by_index and connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL plan")
    node = cluster.nodes[0]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200
    gpus = inventory(node)
    last = gpus.pop()
    gpus[0]["index"] = last["index"]
    plans = ("enable_seqscan", "enable_hashjoin", "enable_mergejoin") if planned_by_index else ()
    with connection.cursor() as c:
        for name in plans:
            c.execute(f"SET {name} = off")
    try:
        response = beat(client, node, token, gpus=gpus)
    finally:
        with connection.cursor() as c:
            for name in plans:
                c.execute(f"RESET {name}")
    assert response.status_code == 200, response.content[:300]


def test_a_lost_gpu_back_in_its_slot_while_its_replacement_goes(client, cluster):
    """The same order dependence without any index change: X lost, a replacement Y takes
    its index, then X comes back there and Y goes. X (already lost, so not 'moved')
    turns healthy in the same UPDATE that marks Y lost."""
    node = cluster.nodes[0]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200
    gpus = inventory(node)
    x = gpus[0]
    assert beat(client, node, token, gpus=gpus[1:]).status_code == 200  # X lost
    y = {**x, "uuid": "GPU-replacement-0000"}
    assert beat(client, node, token, gpus=[y, *gpus[1:]]).status_code == 200  # Y at X's index
    response = beat(client, node, token, gpus=[x, *gpus[1:]])  # X back, Y gone
    assert response.status_code == 200, response.content[:300]

"""A heartbeat (actions/heartbeat.record_heartbeat) read the node's workers, then wrote
what the agent reported onto them with an unconditional UPDATE (workers.apply_worker_reports:
bulk_set), deciding "this worker has not ended" on its read. A writer that ended the
workers in between, the node monitor's eviction or an admin's identity reset (both lock
the worker rows, mark them lost, release their GPUs and requeue their gangs), was undone:
the heartbeat's UPDATE waited for their commit, then wrote the workers back as live.

Consequences: a live worker that held no GPU (its allocations were released), so the
next pass could place another gang on GPUs whose container still ran until the agent
stopped it (its grace period); and after an identity reset the node "held work" again, so
the reinstalled machine's registration was refused (409) until the node monitor evicted
the resurrected workers.

Now the beat locks its node row first, reads its workers under that lock and writes only
rows that have not ended. The change is made where the old beat had read its workers and
the new one has not yet locked its node (sync_inventory), as the timeout sweep's test
does, but on its own connection (a thread, committed), so that a beat rolled back does
not roll the eviction or reset back too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.core.actions import heartbeat as heartbeat_mod
from portal.core.actions.node_monitor import evict_lost_nodes
from portal.core.actions.nodes import reset_node_identity
from portal.core.actions.workers import LIVE
from portal.core.models import Allocation, Job, Node, Worker
from tests.portal.agent_helpers import admit, beat, make_job, node_token, report
from tests.portal.race_helpers import in_another_connection, register_again

State = Job.State


pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks between two connections"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ender", ["evict", "reset"])
def test_a_heartbeat_does_not_bring_back_workers_ended_after_it_read_them(
    client, cluster, personas, monkeypatch, ender
):
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster)
    admit(job, [node])  # its worker is assigned; the agent has not reported it yet
    long_ago = timezone.now() - timedelta(minutes=10)
    Node.objects.filter(pk=node.pk).update(
        condition=Node.Condition.NOT_READY, not_ready_since=long_ago, last_heartbeat_at=long_ago
    )
    real = heartbeat_mod.sync_inventory  # called before the beat locks its node
    ended = []

    def in_between(node_row, gpus, now):
        if ender == "evict":
            ended.append(
                in_another_connection(
                    lambda: len(
                        evict_lost_nodes(timezone.now() - timedelta(minutes=1), timezone.now())
                    )
                )
            )
        else:
            ended.append(
                in_another_connection(
                    lambda: reset_node_identity(
                        Node.objects.get(pk=node.pk),
                        acting_user=personas.admin,
                        reason="reinstalled",
                    )
                )
            )
        return real(node_row, gpus, now)

    monkeypatch.setattr(heartbeat_mod, "sync_inventory", in_between)
    response = beat(client, node, token, [report(job, 0, "running")])
    # After a reset the beat may be refused (401: its token is gone); it must not undo it.
    assert response.status_code in ((200,) if ender == "evict" else (200, 401)), response.content
    assert ended == [1]
    if ender == "reset":  # the reinstalled machine registers again
        again = register_again(client, node)
        assert again.status_code == 201, again.content
    worker = Worker.objects.get(job=job)
    holds = Allocation.objects.filter(worker=worker, active=True).exists()
    job.refresh_from_db()
    assert worker.state not in LIVE or holds, (
        f"worker {worker.key} is {worker.state} again after the {ender} ended it, holding no "
        f"GPU (its job: {job.state}, attempt {job.attempt})"
    )


@pytest.mark.django_db(transaction=True)
def test_the_reply_does_not_run_a_worker_an_eviction_ended_meanwhile(client, cluster, monkeypatch):
    """Read before the node's lock, the workers in the reply were the beat's stale copy:
    the agent was told to run a worker that the eviction had ended and whose gang it had
    requeued (a review's case), so the gang could run here and, readmitted, elsewhere."""
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster)
    admit(job, [node])
    assert beat(client, node, token, [report(job, 0, "running")]).status_code == 200
    key = f"{job.pk}.{job.attempt}.0"
    long_ago = timezone.now() - timedelta(minutes=10)
    Node.objects.filter(pk=node.pk).update(
        condition=Node.Condition.NOT_READY, not_ready_since=long_ago, last_heartbeat_at=long_ago
    )
    real = heartbeat_mod.sync_inventory
    ended = []

    def in_between(node_row, gpus, now):
        evict = lambda: evict_lost_nodes(timezone.now() - timedelta(minutes=1), timezone.now())  # noqa: E731
        ended.append(in_another_connection(evict))
        return real(node_row, gpus, now)

    monkeypatch.setattr(heartbeat_mod, "sync_inventory", in_between)
    response = beat(client, node, token, [report(job, 0, "running")])
    assert ended == [[node.hostname]] and response.status_code == 200
    assert Worker.objects.get(job=job).state == Worker.State.LOST
    assert key not in [w["key"] for w in response.json()["run"]]

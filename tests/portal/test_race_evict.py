"""The node monitor's eviction (actions/node_monitor.py) reads the nodes not ready for
longer than NODE_EVICT_AFTER_S, then evicts each: evict_node locks the node's live
workers, but never looks at the node again. A heartbeat that lands in between (the node
is back: ready, its workers reported running or about to start) does not stop the
eviction: its workers are marked lost and their gangs requeued (a restart spent, or
failed at the restart limit), and the agent, which the heartbeat's reply had just told
to keep them, is told to stop them on the next one.

The in-between heartbeat is made as the timeout sweep's test makes its change: the
call after the read (evict_node) is wrapped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core.actions import node_monitor
from portal.core.actions.node_monitor import monitor_nodes
from portal.core.models import Job, JobEvent, Node, Worker
from tests.portal.agent_helpers import admit, beat, make_job, node_token, report

State = Job.State


@pytest.mark.parametrize("worker", ["running", "assigned"])
def test_a_node_that_heartbeats_before_its_eviction_keeps_its_gangs(
    client, cluster, monkeypatch, worker
):
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster)
    admit(job, [node])
    if worker == "running":
        assert beat(client, node, token, [report(job, 0, "running")]).status_code == 200
    # The node went silent long ago: not ready past the eviction timeout.
    long_ago = timezone.now() - timedelta(minutes=10)
    Node.objects.filter(pk=node.pk).update(
        condition=Node.Condition.NOT_READY, not_ready_since=long_ago, last_heartbeat_at=long_ago
    )
    real = node_monitor.evict_node
    replies = []

    def in_between(n, **kwargs):
        # The agent is back: its heartbeat commits between the sweep's read and the lock.
        workers = [report(job, 0, "running")] if worker == "running" else []
        response = beat(client, node, token, workers)
        replies.append(response.json())
        return real(n, **kwargs)

    monkeypatch.setattr(node_monitor, "evict_node", in_between)
    evicted = monitor_nodes()["evicted"]
    assert replies and [r["key"] for r in replies[0]["run"]] == [f"{job.pk}.0.0"]
    job.refresh_from_db()
    node.refresh_from_db()
    assert node.condition == Node.Condition.READY
    assert (job.state, job.attempt, job.restart_count) == (
        State.RUNNING if worker == "running" else State.ADMITTED,
        0,
        0,
    ), f"evicted {evicted}; job {job.state} at attempt {job.attempt}"
    assert not JobEvent.objects.filter(job=job, kind="node_lost").exists()
    assert Worker.objects.get(job=job).state != Worker.State.LOST

"""The scheduling pass reads its snapshot (ready, uncordoned nodes and their free GPUs),
plans, and then writes the plan (scheduling/apply.py). apply locks the job rows it
writes and re-checks their state, but it never looks at the nodes again: an admin who
cordons or drains a node, or resets its identity, between the snapshot and the writes
gets a success, and the pass still places a new gang on that node afterwards.

- cordon / drain ("no new work"): a job starts on the node after the admin's change
  committed; a drain for maintenance now waits for that job (up to its max run time),
  or the admin, seeing the node empty, reboots it under the job.
- identity reset: the node, reset to not ready with its work lost, holds the new gang's
  workers, so the reinstalled machine cannot register (409 node_identity) until the node
  monitor evicts them, which requeues the gang (one restart spent) for nothing.

The in-between change is made the way the timeout sweep's test makes it: by wrapping the
call that comes after the read (here apply_plan) on the same connection."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.core import scheduling
from portal.core.actions.jobs import submit_job
from portal.core.actions.nodes import cordon_node, drain_node, reset_node_identity
from portal.core.actions.workers import LIVE
from portal.core.jobspec import clean_job_spec
from portal.core.models import Job, Node, Worker
from portal.core.scheduling import run_pass
from tests.portal.race_helpers import register_again

State = Job.State
pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's pass")


def submit(cluster, user):
    spec = clean_job_spec(
        cluster.team_a,
        {
            "name": "job",
            "image": "img",
            "command": ["true"],
            "flavor": "h100-80gb",
            "max_runtime_seconds": 600,
            "workers": 1,
            "gpus_per_worker": 8,
        },
    )
    return submit_job(team=cluster.team_a, spec=spec, user=user).job


@pytest.mark.parametrize("change", ["cordon", "drain", "reset"])
def test_the_pass_places_no_work_on_a_node_changed_after_its_snapshot(
    client, cluster, personas, monkeypatch, change
):
    job = submit(cluster, personas.lead_a)
    admin = personas.admin
    real = scheduling.apply_plan
    changed = []

    def in_between(plan, ctx):
        # The admin acts on every node the plan places work on, after the snapshot.
        for a in plan.admissions:
            for p in a.placement:
                node = Node.objects.get(hostname=p.node)
                if change == "cordon":
                    cordon_node(node, acting_user=admin, reason="bad fan")
                elif change == "drain":
                    drain_node(node, acting_user=admin, reason="maintenance")
                else:
                    reset_node_identity(node, acting_user=admin, reason="reinstalled")
                changed.append(node)
        return real(plan, ctx)

    monkeypatch.setattr(scheduling, "apply_plan", in_between)
    run_pass()
    assert changed, "the pass planned no admission"
    if change == "reset":  # the reinstalled machine registers again
        response = register_again(client, changed[0])
        assert response.status_code == 201, response.content
    landed = Worker.objects.filter(job=job, node__in=changed, state__in=LIVE)
    assert not landed.exists(), (
        f"{change}: job {job.pk} was placed on {[w.node.hostname for w in landed]} "
        f"after the admin's {change} committed (job state {Job.objects.get(pk=job.pk).state})"
    )

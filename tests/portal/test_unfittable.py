"""A job the cluster can no longer host fails after BERTH_NEVER_FITS_FAIL_AFTER_S
instead of waiting forever (issue 16, item 1)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F

from portal.core.models import Job, JobEvent, Node
from portal.core.scheduling import run_pass
from tests.api.conftest import submit

State = Job.State


def test_a_job_left_unfittable_by_removed_nodes_fails_after_the_limit(cluster, personas, settings):
    settings.BERTH = settings.BERTH | {"NEVER_FITS_FAIL_AFTER_S": 600.0}
    # A 2 x 8 gang fits either block of two nodes; then one node of each block is removed.
    job = submit(cluster.team_a, personas.member_a, workers=2, gpus_per_worker=8)
    Node.objects.filter(hostname__in=["h100-1", "h100-3"]).delete()

    run_pass()
    run_pass()  # a later pass within the limit: still waiting, noted once
    job.refresh_from_db()
    assert (job.state, job.reason_code) == (State.PENDING, "never_fits")
    (noted,) = JobEvent.objects.filter(job=job, kind="never_fits")
    assert "fails if this lasts 10 min" in noted.message

    JobEvent.objects.filter(pk=noted.pk).update(at=F("at") - timedelta(seconds=601))
    run_pass()

    job.refresh_from_db()
    assert (job.state, job.reason_code) == (State.FAILED, "never_fits")
    assert job.finished_at is not None and "could not host it for 10 min" in job.reason
    failed = job.events.get(kind="failed", to_state=State.FAILED)
    assert failed.message.startswith("The cluster could not host it: needs 16 h100-80gb GPUs")


def test_a_job_that_fits_again_before_the_limit_runs(cluster, personas, settings):
    settings.BERTH = settings.BERTH | {"NEVER_FITS_FAIL_AFTER_S": 0.0}
    job = submit(cluster.team_a, personas.member_a, workers=2, gpus_per_worker=8)
    down = Node.objects.filter(hostname__in=["h100-1", "h100-3"])
    down.update(condition=Node.Condition.NOT_READY)  # a restart, say: not gone for good
    run_pass()
    job.refresh_from_db()
    assert (job.state, job.reason_code) == (State.PENDING, "never_fits")

    down.update(condition=Node.Condition.READY)
    run_pass()

    job.refresh_from_db()
    assert job.state == State.ADMITTED

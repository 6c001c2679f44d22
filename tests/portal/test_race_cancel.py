"""cancel_jobs (actions/jobs.py) moves a job in two transitions: pending ones first, then
the active ones. The first locks only the rows that are pending at that moment, so an
active job's row is unlocked between the two. A heartbeat that completes the job's
preemption (or loses its worker) in that gap requeues it (pending, a new attempt): the
second transition, from the active states, then finds nothing to move.

For cancel_job this is an InvalidTransition ("already ended (pending); nothing to
cancel"): a 409 for the user, and the job stays queued and runs again. For an array's
cancel the task just stays pending while the call reports success.

The concurrent writer runs on its own connection, so this stays a faithful test once
the rows are locked before either transition: its UPDATE then waits, and gives up after
a short lock_timeout."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.core.actions import jobs as jobs_mod
from portal.core.actions.jobs import InvalidTransition, cancel_job, requeue_or_fail
from portal.core.models import Job, JobEvent
from tests.portal.agent_helpers import admit, make_job
from tests.portal.race_helpers import in_another_connection

State = Job.State

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks between two connections"
)


@pytest.mark.django_db(transaction=True)
def test_a_job_requeued_between_cancels_two_locks_is_still_cancelled(cluster, monkeypatch):
    job = make_job(cluster)
    admit(job, [cluster.nodes[0]])
    # Its preemption was ordered; its workers have just exited.
    Job.objects.filter(pk=job.pk).update(state=State.PREEMPTING)
    real = jobs_mod.transition
    requeued = {}

    def between(ids, **kwargs):
        if kwargs.get("kind") == "cancelled" and State.PREEMPTING in kwargs["from_states"]:
            # The node's heartbeat settles the preemption now (actions.workers._carry_out).
            requeued["outcome"] = in_another_connection(
                lambda: requeue_or_fail(
                    [job.pk],
                    kind="requeued",
                    message="Preemption complete: all workers stopped.",
                    from_states=[State.PREEMPTING],
                )
            )
        return real(ids, **kwargs)

    monkeypatch.setattr(jobs_mod, "transition", between)
    try:
        cancel_job(job, actor=None, reason="no longer needed")
    except InvalidTransition as exc:
        job.refresh_from_db()
        pytest.fail(
            f"cancel refused: {exc}; the job is {job.state} at attempt {job.attempt} "
            f"(the heartbeat in between: {requeued})"
        )
    job.refresh_from_db()
    assert job.state == State.CANCELLED
    assert JobEvent.objects.filter(job=job, kind="cancelled").count() == 1

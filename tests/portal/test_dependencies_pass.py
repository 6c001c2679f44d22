"""A pipeline through the real pieces: scheduling passes admit, the node agent's
heartbeats report starts and exits, and the transitions they cause release or cancel
the dependent jobs, which the next pass then admits (or never sees)."""

from __future__ import annotations

from portal.core.models import Job, Node, Worker
from portal.core.scheduling import run_pass
from tests.portal.agent_helpers import beat, node_token, report
from tests.portal.test_scheduling_pass import submit

State = Job.State


def agent_reports(client, job: Job, state: str, exit_code=None) -> None:
    """Each node of the gang reports its worker in `state`, as the agent does."""
    job.refresh_from_db()
    for worker in Worker.objects.filter(job=job, attempt=job.attempt).select_related("node"):
        node = Node.objects.get(pk=worker.node_id)
        response = beat(
            client, node, node_token(node), [report(job, worker.rank, state, exit_code)]
        )
        assert response.status_code == 200, response.content


def test_train_eval_report_through_passes_and_heartbeats(client, cluster, personas):
    user = personas.member_a
    train = submit(cluster, user, name="train", gpus_per_worker=8)
    evaluate = submit(
        cluster, user, name="eval", gpus_per_worker=8, dependency=f"afterok:{train.pk}"
    )
    report_job = submit(
        cluster, user, name="report", dependency=f"afterany:{train.pk}:{evaluate.pk}"
    )

    run_pass()
    for job in (train, evaluate, report_job):
        job.refresh_from_db()
    assert train.state == State.ADMITTED
    assert (evaluate.state, evaluate.reason_code) == (State.PENDING, "dependency")
    assert report_job.reason_code == "dependency"  # the pass left the held jobs alone

    agent_reports(client, train, "running")
    evaluate.refresh_from_db()
    assert evaluate.reason == f"Waits for job {train.pk} (train) to succeed (it is running)."
    agent_reports(client, train, "exited", exit_code=0)
    evaluate.refresh_from_db()
    assert (evaluate.reason_code, evaluate.awaiting_dependency) == ("new", False)

    run_pass()
    evaluate.refresh_from_db()
    assert evaluate.state == State.ADMITTED
    agent_reports(client, evaluate, "exited", exit_code=2)  # eval fails
    report_job.refresh_from_db()
    assert (report_job.state, report_job.reason_code) == (State.PENDING, "new")
    run_pass()
    report_job.refresh_from_db()
    assert report_job.state == State.ADMITTED


def test_a_failed_training_cancels_its_evaluation_in_the_agents_report(client, cluster, personas):
    user = personas.member_a
    train = submit(cluster, user, name="train", gpus_per_worker=8)
    evaluate = submit(cluster, user, name="eval", dependency=f"afterok:{train.pk}")
    run_pass()
    agent_reports(client, train, "exited", exit_code=1)
    evaluate.refresh_from_db()
    assert (evaluate.state, evaluate.reason_code) == (State.CANCELLED, "dependency_never_satisfied")
    event = evaluate.events.get(kind="dependency_never_satisfied")
    assert event.message == (
        f"Cancelled: Dependency afterok:{train.pk} can never be met: job {train.pk} (train) failed."
    )

"""Dependencies in the dashboard: the submit form takes one, the job page names the
parents and why it waits, the queue shows a held job without a position."""

from __future__ import annotations

from portal.core.models import Job
from tests.dashboard.test_permissions import valid_form
from tests.dashboard.test_submit import errors


def test_a_dependent_job_from_the_form_waits_for_its_parent(story, login):
    client = login(story.cluster.personas.member_a)
    sweep = story.sweep
    response = client.post(
        "/teams/alpha/submit/", valid_form(name="eval", dependency=f"afterok:{sweep.pk}")
    )
    job = Job.objects.get(name="eval")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert (job.dependency, job.awaiting_dependency, job.reason_code) == (
        f"afterok:{sweep.pk}",
        True,
        "dependency",
    )

    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"Waits for job {sweep.pk} ({sweep.name}) to succeed (it is pending)." in page
    assert f'<a href="/jobs/{sweep.pk}/">#{sweep.pk} {sweep.name}</a>' in page
    assert "The jobs it depends on" in page  # the remedy
    assert "held: it queues once its dependencies are met" in page
    assert "Ahead of it" not in page

    queue = client.get("/teams/alpha/queue/").content.decode()
    row = queue[queue.index(f'data-job="{job.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "held" in row and "queues once its dependencies are met" in row


def test_a_parent_of_another_team_is_a_field_error(story, login):
    client = login(story.cluster.personas.member_a)
    beta = story.beta_train
    response = client.post("/teams/alpha/submit/", valid_form(dependency=f"afterany:{beta.pk}"))
    assert response.status_code == 200
    assert errors(response) == {
        "dependency": [
            f"Team alpha has no job {beta.pk}; a job can depend only on jobs of its own team."
        ]
    }
    assert not Job.objects.filter(name="resnet-50").exists()

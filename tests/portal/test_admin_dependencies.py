"""Dependencies in the admin: a job's page lists its parents; an admin can have held
jobs judged at once (what the periodic sweep does)."""

from django.utils import timezone

from portal.core.models import Job
from tests.api.conftest import submit


def test_the_job_page_lists_its_parents_and_the_action_judges_held_jobs(client, cluster, personas):
    client.force_login(personas.admin)
    team, user = cluster.team_a, personas.member_a
    parent = submit(team, user, name="train")
    child = submit(team, user, name="eval", dependency=f"afterok:{parent.pk}")

    page = client.get(f"/admin/core/job/{child.pk}/change/").content.decode()
    assert "afterok" in page and f"#{parent.pk} train" in page and "pending" in page

    # The parent ended without the hook seeing its child (a race): the action settles it.
    Job.objects.filter(pk=parent.pk).update(state="failed", finished_at=timezone.now())
    response = client.post(
        "/admin/core/job/",
        {"action": "judge_dependencies", "_selected_action": [child.pk]},
        follow=True,
    )
    assert "Held jobs checked: 0 released, 1 cancelled, 0 waiting." in response.content.decode()
    child.refresh_from_db()
    assert (child.state, child.reason_code) == ("cancelled", "dependency_never_satisfied")
    assert child.events.last().data == {"parent": parent.pk, "parent_state": "failed"}

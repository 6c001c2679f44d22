"""Who may see and do what: leads, members, viewers of alpha; beta's lead is the outsider."""

from __future__ import annotations

import pytest

from portal.core.actions.tokens import create_api_token
from portal.core.models import ApiToken, Job

TEAM_PAGES = [
    "/teams/alpha/",
    "/teams/alpha/?fragment=live",
    "/teams/alpha/queue/",
    "/teams/alpha/queue/?fragment=live",
    "/teams/alpha/cluster/",
    "/teams/alpha/cluster/?fragment=live",
    "/teams/alpha/submit/",
    "/teams/alpha/usage.csv",
]


def job_pages(story):
    return [f"/jobs/{story.training.pk}/", f"/jobs/{story.training.pk}/?fragment=live"]


def test_outsider_gets_404_on_every_page_of_the_team(story, login):
    client = login(story.cluster.personas.lead_b)
    for url in TEAM_PAGES + job_pages(story):
        assert client.get(url).status_code == 404, url
    assert client.post("/teams/alpha/submit/", {"name": "x"}).status_code == 404
    assert client.post(f"/jobs/{story.training.pk}/cancel").status_code == 404
    story.training.refresh_from_db()
    assert story.training.state == Job.State.RUNNING


def test_outsider_and_stranger_get_the_same_404_as_for_a_missing_team_or_job(story, login):
    client = login(story.cluster.personas.lead_b)
    real = client.get("/teams/alpha/queue/")
    absent = client.get("/teams/nope/queue/")
    assert real.status_code == absent.status_code == 404
    assert [t.name for t in real.templates] == [t.name for t in absent.templates]
    assert client.get("/jobs/999999/").status_code == 404


def test_outsider_cluster_page_is_their_own_and_never_names_alpha_jobs(story, login):
    html = login(story.cluster.personas.lead_b).get("/teams/beta/cluster/").content.decode()
    assert "alpha" in html  # the team owning a GPU is shown
    assert "llm-pretrain" not in html and "notebook-debug" not in html
    assert "beta-diffusion" in html


@pytest.mark.parametrize("who", ["lead_a", "member_a", "viewer_a", "admin"])
def test_members_of_any_role_and_staff_read_every_page(story, login, who):
    client = login(getattr(story.cluster.personas, who))
    for url in TEAM_PAGES + job_pages(story):
        expected = 403 if (who == "viewer_a" and "submit" in url) else 200
        assert client.get(url).status_code == expected, url


def test_anonymous_is_sent_to_login_and_a_live_poll_redirects_the_whole_tab(story, client):
    response = client.get("/teams/alpha/queue/")
    assert response.status_code == 302
    assert response.url == "/login/?next=%2Fteams%2Falpha%2Fqueue%2F"
    poll = client.get("/teams/alpha/queue/?fragment=live")
    assert poll.status_code == 401
    assert poll["HX-Redirect"] == "/login/?next=%2Fteams%2Falpha%2Fqueue%2F"
    assert client.get("/tokens/").status_code == 302


def test_viewer_can_neither_submit_nor_cancel(story, login):
    client = login(story.cluster.personas.viewer_a)
    assert client.get("/teams/alpha/submit/").status_code == 403
    before = Job.objects.count()
    response = client.post("/teams/alpha/submit/", valid_form())
    assert response.status_code == 403 and Job.objects.count() == before
    assert client.post(f"/jobs/{story.sweep.pk}/cancel").status_code == 403
    story.sweep.refresh_from_db()
    assert story.sweep.state == Job.State.PENDING
    page = client.get(f"/jobs/{story.sweep.pk}/").content.decode()
    assert "Cancel job" not in page
    assert "Submit job" not in client.get("/teams/alpha/").content.decode()


def test_member_cancels_their_own_job_only(story, login):
    client = login(story.cluster.personas.member_a)
    assert "Cancel job" not in client.get(f"/jobs/{story.training.pk}/").content.decode()
    assert client.post(f"/jobs/{story.training.pk}/cancel").status_code == 403
    story.training.refresh_from_db()
    assert story.training.state == Job.State.RUNNING

    assert "Cancel job" in client.get(f"/jobs/{story.sweep.pk}/").content.decode()
    response = client.post(f"/jobs/{story.sweep.pk}/cancel", follow=True)
    assert response.redirect_chain[-1][0] == f"/jobs/{story.sweep.pk}/"
    assert "was cancelled" in response.content.decode()
    story.sweep.refresh_from_db()
    assert story.sweep.state == Job.State.CANCELLED
    assert story.sweep.events.filter(kind="cancelled", actor=story.cluster.personas.member_a)


def test_lead_cancels_a_members_running_job_and_a_second_cancel_is_refused(story, login):
    client = login(story.cluster.personas.lead_a)
    client.post(f"/jobs/{story.notebook.pk}/cancel")
    story.notebook.refresh_from_db()
    assert story.notebook.state == Job.State.CANCELLED
    assert story.notebook.stop_requested_at is not None
    again = client.post(f"/jobs/{story.notebook.pk}/cancel", follow=True)
    assert "already ended" in again.content.decode()


def test_cancel_only_accepts_post(story, login):
    client = login(story.cluster.personas.lead_a)
    assert client.get(f"/jobs/{story.sweep.pk}/cancel").status_code == 405


def test_a_user_cannot_revoke_or_see_someone_elses_token(story, login):
    token, _ = create_api_token(story.cluster.personas.lead_a, name="lead-ci")
    client = login(story.cluster.personas.member_a)
    assert "lead-ci" not in client.get("/tokens/").content.decode()
    assert client.post(f"/tokens/{token.pk}/revoke").status_code == 404
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def valid_form(**overrides) -> dict:
    return {
        "name": "resnet-50",
        "queue": "default",
        "flavor": "a100-40gb",
        "image": "ghcr.io/example/trainer:2.4",
        "command": "python train.py --epochs 3",
        "env": "",
        "workers": "1",
        "gpus_per_worker": "2",
        "priority": "",
        "preemptible": "",
        "max_runtime_seconds": "",
        "checkpoint_signal": "SIGTERM",
        "grace_period_seconds": "30",
        "request_id": "f" * 32,
    } | overrides

"""The Notifications page: leads add and remove webhooks, see and rotate the signing
secret, and see every delivery's attempts, status code and last error; members and
viewers get 403, other teams 404. The submit form takes a job's own notify."""

from __future__ import annotations

import pytest

from portal.core.actions.jobs import cancel_job
from portal.core.actions.notifications import team_secret
from portal.core.models import AuditEntry, Delivery, Job, JobNotify, TeamWebhook
from tests.dashboard.test_permissions import valid_form

PAGE = "/teams/alpha/notifications/"
HOOK = "https://hooks.example.com/berth"


def test_a_lead_adds_a_webhook_and_sees_it(story, login):
    client = login(story.cluster.personas.lead_a)
    response = client.post(PAGE, {"url": HOOK, "events": ["failed"], "team_events": "on"})
    assert response.status_code == 302 and response.url == PAGE
    hook = TeamWebhook.objects.get()
    assert (hook.team.slug, hook.events, hook.team_events) == ("alpha", ["failed"], True)
    page = client.get(PAGE).content.decode()
    assert HOOK in page and f'data-webhook="{hook.pk}"' in page
    assert team_secret(story.cluster.team_a) in page


def test_a_refused_url_is_an_error_next_to_the_field(story, login):
    response = login(story.cluster.personas.lead_a).post(PAGE, {"url": "http://10.0.0.1/x"})
    assert response.status_code == 200
    assert "private" in response.context["form"].errors["url"][0]
    assert not TeamWebhook.objects.exists()


def test_a_lead_removes_a_webhook_and_rotates_the_secret(story, login):
    client = login(story.cluster.personas.lead_a)
    client.post(PAGE, {"url": HOOK, "events": ["ended"]})
    hook = TeamWebhook.objects.get()
    assert client.post(f"{PAGE}webhooks/{hook.pk}/delete").status_code == 302
    assert not TeamWebhook.objects.exists()
    before = team_secret(story.cluster.team_a)
    assert client.post(f"{PAGE}secret/rotate").status_code == 302
    assert team_secret(story.cluster.team_a) != before
    assert AuditEntry.objects.filter(action="rotate_webhook_secret").count() == 1


def test_the_lead_sees_attempts_status_codes_and_errors(story, login):
    personas = story.cluster.personas
    client = login(personas.member_a)
    client.post("/teams/alpha/submit/", valid_form(notify_url=HOOK, notify_on=["ended"]))
    job = Job.objects.get(name="resnet-50")
    cancel_job(job, actor=personas.member_a)
    delivery = Delivery.objects.get(job=job)
    Delivery.objects.filter(pk=delivery.pk).update(
        state="failed", attempts=8, last_status_code=502, last_error="HTTP 502: bad gateway"
    )
    page = login(personas.lead_a).get(PAGE).content.decode()
    row = page[page.index(f'data-delivery="{delivery.pk}"') :].split("</tr>")[0]
    assert "gave up" in row and "502" in row and "HTTP 502: bad gateway" in row
    assert ">8<" in row and f"#{job.pk}" in row
    assert (
        login(personas.lead_a).post(f"{PAGE}deliveries/{delivery.pk}/redeliver").status_code == 302
    )
    assert Delivery.objects.filter(state="pending").count() == 1


@pytest.mark.parametrize("who", ["member_a", "viewer_a"])
def test_members_and_viewers_get_403(story, login, who):
    client = login(getattr(story.cluster.personas, who))
    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, {"url": HOOK}).status_code == 403
    assert client.post(f"{PAGE}secret/rotate").status_code == 403
    assert "Notifications</a>" not in client.get("/teams/alpha/queue/").content.decode()
    assert not TeamWebhook.objects.exists()


def test_another_teams_lead_gets_404(story, login):
    client = login(story.cluster.personas.lead_b)
    assert client.get(PAGE).status_code == 404
    assert client.post(f"{PAGE}secret/rotate").status_code == 404


def test_the_submit_form_takes_a_notify_url_and_email(story, login):
    client = login(story.cluster.personas.member_a)
    response = client.post(
        "/teams/alpha/submit/",
        valid_form(notify_url=HOOK, notify_on=["started", "failed"], notify_email="on"),
    )
    assert response.status_code == 302
    notify = JobNotify.objects.get(job__name="resnet-50")
    assert notify.as_dict() == {"url": HOOK, "on": ["started", "failed"], "email": True}


def test_a_bad_notify_url_in_the_submit_form_is_an_error_next_to_it(story, login):
    client = login(story.cluster.personas.member_a)
    response = client.post("/teams/alpha/submit/", valid_form(notify_url="ftp://x/"))
    assert response.status_code == 200
    assert "Only http" in response.context["form"].errors["notify_url"][0]
    response = client.post("/teams/alpha/submit/", valid_form(notify_url=HOOK, notify_on=[]))
    assert "at least one" in response.context["form"].errors["notify_on"][0]
    assert not Job.objects.filter(name="resnet-50").exists()


def test_the_job_page_shows_its_notify_and_deliveries(story, login):
    from portal.core.actions.notifications import create_webhook

    personas = story.cluster.personas
    create_webhook(
        story.cluster.team_a,
        url="https://team.example.com/hook",
        events=["ended"],
        acting_user=personas.lead_a,
    )
    member = login(personas.member_a)
    member.post("/teams/alpha/submit/", valid_form(notify_url=HOOK, notify_on=["ended"]))
    job = Job.objects.get(name="resnet-50")
    cancel_job(job, actor=personas.member_a)
    page = member.get(f"/jobs/{job.pk}/").content.decode()
    assert f"<code>{HOOK}</code>" in page and " on ended" in page
    assert page.count("data-delivery=") == 1  # the member sees the job's own only
    assert "team.example.com" not in page
    lead_page = login(personas.lead_a).get(f"/jobs/{job.pk}/").content.decode()
    assert lead_page.count("data-delivery=") == 2 and "team.example.com/hook" in lead_page

"""Notifications through the REST API: a job's `notify` at submission (clear 400s for
bad ones, private targets refused by default), and a team's webhooks, secret and
deliveries for its leads only."""

from __future__ import annotations

import pytest

from portal.core.actions.jobs import cancel_job
from portal.core.models import AuditEntry, Delivery, Job, JobNotify, TeamWebhook
from tests.api.conftest import error_of, job_body

JOBS = "/api/v1/jobs/"
HOOK = "https://hooks.example.com/berth"


def test_a_job_submitted_with_notify_keeps_it_and_shows_it(as_member_a):
    response = as_member_a.post(JOBS, job_body(notify={"url": HOOK, "on": ["ended", "started"]}))
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert JobNotify.objects.get(job=job).as_dict() == {
        "url": HOOK,
        "on": ["started", "ended"],
        "email": False,
    }
    detail = as_member_a.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["notify"] == {"url": HOOK, "on": ["started", "ended"], "email": False}


def test_notify_defaults_to_ended_and_a_job_without_it_has_none(as_member_a):
    with_notify = as_member_a.post(JOBS, job_body(notify={"email": True})).json()["id"]
    without = as_member_a.post(JOBS, job_body(name="plain")).json()["id"]
    assert as_member_a.get(f"/api/v1/jobs/{with_notify}/").json()["notify"] == {
        "url": None,
        "on": ["ended"],
        "email": True,
    }
    assert as_member_a.get(f"/api/v1/jobs/{without}/").json()["notify"] is None
    assert JobNotify.objects.count() == 1


def test_bulk_jobs_keep_their_notify(as_member_a):
    jobs = [job_body(name="a", notify={"url": HOOK}), job_body(name="b")]
    response = as_member_a.post("/api/v1/jobs/bulk/", {"jobs": jobs})
    assert response.status_code == 201, response.content
    first, second = response.json()["ids"]
    assert list(JobNotify.objects.values_list("job_id", flat=True)) == [first]


@pytest.mark.parametrize(
    "notify, field, words",
    [
        ({"url": "ftp://hooks.example.com/"}, "notify.url", "Only http"),
        ({"url": "http://169.254.169.254/latest"}, "notify.url", "link-local"),
        ({"url": "http://localhost:8080/"}, "notify.url", "localhost"),
        ({"url": "http://10.0.0.5/hook"}, "notify.url", "private"),
        ({"url": HOOK, "on": ["finished"]}, "notify.on", "Unknown events finished"),
        ({"url": HOOK, "on": []}, "notify.on", "at least one"),
        ({"on": ["failed"]}, "notify", "Name a url"),
        ({"url": 5}, "notify.url", "valid string"),
        ({"url": HOOK, "mail": True}, "notify.mail", "Unknown field"),
        ({"url": HOOK, "email": "yes"}, "notify.email", "true or false"),
    ],
)
def test_a_bad_notify_is_a_400_naming_the_field(as_member_a, notify, field, words):
    error = error_of(as_member_a.post(JOBS, job_body(notify=notify)), 400, "invalid")
    assert field in error["fields"], error
    assert words.lower() in " ".join(error["fields"][field]).lower(), error
    assert not Job.objects.exists()


def test_notify_must_be_an_object(as_member_a):
    error = error_of(as_member_a.post(JOBS, job_body(notify=["https://x"])), 400, "invalid")
    assert "notify" in " ".join(error["fields"]), error


# --- a team's webhooks, secret and deliveries ---------------------------------------


def webhooks(team="alpha"):
    return f"/api/v1/teams/{team}/webhooks/"


def test_a_lead_creates_lists_and_deletes_a_webhook(as_lead_a, personas):
    response = as_lead_a.post(webhooks(), {"url": HOOK, "events": ["failed", "started"]})
    assert response.status_code == 201, response.content
    hook = response.json()
    assert (hook["events"], hook["team_events"], hook["active"]) == (
        ["started", "failed"],
        True,
        True,
    )
    assert [h["id"] for h in as_lead_a.get(webhooks()).json()] == [hook["id"]]
    assert as_lead_a.delete(f"{webhooks()}{hook['id']}/").status_code == 204
    assert not TeamWebhook.objects.exists()
    actions = AuditEntry.objects.filter(target_type="teamwebhook", actor=personas.lead_a)
    assert sorted(actions.values_list("action", flat=True)) == ["create", "delete"]


def test_a_webhook_with_a_private_url_is_refused(as_lead_a):
    error = error_of(as_lead_a.post(webhooks(), {"url": "http://127.0.0.1:9000/"}), 400)
    assert "loopback" in error["fields"]["url"][0]
    error = error_of(as_lead_a.post(webhooks(), {"url": HOOK, "events": ["done"]}), 400)
    assert '"done" is not a valid choice' in error["fields"]["events[0]"][0]


def test_members_may_not_and_strangers_cannot_tell(as_member_a, as_viewer_a, as_lead_b):
    for api in (as_member_a, as_viewer_a):
        error_of(api.get(webhooks()), 403)
        error_of(api.post(webhooks(), {"url": HOOK}), 403)
        error_of(api.get("/api/v1/teams/alpha/webhook-secret/"), 403)
        error_of(api.get("/api/v1/teams/alpha/deliveries/"), 403)
    error_of(as_lead_b.get(webhooks()), 404)
    error_of(as_lead_b.get("/api/v1/teams/alpha/webhook-secret/"), 404)
    error_of(as_lead_b.get(webhooks("nosuchteam")), 404)


def test_the_secret_is_read_and_rotated_by_a_lead_without_caching(as_lead_a):
    first = as_lead_a.get("/api/v1/teams/alpha/webhook-secret/")
    assert first["Cache-Control"] == "no-store"
    secret = first.json()["secret"]
    assert secret.startswith("whsec_")
    rotated = as_lead_a.post("/api/v1/teams/alpha/webhook-secret/").json()["secret"]
    assert rotated != secret
    assert as_lead_a.get("/api/v1/teams/alpha/webhook-secret/").json()["secret"] == rotated


def test_a_lead_sees_the_deliveries_and_redelivers_one(as_lead_a, as_member_a, personas):
    job_id = as_member_a.post(JOBS, job_body(notify={"url": HOOK})).json()["id"]
    cancel_job(Job.objects.get(pk=job_id), actor=personas.member_a)
    Delivery.objects.update(state="failed", attempts=3, last_status_code=500, last_error="HTTP 500")
    (row,) = as_lead_a.get("/api/v1/teams/alpha/deliveries/").json()
    assert (row["job"], row["event"], row["target"], row["state"]) == (
        job_id,
        "ended",
        HOOK,
        "failed",
    )
    assert (row["attempts"], row["last_status_code"], row["last_error"]) == (3, 500, "HTTP 500")
    again = as_lead_a.post(f"/api/v1/teams/alpha/deliveries/{row['id']}/redeliver/")
    assert again.status_code == 201 and again.json()["state"] == "pending"
    assert Delivery.objects.count() == 2

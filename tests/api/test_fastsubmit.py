"""The fast single-submission path (portal/api/views/fastsubmit.py): it answers a
plain submission in one statement, answers exactly as the full view does, hands
every other request over without changing anything, and never trusts what it
remembered over what the database says now."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework import serializers

from portal.api.serializers import JobReceiptSerializer
from portal.api.views import fastsubmit
from portal.api.views.jobs import JobListView
from portal.core.models import ApiToken, Job, JobEvent, Membership, Queue
from tests.api.conftest import bearer, job_body, submit
from tests.factories import make_user

JOBS = "/api/v1/jobs/"


@pytest.fixture
def full_view_must_not_run(monkeypatch):
    def refuse(self, request, *args, **kwargs):
        raise AssertionError("the full view ran")

    monkeypatch.setattr(JobListView, "post", refuse)


def test_a_plain_submission_is_stored_by_one_statement_once_the_grant_is_known(
    as_member_a, full_view_must_not_run, django_assert_num_queries
):
    as_member_a.post(JOBS, job_body())  # finds the token, team and queue; remembers them

    with django_assert_num_queries(1):  # the insert, which re-checks the grant
        response = as_member_a.post(JOBS, job_body(name="second"))

    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.name, job.state) == ("second", "pending")
    assert JobEvent.objects.filter(job=job, kind="submitted").count() == 1


def test_the_receipt_is_what_drf_would_write(cluster, personas):
    job = submit(cluster.team_a, personas.member_a, env={"A": "1"})
    job.idempotency_key = "key-1"
    for who in (personas.member_a, None):
        job.submitted_by = who
        receipt = JobReceiptSerializer()
        assert receipt.to_representation(job) == serializers.Serializer.to_representation(
            receipt, job
        )


# --- both ways answer the same ----------------------------------------------------------


def _answer(response) -> tuple:
    """What a client sees, but the values that differ between any two submissions."""
    body = re.sub(rb'"id":\d+|"submitted_at":"[^"]*"', b"", response.content)
    headers = {
        name: response.get(name)
        for name in (
            "Content-Type",
            "Retry-After",
            "WWW-Authenticate",
            "Idempotent-Replayed",
            "Vary",
            "Allow",
        )
    }
    return response.status_code, body, headers, "Location" in response


def _scenarios(cluster, personas):
    """(name, client, body or raw bytes, extra headers): plain and awkward requests."""
    member, lead, viewer = (
        bearer(p) for p in (personas.member_a, personas.lead_a, personas.viewer_a)
    )
    revoked = bearer(personas.member_a)
    ApiToken.objects.filter(pk=ApiToken.objects.latest("pk").pk).update(revoked_at=timezone.now())
    expired = bearer(personas.member_a, expires_at=timezone.now() + timedelta(seconds=1))
    ApiToken.objects.filter(pk=ApiToken.objects.latest("pk").pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    scoped_b = bearer(personas.lead_b, teams=[cluster.team_b])
    staff = bearer(make_user("root", staff=True))
    return [
        ("plain", member, job_body(), {}),
        ("team named", member, job_body(team="alpha"), {}),
        ("lead", lead, job_body(priority=5, preemptible=False, env={"SEED": "2"}), {}),
        ("another team's slug", member, job_body(team="beta"), {}),
        ("unknown queue", member, job_body(queue="nope"), {}),
        ("unknown flavor", member, job_body(flavor="tpu"), {}),
        ("gang too big", member, job_body(workers=9, gpus_per_worker=8), {}),
        ("runtime above the queue's", member, job_body(max_runtime_seconds=10**6), {}),
        ("unknown field", member, job_body(colour="red"), {}),
        ("number as text", member, job_body(workers="2"), {}),
        ("missing name", member, job_body(name=None), {}),
        ("viewer", viewer, job_body(), {}),
        ("revoked token", revoked, job_body(), {}),
        ("expired token", expired, job_body(), {}),
        ("scoped token, other team", scoped_b, job_body(team="alpha"), {}),
        ("staff", staff, job_body(team="alpha"), {}),
        ("garbage token", bearer_of("bat_nope"), job_body(), {}),
        ("not JSON", member, b"{nope", {}),
        ("NaN", member, b'{"name": NaN}', {}),
        ("an array", member, b"[1, 2]", {}),
        ("escaped text", member, json.dumps(job_body(name="caf\u00e9")).encode(), {}),
        ("lone surrogate", member, b'{"name": "\\ud800"}', {}),
        ("asks for HTML", member, job_body(), {"Accept": "text/html"}),
        ("empty Accept", member, job_body(), {"Accept": ""}),
        (
            "Accept with a charset",
            member,
            job_body(),
            {"Accept": "application/json; charset=utf-8"},
        ),
        ("UTF-8 byte order mark", member, b"\xef\xbb\xbf" + json.dumps(job_body()).encode(), {}),
        ("UTF-16", member, json.dumps(job_body()).encode("utf-16"), {}),
        (
            "line separator, unescaped",
            member,
            json.dumps(job_body(name="a\u2028b"), ensure_ascii=False).encode(),
            {},
        ),
        (
            "no-break space after Bearer",
            bearer_of(member.headers["Authorization"].split()[1], "Bearer\xa0"),
            job_body(),
            {},
        ),
        ("overlong key", member, job_body(), {"Idempotency-Key": "k" * 201}),
    ]


def bearer_of(plaintext: str, scheme: str = "Bearer "):
    from tests.api.conftest import Api

    return Api(Client(), {"Authorization": f"{scheme}{plaintext}"})


def _post(api, body, headers):
    if isinstance(body, bytes):
        return api.client.post(
            JOBS, body, content_type="application/json", headers=api.headers | headers
        )
    return api.post(JOBS, body, **headers)


def test_the_fast_path_answers_every_request_as_the_full_view_does(cluster, personas, settings):
    answers, scenarios = {}, _scenarios(cluster, personas)
    for fast in (True, False):
        settings.BERTH_FAST_SUBMIT = fast
        fastsubmit.forget()
        for name, api, body, headers in scenarios:
            before = Job.objects.count()
            response = _post(api, body, headers)
            answers.setdefault(name, []).append((_answer(response), Job.objects.count() - before))
    differ = [name for name, (fast, full) in answers.items() if fast != full]
    assert differ == [], [answers[name] for name in differ]
    assert answers["plain"][0][0][0] == 201 and answers["viewer"][0][0][0] == 403


def test_idempotent_retries_and_conflicts_answer_the_same_both_ways(as_member_a, settings):
    seen = []
    for fast in (True, False):
        settings.BERTH_FAST_SUBMIT = fast
        key = {"Idempotency-Key": f"retry-{fast}"}
        first = as_member_a.post(JOBS, job_body(), **key)
        again = as_member_a.post(JOBS, job_body(), **key)
        other = as_member_a.post(JOBS, job_body(name="other"), **key)
        assert again.json() == first.json()
        assert again["Idempotent-Replayed"] == "true"
        seen.append(
            [(r.status_code, r.json().get("error", {}).get("code")) for r in (first, again, other)]
        )
    assert seen[0] == seen[1] == [(201, None), (200, None), (409, "idempotency_conflict")]


def test_a_full_queue_is_refused_the_same_way(as_member_a, cluster, settings):
    cluster.queue_a.max_pending_jobs = 1
    cluster.queue_a.save()
    assert as_member_a.post(JOBS, job_body()).status_code == 201
    refusals = []
    for fast in (True, False):
        settings.BERTH_FAST_SUBMIT = fast
        refusals.append(_answer(as_member_a.post(JOBS, job_body())))
    assert refusals[0] == refusals[1]
    assert refusals[0][0] == 429 and refusals[0][2]["Retry-After"]
    assert Job.objects.count() == 1


# --- what it remembers is checked again -------------------------------------------------


@pytest.mark.parametrize(
    "change, status",
    [
        ("revoke the token", 401),
        ("deactivate the user", 401),
        ("make the member a viewer", 403),
        ("take the member out of the team", 400),  # "You are not in any team"
        ("lower the queue's run-time limit", 400),
        ("put the member in a second team", 400),
        ("delete the queue", 400),
        ("narrow the token to another team", 400),  # "your token reaches none"
        ("make the user staff", 400),  # staff see every team: "say which"
        ("let the token expire", 401),
    ],
)
def test_a_remembered_grant_never_outlives_a_change(change, status, cluster, personas):
    api = bearer(personas.member_a)
    assert api.post(JOBS, job_body()).status_code == 201  # the grant is remembered now
    token = ApiToken.objects.latest("pk")
    membership = Membership.objects.get(user=personas.member_a, team=cluster.team_a)
    if change == "revoke the token":
        token.revoked_at = timezone.now()
        token.save()
    elif change == "deactivate the user":
        personas.member_a.is_active = False
        personas.member_a.save()
    elif change == "make the member a viewer":
        membership.role = Membership.Role.VIEWER
        membership.save()
    elif change == "take the member out of the team":
        membership.delete()
    elif change == "lower the queue's run-time limit":
        Queue.objects.filter(pk=cluster.queue_a.pk).update(
            max_runtime_seconds=1800, default_runtime_seconds=1800
        )
    elif change == "put the member in a second team":
        Membership.objects.create(user=personas.member_a, team=cluster.team_b, role="member")
    elif change == "delete the queue":
        Job.objects.all().delete()
        Queue.objects.filter(pk=cluster.queue_a.pk).delete()
    elif change == "narrow the token to another team":
        token.teams.set([cluster.team_b])
    elif change == "make the user staff":
        personas.member_a.is_staff = True
        personas.member_a.save()
    elif change == "let the token expire":
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()

    response = api.post(JOBS, job_body())

    assert response.status_code == status, response.content
    assert Job.objects.filter(name="train-llm").count() == (
        0 if change == "delete the queue" else 1
    )


@pytest.mark.parametrize("change", ["give the token to another user", "rename the user"])
def test_a_job_is_stored_for_whoever_holds_the_token_now(change, cluster, personas):
    api = bearer(personas.member_a)
    assert api.post(JOBS, job_body()).status_code == 201  # the grant is remembered now
    token = ApiToken.objects.latest("pk")
    if change == "give the token to another user":
        token.user = personas.lead_a  # a member of the same team
        token.save()
        owner, team = "lead_a", "alpha"
    else:
        personas.member_a.username = "member_a2"
        personas.member_a.save()
        owner, team = "member_a2", "alpha"

    response = api.post(JOBS, job_body(name="second"))

    assert response.status_code == 201, response.content
    assert (response.json()["submitted_by"], response.json()["team"]) == (owner, team)
    job = Job.objects.get(name="second")
    assert (job.submitted_by.username, job.team.slug) == (owner, team)


def test_a_request_handed_over_counts_once_against_the_throttle(as_member_a, settings):
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "3/day", "login": "10/min"}
    }
    too_long = job_body(max_runtime_seconds=10**6)  # counted, then refused by the full view

    statuses = [as_member_a.post(JOBS, too_long).status_code for _ in range(3)]
    statuses.append(as_member_a.post(JOBS, job_body()).status_code)

    assert statuses == [400, 400, 400, 429]
    assert Job.objects.count() == 0


def test_submissions_are_throttled_per_token_on_the_fast_path(personas, settings):
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "2/day", "login": "10/min"}
    }
    busy, other = bearer(personas.member_a), bearer(personas.member_a)

    assert [busy.post(JOBS, job_body()).status_code for _ in range(3)] == [201, 201, 429]
    assert other.post(JOBS, job_body()).status_code == 201
    assert Job.objects.count() == 3

"""POST /api/v1/jobs/, the one handler of a single submission (api/views/submit.py):
what it answers to plain and awkward requests, that it stores a job in one
statement once it knows the grant, and that what it remembers never outlives a
change in the database."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework import serializers

from portal.api.serializers import JobReceiptSerializer
from portal.core.actions.tokens import rescope_api_token
from portal.core.models import ApiToken, Job, JobEvent, Membership, Queue
from tests.api.conftest import Api, bearer, error_of, job_body, submit
from tests.factories import make_user

JOBS = "/api/v1/jobs/"
DEEP = b"[" * 950 + b"]" * 950  # about 2 KB: Python's decoder runs out of stack on it
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="grants are remembered on PostgreSQL only"
)


def bearer_of(plaintext: str, scheme: str = "Bearer ") -> Api:
    return Api(Client(), {"Authorization": f"{scheme}{plaintext}"})


def _post(api, body, headers):
    if isinstance(body, bytes):
        return api.client.post(
            JOBS, body, content_type="application/json", headers=api.headers | headers
        )
    return api.post(JOBS, body, **headers)


def _scenarios(cluster, personas):
    """(name, client, body or raw bytes, extra headers, status, error code or None)."""
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
    nbsp = bearer_of(member.headers["Authorization"].split()[1], "Bearer\xa0")
    return [
        ("plain", member, job_body(), {}, 201, None),
        ("team named", member, job_body(team="alpha"), {}, 201, None),
        ("lead", lead, job_body(priority=5, preemptible=False, env={"SEED": "2"}), {}, 201, None),
        ("another team's slug", member, job_body(team="beta"), {}, 404, "not_found"),
        ("unknown queue", member, job_body(queue="nope"), {}, 400, "invalid"),
        ("unknown flavor", member, job_body(flavor="tpu"), {}, 400, "invalid"),
        ("gang too big", member, job_body(workers=9, gpus_per_worker=8), {}, 400, "invalid"),
        ("runtime above the queue's", member, job_body(max_runtime_seconds=10**6), {}, 400, "invalid"),
        ("unknown field", member, job_body(colour="red"), {}, 400, "invalid"),
        ("number as text", member, job_body(workers="2"), {}, 400, "invalid"),
        ("float for a number", member, job_body(workers=1.0), {}, 400, "invalid"),
        ("text for a boolean", member, job_body(preemptible="yes"), {}, 400, "invalid"),
        ("number for a boolean", member, job_body(preemptible=1), {}, 400, "invalid"),
        ("missing name", member, job_body(name=None), {}, 400, "invalid"),
        ("viewer", viewer, job_body(), {}, 403, "permission_denied"),
        ("revoked token", revoked, job_body(), {}, 401, "authentication_failed"),
        ("expired token", expired, job_body(), {}, 401, "authentication_failed"),
        ("scoped token, other team", scoped_b, job_body(team="alpha"), {}, 404, "not_found"),
        ("staff", staff, job_body(team="alpha"), {}, 201, None),
        ("garbage token", bearer_of("bat_nope"), job_body(), {}, 401, "authentication_failed"),
        ("no credentials", Api(Client()), job_body(), {}, 401, "not_authenticated"),
        ("no credentials, deep body", Api(Client()), DEEP, {}, 401, "not_authenticated"),
        ("deep body", member, DEEP, {}, 400, "parse_error"),
        ("deep value", member, b'{"name": ' + DEEP + b"}", {}, 400, "parse_error"),
        ("not JSON", member, b"{nope", {}, 400, "parse_error"),
        ("NaN", member, b'{"name": NaN}', {}, 400, "parse_error"),
        ("an array", member, b"[1, 2]", {}, 400, "invalid"),
        ("escaped text", member, json.dumps(job_body(command=["echo", "caf\u00e9"])).encode(), {}, 201, None),
        ("lone surrogate", member, b'{"name": "\\ud800"}', {}, 400, "parse_error"),
        ("asks for HTML", member, job_body(), {"Accept": "text/html"}, 406, "not_acceptable"),
        ("empty Accept", member, job_body(), {"Accept": ""}, 406, "not_acceptable"),
        ("Accept with a charset", member, job_body(), {"Accept": "application/json; charset=utf-8"}, 201, None),
        ("UTF-8 byte order mark", member, b"\xef\xbb\xbf" + json.dumps(job_body()).encode(), {}, 400, "parse_error"),
        ("UTF-16", member, json.dumps(job_body()).encode("utf-16"), {}, 400, "parse_error"),
        (
            "line separator, unescaped",
            member,
            json.dumps(job_body(command=["echo", "a\u2028b"]), ensure_ascii=False).encode(),
            {},
            201,
            None,
        ),
        ("no-break space after Bearer", nbsp, job_body(), {}, 401, "not_authenticated"),
        ("overlong key", member, job_body(), {"Idempotency-Key": "k" * 201}, 400, "invalid"),
    ]  # fmt: skip


def test_every_request_gets_its_answer_and_only_a_201_stores_a_job(cluster, personas):
    wrong = []
    for name, api, body, headers, status, code in _scenarios(cluster, personas):
        before = Job.objects.count()
        response = _post(api, body, headers)
        stored = Job.objects.count() - before
        if status >= 400:
            got = (response.status_code, response.json().get("error", {}).get("code"), stored)
            if got != (status, code, 0):
                wrong.append((name, got, response.content[:300]))
            else:
                error_of(response, status, code)
        elif (response.status_code, stored) != (201, 1):
            wrong.append((name, response.status_code, response.content[:300]))
        else:
            assert response["Location"] == f"/api/v1/jobs/{response.json()['id']}/"
        if response.status_code == 401:
            assert response["WWW-Authenticate"] == 'Bearer realm="berth"', name
        assert response["Allow"] == "GET, POST, HEAD, OPTIONS", name
    assert [w[:2] for w in wrong] == [], [w[:2] for w in wrong]


def test_the_receipt_is_what_drf_would_write(cluster, personas):
    job = submit(cluster.team_a, personas.member_a, env={"A": "1"})
    job.idempotency_key = "key-1"
    for who in (personas.member_a, None):
        job.submitted_by = who
        receipt = JobReceiptSerializer()
        assert receipt.to_representation(job) == serializers.Serializer.to_representation(
            receipt, job
        )


@on_postgresql
def test_a_plain_submission_is_stored_by_one_statement_once_the_grant_is_known(
    as_member_a, django_assert_num_queries
):
    as_member_a.post(JOBS, job_body())  # finds the token, team and queue; remembers them

    with django_assert_num_queries(1):  # the insert, which re-checks the grant
        response = as_member_a.post(JOBS, job_body(name="second"))

    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.name, job.state) == ("second", "pending")
    assert JobEvent.objects.filter(job=job, kind="submitted").count() == 1


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
    elif change == "narrow the token to another team":  # as the admin does
        token.teams.set([cluster.team_b])
        rescope_api_token(token, acting_user=None)
    elif change == "make the user staff":
        personas.member_a.is_staff = True
        personas.member_a.save()
    elif change == "let the token expire":
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()

    response = api.post(JOBS, job_body())
    invalid_now = api.post(JOBS, job_body(workers=0))  # a refusal, not from memory either

    assert response.status_code == status, response.content
    assert invalid_now.status_code == status, invalid_now.content
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
        owner = "lead_a"
    else:
        personas.member_a.username = "member_a2"
        personas.member_a.save()
        owner = "member_a2"

    response = api.post(JOBS, job_body(name="second"))

    assert response.status_code == 201, response.content
    assert (response.json()["submitted_by"], response.json()["team"]) == (owner, "alpha")
    job = Job.objects.get(name="second")
    assert (job.submitted_by.username, job.team.slug) == (owner, "alpha")


def test_a_refused_request_counts_once_against_the_throttle(as_member_a, settings):
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "3/day", "login": "10/min"}
    }
    too_long = job_body(max_runtime_seconds=10**6)

    statuses = [as_member_a.post(JOBS, too_long).status_code for _ in range(3)]
    last = as_member_a.post(JOBS, job_body())

    assert statuses + [last.status_code] == [400, 400, 400, 429]
    assert int(error_of(last, 429, "throttled") and last["Retry-After"]) > 0
    assert Job.objects.count() == 0


@on_postgresql
def test_the_insert_is_not_parsed_again_on_every_submission(as_member_a, monkeypatch):
    """psycopg caches a statement's parsing only within 50 parameters and 4 KB of text;
    one more parameter in the guarded insert cost ~10% of a submission's CPU."""
    from psycopg import _queries

    as_member_a.post(JOBS, job_body())  # the grant is remembered now
    parsed = []
    uncached = _queries._query2pg_nocache
    monkeypatch.setattr(
        _queries, "_query2pg_nocache", lambda *a: parsed.append(a[0][:40]) or uncached(*a)
    )

    assert as_member_a.post(JOBS, job_body(name="second")).status_code == 201
    assert parsed == []

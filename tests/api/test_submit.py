"""Submitting jobs: what is accepted, what is refused and why, idempotent retries,
backpressure, and that an accepted job is really stored."""

from __future__ import annotations

import os
import uuid

import pytest
from django.core.cache import caches
from django.db import connection

from portal.cache import RedisCache
from portal.core import counters, lookups
from portal.core.counters import hit as _hit
from portal.core.models import Job, JobEvent, Membership, Node, Quota
from tests.api.conftest import bearer, error_of, job_body, submit
from tests.factories import other_connection

JOBS = "/api/v1/jobs/"


def test_member_submits_a_job_and_gets_a_receipt(as_member_a, personas, cluster):
    response = as_member_a.post(JOBS, job_body(team="alpha", env={"SEED": "1"}))

    assert response.status_code == 201, response.content
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    assert response["Location"] == f"/api/v1/jobs/{job.pk}/"
    assert body["team"] == "alpha" and body["queue"] == "default"
    assert body["submitted_by"] == "member_a"
    assert (body["workers"], body["gpus_per_worker"], body["gpus"]) == (1, 8, 8)
    assert body["env"] == {"SEED": "1"}
    assert body["priority"] == cluster.queue_a.default_priority  # the queue's default
    assert (job.state, job.reason_code, job.submitted_by) == ("pending", "new", personas.member_a)
    assert JobEvent.objects.filter(job=job, kind="submitted").count() == 1


def test_team_may_be_left_out_when_the_caller_has_only_one(as_member_a):
    response = as_member_a.post(JOBS, job_body())
    assert response.status_code == 201, response.content
    assert response.json()["team"] == "alpha"


def test_team_must_be_named_by_someone_in_two_teams(personas, cluster):
    Membership.objects.create(user=personas.member_a, team=cluster.team_b, role="member")
    api = bearer(personas.member_a)

    error = error_of(api.post(JOBS, job_body()), 400, "invalid")
    assert "several teams" in error["fields"]["team"][0]
    # A token scoped to one team needs no team name.
    scoped = bearer(personas.member_a, teams=[cluster.team_b])
    assert scoped.post(JOBS, job_body()).json()["team"] == "beta"


def test_field_errors_are_all_reported_at_once(as_lead_a):
    response = as_lead_a.post(
        JOBS,
        job_body(
            flavor="h200-141gb",
            queue="nightly",
            env={"CUDA_VISIBLE_DEVICES": "0", "bad name": "x"},
            checkpoint_signal="SIGNOPE",
        ),
    )

    error = error_of(response, 400, "invalid")
    assert set(error["fields"]) >= {"flavor", "queue", "env", "checkpoint_signal"}
    assert "h100-80gb" in error["fields"]["flavor"][0]  # names the known flavors
    assert "default" in error["fields"]["queue"][0]  # and the team's queues
    assert "flavor" in error["message"]
    assert not Job.objects.exists()


def test_a_gang_bigger_than_the_team_could_ever_get_is_refused(as_lead_a):
    # alpha: 16 h100 nominal + 16 it may borrow from beta = 32 at most.
    error = error_of(as_lead_a.post(JOBS, job_body(workers=5, gpus_per_worker=8)), 400)
    assert any("at most 32" in m for m in error["fields"]["workers"])
    error = error_of(as_lead_a.post(JOBS, job_body(gpus_per_worker=9)), 400)
    assert "largest has 8" in error["fields"]["gpus_per_worker"][0]


def test_a_gang_no_topology_domain_can_host_is_refused(as_lead_a, cluster):
    # h100: blocks b1 and b2 of two 8-GPU nodes each; alpha could get 32 GPUs of quota.
    error = error_of(as_lead_a.post(JOBS, job_body(workers=3, gpus_per_worker=8)), 400)
    (why,) = error["fields"]["workers"]
    assert why.startswith("The largest gang of 8-GPU workers the h100-80gb nodes can host is 2")
    assert "inside one block" in why and "block b1" in why
    assert not Job.objects.exists()
    # The same GPUs as smaller workers fit: 3 x 4 on the two nodes of one block.
    assert as_lead_a.post(JOBS, job_body(workers=3, gpus_per_worker=4)).status_code == 201


def test_runtime_above_the_queue_limit_is_refused(as_lead_a):
    error = error_of(as_lead_a.post(JOBS, job_body(max_runtime_seconds=25 * 3600)), 400)
    assert "86400" in error["fields"]["max_runtime_seconds"][0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpu_per_worker": 2}, "gpu_per_worker"),  # a typo must not silently default
        ({"workers": "many"}, "workers"),
        ({"workers": 0}, "workers"),
        ({"command": "python train.py"}, "command"),
        ({"command": []}, "command"),
        ({"env": {"A": 1}}, "env.A"),
        ({"priority": 5000}, "priority"),
        ({"name": None, "image": None}, "name"),
        ({"flavor": "h100-80gb\n"}, "flavor"),  # not quietly stripped to a valid slug
        ({"env": {"FOO\n": "x"}}, "env"),
    ],
)
def test_malformed_fields_are_named(as_lead_a, change, field):
    body = job_body() | change
    body = {k: v for k, v in body.items() if v is not None}
    error = error_of(as_lead_a.post(JOBS, body), 400, "invalid")
    assert field in error["fields"], error


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "code"),
    [
        ("{not json", "application/json", 400, "parse_error"),
        ('{"name": "\\ud800"}', "application/json", 400, "parse_error"),
        ("[1, 2]", "application/json", 400, "invalid"),
        ("name=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ],
)
def test_unreadable_bodies_answer_in_the_error_format(as_lead_a, raw, content_type, status, code):
    response = as_lead_a.client.post(
        JOBS, raw, content_type=content_type, headers=as_lead_a.headers
    )
    error_of(response, status, code)


def test_viewer_may_not_submit(as_viewer_a):
    error_of(as_viewer_a.post(JOBS, job_body(team="alpha")), 403, "permission_denied")
    assert not Job.objects.exists()


def test_outsider_cannot_submit_to_another_team_and_cannot_tell_it_exists(as_lead_b):
    to_alpha = as_lead_b.post(JOBS, job_body(team="alpha"))
    to_nowhere = as_lead_b.post(JOBS, job_body(team="no-such-team"))
    assert error_of(to_alpha, 404) == error_of(to_nowhere, 404)
    assert not Job.objects.exists()


def test_scoped_token_cannot_submit_outside_its_scope(personas, cluster):
    Membership.objects.create(user=personas.lead_b, team=cluster.team_a, role="lead")
    beta_only = bearer(personas.lead_b, teams=[cluster.team_b])
    error_of(beta_only.post(JOBS, job_body(team="alpha")), 404, "not_found")


# --- idempotency -------------------------------------------------------------------


def test_a_retry_with_the_same_key_returns_the_same_job(as_member_a):
    first = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "ci-run-77"})
    again = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "ci-run-77"})

    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Job.objects.count() == 1


def test_the_replay_body_stays_the_same_after_the_job_moved_on(as_member_a):
    first = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k1"})
    as_member_a.post(f"{JOBS}{first.json()['id']}/cancel/")
    again = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k1"})
    assert again.content == first.content


def test_the_same_key_with_another_body_is_a_conflict(as_member_a):
    as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k2"})
    error = error_of(
        as_member_a.post(JOBS, job_body(workers=2), **{"Idempotency-Key": "k2"}),
        409,
        "idempotency_conflict",
    )
    assert "Idempotency-Key" in error["fields"]
    assert Job.objects.count() == 1


def test_keys_belong_to_a_team(as_lead_a, as_lead_b):
    a = as_lead_a.post(JOBS, job_body(), **{"Idempotency-Key": "nightly"})
    b = as_lead_b.post(JOBS, job_body(), **{"Idempotency-Key": "nightly"})
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]


def test_an_overlong_key_is_refused(as_member_a):
    response = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k" * 201})
    assert "Idempotency-Key" in error_of(response, 400, "invalid")["fields"]


# --- backpressure and throttling -----------------------------------------------------


def test_a_full_queue_answers_429_with_retry_after(as_member_a, cluster):
    cluster.queue_a.max_pending_jobs = 2
    cluster.queue_a.save()
    for _ in range(2):
        assert as_member_a.post(JOBS, job_body()).status_code == 201

    response = as_member_a.post(JOBS, job_body())

    error = error_of(response, 429, "queue_full")
    assert int(response["Retry-After"]) > 0
    assert "alpha/default" in error["message"]
    assert Job.objects.count() == 2


def test_a_replay_is_answered_even_when_the_queue_is_full(as_member_a, cluster):
    cluster.queue_a.max_pending_jobs = 1
    cluster.queue_a.save()
    first = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k"})
    again = as_member_a.post(JOBS, job_body(), **{"Idempotency-Key": "k"})
    assert (first.status_code, again.status_code) == (201, 200)


def test_each_token_is_throttled_on_its_own(personas, settings):
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "3/min", "login": "10/min"}
    }
    busy, other = bearer(personas.lead_a), bearer(personas.lead_a)
    statuses = [busy.get("/api/v1/me/").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]
    response = busy.get("/api/v1/me/")
    error_of(response, 429, "throttled")
    assert 0 < int(response["Retry-After"]) <= 60
    assert other.get("/api/v1/me/").status_code == 200


@pytest.mark.skipif(not isinstance(caches["default"], RedisCache), reason="needs Redis (make test)")
def test_a_throttle_window_expires_and_counts_on_after_redis_forgets_the_script():
    backend = caches["default"]
    assert isinstance(backend, RedisCache)  # the path production takes
    key = f"berth:test-window:{uuid.uuid4()}"
    redis_key = backend.make_and_validate_key(key)
    client = backend._cache.get_client(redis_key, write=True)
    client.script_flush()  # as after a Redis restart: the first hit loads the script

    assert [_hit(key, 60) for _ in range(3)] == [1, 2, 3]
    assert 0 < client.ttl(redis_key) <= 61  # the window's counter goes away after it
    client.script_flush()
    assert _hit(key, 60) == 4
    client.delete(redis_key)


@pytest.mark.skipif(not isinstance(caches["default"], RedisCache), reason="needs Redis (make test)")
def test_a_counter_key_is_counted_whatever_its_characters():
    key = f"berth:test-window:{uuid.uuid4()}:ünïcode-名前"  # a login throttle's account name
    assert [_hit(key, 60) for _ in range(2)] == [1, 2]
    assert caches["default"].get(key) == 2
    caches["default"].delete(key)


@pytest.mark.skipif(not isinstance(caches["default"], RedisCache), reason="needs Redis (make test)")
def test_the_throttle_counts_on_after_redis_drops_its_connection():
    """Each thread counts on a connection of its own (counters._LINK); Redis closing it
    (a restart, a timeout) costs one reconnect, not a count."""
    backend = caches["default"]
    key = f"berth:test-window:{uuid.uuid4()}"
    redis_key = backend.make_key(key)
    client = backend._cache.get_client(redis_key, write=True)
    assert _hit(key, 60) == 1
    own = counters._LINK.connection
    own.send_command("CLIENT", "ID")
    client.execute_command("CLIENT", "KILL", "ID", own.read_response())  # only this one

    assert [_hit(key, 60) for _ in range(2)] == [2, 3]
    client.delete(redis_key)


@pytest.mark.skipif(not isinstance(caches["default"], RedisCache), reason="needs Redis (make test)")
def test_the_throttle_lets_requests_through_while_redis_is_away(monkeypatch, as_member_a):
    import redis

    pool = caches["default"]._cache._get_connection_pool(write=True)
    away = redis.Connection(host="127.0.0.1", port=1, socket_connect_timeout=1)  # nothing there
    monkeypatch.setattr(counters._LINK, "connection", away)
    monkeypatch.setattr(counters._LINK, "pool", pool)
    monkeypatch.setattr(counters._LINK, "pid", os.getpid())

    with pytest.raises(redis.ConnectionError):
        _hit(f"berth:test-window:{uuid.uuid4()}", 60)
    response = as_member_a.post(JOBS, job_body())

    assert response.status_code == 201, response.content


# --- durability -------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a second PostgreSQL connection")
@pytest.mark.django_db(transaction=True)
def test_an_accepted_job_is_committed_before_the_response(cluster):
    # A second connection sees only committed rows: if the 201 came before the
    # COMMIT (or the commit failed after it), this lookup would find nothing.
    api = bearer(cluster.personas.member_a)

    response = api.post(JOBS, job_body())

    assert response.status_code == 201
    with other_connection() as other:
        row = other.execute(
            "SELECT state, name FROM core_job WHERE id = %s", [response.json()["id"]]
        ).fetchone()
    assert row == ("pending", "train-llm")


def test_quota_changes_count_once_the_remembered_facts_expire(as_lead_a, cluster, monkeypatch):
    from portal.core import lookups
    from portal.core.models import Node, Quota
    from tests.factories import make_node

    # One block of five 8-GPU nodes, so only the quota limits a 5 x 8 gang.
    Node.objects.filter(flavor=cluster.h100).update(block="b1")
    make_node("h100-4", cluster.h100, block="b1")
    big = job_body(workers=5, gpus_per_worker=8)  # 40 GPUs; alpha can get 32
    error_of(as_lead_a.post(JOBS, big), 400)
    Quota.objects.filter(team=cluster.team_a, flavor=cluster.h100).update(nominal=24)

    error_of(as_lead_a.post(JOBS, big), 400)  # within FACT_TTL_S: the old ceiling
    monkeypatch.setattr(lookups, "FACT_TTL_S", 0.0)
    lookups.forget()
    assert as_lead_a.post(JOBS, big).status_code == 201  # 24 + 16 borrowable = 40


def test_a_submission_costs_a_fixed_number_of_queries(
    as_member_a, cluster, personas, django_assert_max_num_queries
):
    for _ in range(20):  # however many jobs the queue holds already
        submit(cluster.team_a, personas.lead_a)
    as_member_a.post(JOBS, job_body())  # the token's first use; grant and facts remembered

    # One statement: it checks the queue's room, re-checks the remembered grant and
    # inserts the job and its event (PostgreSQL). On SQLite, where nothing is
    # remembered: the token, the team, the role, the queue, then the room check, the
    # job and its event inside a savepoint (9 statements).
    with django_assert_max_num_queries(1 if connection.vendor == "postgresql" else 9):
        assert as_member_a.post(JOBS, job_body()).status_code == 201


def test_the_flavor_may_be_left_out_only_where_the_cluster_has_one(as_lead_a, cluster):
    body = job_body()
    del body["flavor"]

    error = error_of(as_lead_a.post(JOBS, body), 400, "invalid")
    assert error["fields"]["flavor"] == ["This field is required (flavors: a100-40gb, h100-80gb)."]
    assert not Job.objects.exists()

    Quota.objects.filter(flavor=cluster.a100).delete()
    Node.objects.filter(flavor=cluster.a100).delete()
    cluster.a100.delete()  # now h100-80gb is the cluster's only flavor
    lookups.forget()  # as FACT_TTL_S later
    response = as_lead_a.post(JOBS, body)
    assert response.status_code == 201, response.content
    assert response.json()["flavor"] == "h100-80gb"

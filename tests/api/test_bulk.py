"""Bulk submit for array-style sweeps: all the jobs or none."""

from __future__ import annotations

from portal.core.models import Job, JobEvent
from tests.api.conftest import error_of, job_body

BULK = "/api/v1/jobs/bulk/"


def sweep(n: int, **overrides) -> list[dict]:
    return [job_body(name=f"lr-{i}", env={"LR": f"1e-{i}"}, **overrides) for i in range(n)]


def ids_in_order(ids: list[int]) -> bool:
    """The response lists the ids in the order of the request's jobs."""
    names = dict(Job.objects.filter(pk__in=ids).values_list("pk", "name"))
    return [names[pk] for pk in ids] == [f"lr-{i}" for i in range(len(ids))]


def test_a_sweep_is_submitted_in_one_request(as_member_a):
    response = as_member_a.post(BULK, {"team": "alpha", "jobs": sweep(20, gpus_per_worker=1)})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["team"] == "alpha" and body["count"] == 20
    jobs = Job.objects.filter(pk__in=body["ids"]).order_by("pk")
    assert [j.name for j in jobs] == [f"lr-{i}" for i in range(20)]
    assert JobEvent.objects.filter(job__in=jobs, kind="submitted").count() == 20
    # every column as a single submission stores it (the bulk insert writes arrays
    # from rows and defaults, the single one from a model instance)
    single = as_member_a.post("/api/v1/jobs/", job_body(name="one", gpus_per_worker=1)).json()
    one = Job.objects.get(pk=single["id"])
    differ = {"id", "name", "env", "submitted_at"}
    columns = [f.attname for f in Job._meta.concrete_fields if f.name not in differ]
    for i, job in enumerate(jobs):
        assert job.env == {"LR": f"1e-{i}"}
        assert {c: getattr(job, c) for c in columns} == {c: getattr(one, c) for c in columns}
    assert {j.submitted_at for j in jobs} == {jobs[0].submitted_at}  # one request, one time
    events = JobEvent.objects.filter(kind="submitted")
    first, single_event = events.get(job=jobs[0]), events.get(job=one)
    shared = [
        f.attname for f in JobEvent._meta.concrete_fields if f.name not in ("id", "job", "at")
    ]
    assert {c: getattr(first, c) for c in shared} == {c: getattr(single_event, c) for c in shared}
    assert first.at == jobs[0].submitted_at
    assert ids_in_order(body["ids"])


def test_one_bad_job_refuses_the_whole_sweep_with_indexed_errors(as_member_a):
    jobs = sweep(5)
    jobs[1]["flavor"] = "tpu-v5"
    jobs[3]["workers"] = 0
    jobs[4]["gpus_per_worker"] = 9

    error = error_of(as_member_a.post(BULK, {"jobs": jobs}), 400, "invalid")

    assert set(error["fields"]) == {"jobs[1].flavor", "jobs[3].workers", "jobs[4].gpus_per_worker"}
    assert not Job.objects.exists()


def test_a_sweep_that_would_overfill_the_queue_now_is_refused_whole(as_member_a, cluster):
    cluster.queue_a.max_pending_jobs = 10
    cluster.queue_a.save()
    assert as_member_a.post(BULK, {"jobs": sweep(6)}).status_code == 201

    response = as_member_a.post(BULK, {"jobs": sweep(5)})

    error_of(response, 429, "queue_full")
    assert int(response["Retry-After"]) > 0
    assert Job.objects.count() == 6


def test_a_sweep_larger_than_the_queue_could_ever_hold_is_a_400(as_member_a, cluster):
    cluster.queue_a.max_pending_jobs = 10
    cluster.queue_a.save()

    error = error_of(as_member_a.post(BULK, {"jobs": sweep(11)}), 400, "invalid")

    assert "at most 10 pending jobs" in error["fields"]["jobs"][0], error
    assert not Job.objects.exists()


def test_a_deeply_nested_body_is_a_parse_error(as_member_a):
    deep = b'{"jobs": ' + b"[" * 950 + b"]" * 950 + b"}"
    response = as_member_a.client.post(
        BULK, deep, content_type="application/json", headers=as_member_a.headers
    )
    assert "Nested deeper" in error_of(response, 400, "parse_error")["message"]


def test_an_empty_sweep_and_unknown_fields_are_refused(as_member_a):
    assert "jobs" in error_of(as_member_a.post(BULK, {"jobs": []}), 400)["fields"]
    error = error_of(as_member_a.post(BULK, {"jobs": [job_body(team="alpha")]}), 400)
    assert "jobs[0].team" in error["fields"]


def test_viewer_and_outsider_cannot_bulk_submit(as_viewer_a, as_lead_b):
    error_of(as_viewer_a.post(BULK, {"team": "alpha", "jobs": sweep(2)}), 403)
    error_of(as_lead_b.post(BULK, {"team": "alpha", "jobs": sweep(2)}), 404, "not_found")
    assert not Job.objects.exists()


def test_a_retried_sweep_with_the_same_key_returns_the_same_jobs(as_member_a):
    body = {"team": "alpha", "jobs": sweep(3, gpus_per_worker=1)}
    first = as_member_a.post(BULK, body, **{"Idempotency-Key": "ci-sweep-7"})
    again = as_member_a.post(BULK, body, **{"Idempotency-Key": "ci-sweep-7"})

    assert first.status_code == 201 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Job.objects.count() == 3
    assert sorted(Job.objects.values_list("idempotency_key", flat=True)) == [
        "ci-sweep-7#0",
        "ci-sweep-7#1",
        "ci-sweep-7#2",
    ]


def test_the_same_key_with_another_sweep_is_a_conflict(as_member_a):
    as_member_a.post(BULK, {"jobs": sweep(3, gpus_per_worker=1)}, **{"Idempotency-Key": "k"})
    other = as_member_a.post(
        BULK, {"jobs": sweep(4, gpus_per_worker=1)}, **{"Idempotency-Key": "k"}
    )
    error_of(other, 409, "idempotency_conflict")
    assert Job.objects.count() == 3

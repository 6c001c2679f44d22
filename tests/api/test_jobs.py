"""Reading and cancelling jobs: lists scoped to the caller, filters, stable pages,
a job's full story, worker logs, and who may cancel what."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core.models import Job
from tests.api.conftest import bearer, error_of, run_on, submit

JOBS = "/api/v1/jobs/"


@pytest.fixture
def jobs(cluster, personas):
    """Three alpha jobs (two by the member, one by the lead) and one beta job."""
    a, b = cluster.team_a, cluster.team_b
    return {
        "member_1": submit(a, personas.member_a, name="sweep-1"),
        "member_2": submit(a, personas.member_a, name="sweep-2"),
        "lead": submit(a, personas.lead_a, name="eval"),
        "beta": submit(b, personas.lead_b, name="beta-secret"),
    }


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [job["id"] for job in response.json()["results"]]


def test_list_shows_only_the_callers_teams(jobs, as_viewer_a, as_lead_b):
    alpha = ids(as_viewer_a.get(JOBS))
    beta = ids(as_lead_b.get(JOBS))

    assert alpha == [jobs["lead"].pk, jobs["member_2"].pk, jobs["member_1"].pk]  # newest first
    assert beta == [jobs["beta"].pk]


def test_filters(jobs, as_lead_a, personas):
    jobs["lead"].state = Job.State.RUNNING
    jobs["lead"].save(update_fields=["state"])

    assert ids(as_lead_a.get(JOBS, {"state": "running"})) == [jobs["lead"].pk]
    assert len(ids(as_lead_a.get(JOBS, {"state": "pending,running"}))) == 3
    assert ids(as_lead_a.get(JOBS, {"submitted_by": "member_a", "ordering": "submitted_at"})) == [
        jobs["member_1"].pk,
        jobs["member_2"].pk,
    ]
    assert ids(as_lead_a.get(JOBS, {"submitted_by": "me"})) == [jobs["lead"].pk]
    assert ids(as_lead_a.get(JOBS, {"team": "beta"})) == []  # not an error, just nothing
    assert len(ids(as_lead_a.get(JOBS, {"queue": "default", "team": "alpha"}))) == 3
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    assert ids(as_lead_a.get(JOBS, {"since": future})) == []


def test_bad_filters_are_named(as_lead_a, cluster):
    error = error_of(as_lead_a.get(JOBS, {"state": "runing", "since": "yesterday"}), 400)
    assert set(error["fields"]) == {"state", "since"}
    assert "runing" in error["fields"]["state"][0]


def test_pages_are_stable_and_complete(cluster, personas, as_lead_a):
    created = [submit(cluster.team_a, personas.lead_a, name=f"j{i}").pk for i in range(7)]
    # Same submit time for all: the id breaks the tie, so pages neither overlap nor skip.
    Job.objects.update(submitted_at=timezone.now())

    seen, url, params = [], JOBS, {"limit": 3}
    while url:
        body = as_lead_a.get(url, params).json()
        seen += [job["id"] for job in body["results"]]
        url, params = body["next"], None
        assert body["count"] == 7
    assert seen == sorted(created, reverse=True)


def test_queue_ordering_puts_running_first_then_pending_by_position(cluster, personas, as_lead_a):
    a = [submit(cluster.team_a, personas.lead_a, name=f"q{i}") for i in range(3)]
    Job.objects.filter(pk=a[0].pk).update(queue_position=2)
    Job.objects.filter(pk=a[1].pk).update(queue_position=1)
    run_on(a[2], cluster.nodes[0])

    assert ids(as_lead_a.get(JOBS, {"ordering": "queue"})) == [a[2].pk, a[1].pk, a[0].pk]


def test_list_queries_do_not_grow_with_the_number_of_jobs(
    cluster, personas, as_lead_a, django_assert_max_num_queries
):
    for i in range(30):
        job = submit(cluster.team_a, personas.member_a if i % 2 else personas.lead_a)
        if i % 10 == 0:
            run_on(job, cluster.nodes[i // 10])
    as_lead_a.get("/api/v1/me/")  # the token's first use records last_used_at

    with django_assert_max_num_queries(4):  # token, scope, count, page
        response = as_lead_a.get(JOBS, {"limit": 100})
    assert response.json()["count"] == 30


def test_detail_tells_the_whole_story(cluster, personas, as_member_a):
    job = submit(cluster.team_a, personas.member_a, workers=2, gpus_per_worker=4)
    Job.objects.filter(pk=job.pk).update(
        reason_code="quota", reason="Team uses 16 of 16 h100.", queue_position=3
    )
    job = run_on(job, cluster.nodes[1])

    body = as_member_a.get(f"{JOBS}{job.pk}/").json()

    assert body["state"] == "running"
    assert body["command"] == ["python", "train.py", "--epochs", "3"]
    assert [(a["rank"], a["node"]) for a in body["allocations"]] == [(0, "h100-1")] * 4 + [
        (1, "h100-1")
    ] * 4
    assert body["allocations"][0]["gpu_uuid"] == "GPU-h100-1-0"
    assert [r["rank"] for r in body["ranks"]] == [0, 1]
    assert [e["kind"] for e in body["events"]] == ["submitted", "admitted"]
    assert body["events"][0]["actor"] == "member_a"


def test_pending_detail_has_reason_position_and_estimate(cluster, personas, as_viewer_a):
    job = submit(cluster.team_a, personas.member_a)
    start = timezone.now() + timedelta(minutes=20)
    Job.objects.filter(pk=job.pk).update(
        reason_code="no_capacity",
        reason="Not enough GPUs of its flavor are free.",
        queue_position=2,
        estimated_start_at=start,
    )

    body = as_viewer_a.get(f"{JOBS}{job.pk}/").json()

    assert (body["state"], body["reason_code"], body["position"]) == ("pending", "no_capacity", 2)
    assert body["estimated_start"].startswith(start.strftime("%Y-%m-%dT%H:%M"))
    assert body["allocations"] == [] and body["ranks"] == []


def test_other_teams_jobs_are_not_found(jobs, as_lead_a):
    beta = jobs["beta"].pk
    for path in (f"{JOBS}{beta}/", f"{JOBS}{beta}/logs/"):
        assert error_of(as_lead_a.get(path), 404) == error_of(as_lead_a.get(f"{JOBS}999999/"), 404)
    error_of(as_lead_a.post(f"{JOBS}{beta}/cancel/"), 404, "not_found")
    assert Job.objects.get(pk=beta).state == "pending"


def test_logs_are_the_latest_attempts_tails_per_rank(cluster, personas, as_member_a):
    job = run_on(
        submit(cluster.team_a, personas.member_a, workers=2, gpus_per_worker=4),
        cluster.nodes[0],
        log="epoch 1 loss 2.31\n",
    )

    body = as_member_a.get(f"{JOBS}{job.pk}/logs/").json()

    assert body["attempt"] == 0
    assert [(w["rank"], w["node"], w["log_tail"]) for w in body["workers"]] == [
        (0, "h100-0", "epoch 1 loss 2.31\n"),
        (1, "h100-0", "epoch 1 loss 2.31\n"),
    ]
    assert as_member_a.get(f"{JOBS}{job.pk}/logs/", {"attempt": 4}).json()["workers"] == []
    error_of(as_member_a.get(f"{JOBS}{job.pk}/logs/", {"attempt": "x"}), 400)


def test_logs_of_a_job_that_never_ran_are_empty(cluster, personas, as_member_a):
    job = submit(cluster.team_a, personas.member_a)
    assert as_member_a.get(f"{JOBS}{job.pk}/logs/").json() == {
        "job": job.pk,
        "attempt": None,
        "workers": [],
    }


# --- cancel ------------------------------------------------------------------------


def test_member_cancels_own_job(jobs, as_member_a):
    response = as_member_a.post(f"{JOBS}{jobs['member_1'].pk}/cancel/", {"reason": "wrong lr"})

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "cancelled"
    assert response.json()["events"][-1]["message"] == "wrong lr"


def test_member_may_not_cancel_the_leads_job_but_the_lead_may_cancel_the_members(
    jobs, as_member_a, as_lead_a
):
    error_of(as_member_a.post(f"{JOBS}{jobs['lead'].pk}/cancel/"), 403, "permission_denied")
    assert as_lead_a.post(f"{JOBS}{jobs['member_1'].pk}/cancel/").status_code == 200


def test_viewer_may_not_cancel(jobs, as_viewer_a):
    error_of(as_viewer_a.post(f"{JOBS}{jobs['member_1'].pk}/cancel/"), 403, "permission_denied")
    assert Job.objects.get(pk=jobs["member_1"].pk).state == "pending"


def test_cancelling_a_finished_job_is_a_conflict(jobs, as_member_a):
    path = f"{JOBS}{jobs['member_1'].pk}/cancel/"
    as_member_a.post(path)
    error = error_of(as_member_a.post(path), 409, "invalid_state")
    assert "cancelled" in error["message"]


def test_cancelling_a_running_job_asks_its_workers_to_stop(cluster, personas, as_lead_a):
    job = run_on(submit(cluster.team_a, personas.member_a), cluster.nodes[0])

    body = as_lead_a.post(f"{JOBS}{job.pk}/cancel/").json()

    assert body["state"] == "cancelled"
    assert Job.objects.get(pk=job.pk).stop_requested_at is not None


def test_scoped_token_sees_only_its_teams(cluster, personas, jobs):
    from portal.core.models import Membership

    Membership.objects.create(user=personas.lead_b, team=cluster.team_a, role="lead")
    beta_only = bearer(personas.lead_b, teams=[cluster.team_b])

    assert ids(beta_only.get(JOBS)) == [jobs["beta"].pk]
    error_of(beta_only.get(f"{JOBS}{jobs['lead'].pk}/"), 404)
    error_of(beta_only.post(f"{JOBS}{jobs['lead'].pk}/cancel/"), 404)

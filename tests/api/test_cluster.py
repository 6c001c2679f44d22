"""Queues, teams (quota, usage, fair share, showback), nodes and /me, each scoped to the caller."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.core.models import Node, Usage
from tests.api.conftest import bearer, error_of, run_on, submit
from tests.factories import make_team


def test_queues_count_pending_and_running_jobs(cluster, personas, as_viewer_a):
    for _ in range(3):
        submit(cluster.team_a, personas.member_a)
    run_on(submit(cluster.team_a, personas.member_a), cluster.nodes[0])
    submit(cluster.team_b, personas.lead_b)

    body = as_viewer_a.get("/api/v1/queues/").json()

    assert [(q["team"], q["name"], q["pending"], q["running"]) for q in body] == [
        ("alpha", "default", 3, 1)
    ]
    assert body[0]["max_pending_jobs"] == cluster.queue_a.max_pending_jobs


def test_queue_list_is_scoped_and_constant_in_queries(
    cluster, personas, as_lead_b, django_assert_max_num_queries
):
    for _ in range(5):
        submit(cluster.team_a, personas.member_a)
    as_lead_b.get("/api/v1/me/")
    with django_assert_max_num_queries(3):
        body = as_lead_b.get("/api/v1/queues/").json()
    assert [(q["team"], q["pending"]) for q in body] == [("beta", 0)]
    assert as_lead_b.get("/api/v1/queues/", {"team": "alpha"}).json() == []


def test_teams_list_only_the_callers_with_their_role(personas, cluster, as_member_a, as_lead_b):
    make_team("gamma")
    assert [(t["slug"], t["role"]) for t in as_member_a.get("/api/v1/teams/").json()] == [
        ("alpha", "member")
    ]
    assert [t["slug"] for t in as_lead_b.get("/api/v1/teams/").json()] == ["beta"]
    staff = [t["slug"] for t in bearer(personas.admin).get("/api/v1/teams/").json()]
    assert staff == ["alpha", "beta", "gamma"]


def test_team_detail_has_quota_usage_fair_share_and_showback(cluster, personas, as_viewer_a):
    Node.objects.filter(flavor=cluster.h100).update(block="b1")  # room for a 3-node gang
    job = submit(cluster.team_a, personas.member_a, workers=3, gpus_per_worker=8)
    run_on(job, *cluster.nodes[:3])
    Usage.objects.create(
        team=cluster.team_a,
        flavor=cluster.h100,
        hour=timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1),
        gpu_seconds=8 * 3600,
    )

    body = as_viewer_a.get("/api/v1/teams/alpha/").json()

    h100 = next(q for q in body["quota"] if q["flavor"] == "h100-80gb")
    assert (h100["nominal"], h100["used"], h100["borrowed"]) == (16, 24, 8)
    assert [s["team"] for s in body["fair_share"]] == ["beta", "alpha"]  # alpha uses more
    assert len(body["gpu_hours_by_day"]) == 30
    assert sum(day.get("h100-80gb", 0) for day in body["gpu_hours_by_day"]) == 8.0
    assert body["jobs"]["running"] == 1
    assert body["role"] == "viewer"


def test_other_teams_are_not_found(as_lead_a):
    assert error_of(as_lead_a.get("/api/v1/teams/beta/"), 404) == error_of(
        as_lead_a.get("/api/v1/teams/nope/"), 404
    )


def test_nodes_show_gpus_but_not_other_teams_jobs(
    cluster, personas, as_lead_a, django_assert_max_num_queries
):
    mine = run_on(submit(cluster.team_a, personas.member_a, name="ours"), cluster.nodes[0])
    run_on(submit(cluster.team_b, personas.lead_b, name="theirs"), cluster.nodes[1])
    as_lead_a.get("/api/v1/me/")

    with django_assert_max_num_queries(6):
        body = as_lead_a.get("/api/v1/nodes/").json()

    assert [n["hostname"] for n in body] == [
        "a100-0", "a100-1", "h100-0", "h100-1", "h100-2", "h100-3"
    ]  # fmt: skip
    h100 = {n["hostname"]: n for n in body}
    ours, theirs = h100["h100-0"]["gpus"][0], h100["h100-1"]["gpus"][0]
    assert (ours["allocated"], ours["job"], ours["job_name"]) == (True, mine.pk, "ours")
    assert (theirs["allocated"], theirs["job"], theirs["job_name"]) == (True, None, None)
    assert "theirs" not in str(body)
    assert h100["h100-2"]["gpus"][0]["allocated"] is False
    assert h100["h100-0"]["state"] == "ready" and len(h100["h100-0"]["gpus"]) == 8


def test_me_tells_who_and_what_the_token_reaches(personas, cluster, as_member_a):
    body = as_member_a.get("/api/v1/me/").json()
    assert body["username"] == "member_a" and body["auth"] == "token"
    assert body["teams"] == [{"slug": "alpha", "name": "Alpha", "role": "member"}]
    assert body["token"]["teams"] is None and "token" not in body["token"]

    scoped = bearer(personas.lead_b, teams=[cluster.team_b]).get("/api/v1/me/").json()
    assert scoped["token"]["teams"] == ["beta"]


def test_team_list_is_constant_in_queries(personas, django_assert_max_num_queries):
    for i in range(5):
        make_team(f"extra-{i}")
    admin = bearer(personas.admin)
    admin.get("/api/v1/me/")
    with django_assert_max_num_queries(4):  # token, scope, teams, roles
        body = admin.get("/api/v1/teams/").json()
    assert len(body) == 7

"""The reclaim backoff in the team detail (`BERTH_RECLAIM_BACKOFF`, docs/api.md): each
flavor whose reclaims still count in a row, with when the team may borrow it again, as
the scheduler computes it; nothing while the rule is off; a stranger learns nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.core.models import ReclaimBackoff
from tests.api.conftest import error_of


@pytest.fixture
def backoff_on(settings):
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}


def _reclaimed(team, flavor, reclaims: int, seconds_ago: float) -> datetime:
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=seconds_ago)
    ReclaimBackoff.objects.create(team=team, flavor=flavor, reclaims=reclaims, last_reclaim_at=at)
    return at


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_team_detail_says_until_when_each_flavor_may_not_be_borrowed(
    cluster, as_member_a, backoff_on
):
    h100_at = _reclaimed(cluster.team_a, cluster.h100, 3, seconds_ago=60)  # 240 s: cooling
    a100_at = _reclaimed(cluster.team_a, cluster.a100, 1, seconds_ago=200)  # 60 s: over

    rows = as_member_a.get("/api/v1/teams/alpha/").json()["reclaim_backoff"]

    assert [(r["flavor"], r["reclaims"]) for r in rows] == [("a100-40gb", 1), ("h100-80gb", 3)]
    a100, h100 = rows
    assert _when(h100["last_reclaim_at"]) == h100_at
    assert _when(h100["may_borrow_from"]) == h100_at + timedelta(seconds=240)
    assert _when(h100["count_resets_after"]) == h100_at + timedelta(seconds=240 + 600)
    # Its cooldown is over, but the next reclaim would still be the 2nd in a row.
    assert _when(a100["may_borrow_from"]) == a100_at + timedelta(seconds=60)
    assert _when(a100["may_borrow_from"]) < timezone.now()
    assert _when(a100["count_resets_after"]) == a100_at + timedelta(seconds=60 + 600)


def test_a_count_that_started_again_is_left_out_and_so_are_other_teams(
    cluster, as_member_a, as_lead_b, backoff_on
):
    _reclaimed(cluster.team_a, cluster.h100, 1, seconds_ago=60 + 600 + 5)  # the count expired
    _reclaimed(cluster.team_b, cluster.a100, 2, seconds_ago=10)

    assert as_member_a.get("/api/v1/teams/alpha/").json()["reclaim_backoff"] == []
    (beta,) = as_lead_b.get("/api/v1/teams/beta/").json()["reclaim_backoff"]
    assert (beta["flavor"], beta["reclaims"]) == ("a100-40gb", 2)


def test_with_the_rule_off_the_list_is_empty(cluster, as_member_a):
    _reclaimed(cluster.team_a, cluster.h100, 3, seconds_ago=60)  # left from when it was on
    assert as_member_a.get("/api/v1/teams/alpha/").json()["reclaim_backoff"] == []


def test_a_stranger_still_gets_the_same_404(cluster, as_lead_b, backoff_on):
    _reclaimed(cluster.team_a, cluster.h100, 3, seconds_ago=60)
    assert error_of(as_lead_b.get("/api/v1/teams/alpha/"), 404) == error_of(
        as_lead_b.get("/api/v1/teams/nope/"), 404
    )


def test_one_query_whatever_the_rows_and_none_while_off(cluster, as_member_a, settings):
    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as ctx:
            assert as_member_a.get("/api/v1/teams/alpha/").status_code == 200
        return [q["sql"] for q in ctx.captured_queries]

    table = ReclaimBackoff._meta.db_table
    _reclaimed(cluster.team_a, cluster.h100, 3, seconds_ago=60)
    queries()  # the token's first use is written once
    off = queries()
    assert not any(table in sql for sql in off)
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}
    one = queries()
    _reclaimed(cluster.team_a, cluster.a100, 2, seconds_ago=60)
    two = queries()
    assert len(one) == len(two) == len(off) + 1
    assert sum(table in sql for sql in two) == 1

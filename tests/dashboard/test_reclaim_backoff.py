"""The overview says which flavors the team may not borrow while its reclaim backoff
lasts (`BERTH_RECLAIM_BACKOFF`), and until when; nothing once it is over or while off."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core.models import ReclaimBackoff
from tests.dashboard.test_pages import PAGES

LINE = re.compile(
    r"May not borrow (\S+) again before <time[^>]*>(?:\d{4}-\d\d-\d\d )?(\d\d:\d\d) UTC</time>"
)


@pytest.fixture
def backoff_on(settings):
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}


def _reclaimed(team, flavor, reclaims: int, seconds_ago: float):
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=seconds_ago)
    ReclaimBackoff.objects.create(team=team, flavor=flavor, reclaims=reclaims, last_reclaim_at=at)
    return at


@pytest.mark.parametrize("url", ["/teams/alpha/", "/teams/alpha/?fragment=live"])
def test_the_overview_says_until_when_the_team_may_not_borrow_a_flavor(
    story, login, backoff_on, url
):
    c = story.cluster
    at = _reclaimed(c.team_a, c.h100, 3, seconds_ago=60)  # 240 s: 180 s to go
    _reclaimed(c.team_a, c.a100, 1, seconds_ago=200)  # 60 s: over, nothing to say

    page = login(c.personas.member_a).get(url).content.decode()

    ends = at + timedelta(seconds=240)
    assert LINE.findall(page) == [("h100-80gb", f"{ends:%H:%M}")]
    assert f'datetime="{ends:%Y-%m-%dT%H:%M:%SZ}"' in page
    assert "reclaimed 3 times in a row" in page
    assert "May not borrow a100-40gb" not in page


def test_a_single_reclaim_reads_once(story, login, backoff_on):
    c = story.cluster
    _reclaimed(c.team_a, c.a100, 1, seconds_ago=10)
    page = login(c.personas.member_a).get("/teams/alpha/").content.decode()
    assert [f for f, _ in LINE.findall(page)] == ["a100-40gb"]
    assert "reclaimed once" in page


def test_nothing_is_said_while_the_rule_is_off_nor_of_another_team(story, login, settings):
    c = story.cluster
    _reclaimed(c.team_a, c.h100, 3, seconds_ago=60)
    assert "May not borrow" not in login(c.personas.member_a).get("/teams/alpha/").content.decode()
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}
    client = login(c.personas.lead_b)
    assert "May not borrow" not in client.get("/teams/beta/").content.decode()
    assert client.get("/teams/alpha/").status_code == 404


@pytest.mark.parametrize("url", ["/teams/alpha/", "/teams/alpha/?fragment=live"])
def test_the_rule_costs_one_query_whatever_the_flavors(
    story, login, backoff_on, django_assert_max_num_queries, url
):
    c = story.cluster
    client = login(c.personas.lead_a)
    client.get("/teams/alpha/")  # the session remembers the team
    _reclaimed(c.team_a, c.h100, 3, seconds_ago=60)
    with django_assert_max_num_queries(PAGES[url] + 1):
        assert client.get(url).status_code == 200
    _reclaimed(c.team_a, c.a100, 2, seconds_ago=10)
    with django_assert_max_num_queries(PAGES[url] + 1):
        assert "May not borrow a100-40gb" in client.get(url).content.decode()

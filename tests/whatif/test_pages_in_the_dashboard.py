"""What-if pages are dashboard pages: navigation, team switcher, the team preselected,
stages while a run works, and results a phone can read (issue 16, item 6)."""

from __future__ import annotations

import pytest

from portal.core.models import Membership
from portal.whatif.models import WhatIfRun
from portal.whatif.replay import Progress, execute
from tests.factories import make_team
from tests.whatif.test_replay import make_run


@pytest.fixture
def lead(cluster, client):
    client.force_login(cluster.personas.lead_b)
    return client


def test_what_if_pages_keep_the_tabs_and_the_team_switcher(cluster, lead):
    lead.get("/teams/beta/queue/")
    page = lead.get("/whatif/").content.decode()
    assert 'aria-label="Switch team"' in page and ">Beta<" in page
    assert 'href="/teams/beta/queue/"' in page  # the tabs of the team she was on
    assert 'aria-current="page"' in page.split("What-if</a>")[0].rsplit("<li>", 1)[1]
    run = make_run(cluster, cluster.personas.lead_b)
    detail = lead.get(f"/whatif/{run.pk}/").content.decode()
    assert 'aria-label="Switch team"' in detail and 'href="/teams/alpha/queue/"' not in detail


def test_the_team_the_lead_was_on_is_preselected(cluster, lead):
    lead.get("/teams/beta/")
    form = lead.get("/whatif/").context["form"]
    assert form["team"].value() == cluster.team_b.pk
    # Last on a team she may not plan for (another cohort's): her own team is preselected.
    viewed = make_team("aaa")
    Membership.objects.create(user=cluster.personas.lead_b, team=viewed, role="viewer")
    lead.get("/teams/aaa/")
    assert lead.get("/whatif/").context["form"]["team"].value() == cluster.team_b.pk


@pytest.mark.parametrize(
    "status, progress, stage",
    [
        ("queued", 0.0, "Waiting for a worker"),
        ("running", 0.01, "Reading the job history"),
        ("running", 0.3, "Replaying the history as configured"),
        ("running", 0.7, "Replaying the history with the change"),
        ("running", 0.97, "Comparing the teams"),
    ],
)
def test_a_running_what_if_shows_its_stage_and_percentage(cluster, lead, status, progress, stage):
    run = make_run(cluster, cluster.personas.lead_b, status=status, progress=progress)
    fragment = lead.get(f"/whatif/{run.pk}/?fragment=status").content.decode()
    assert stage in fragment and f"{round(progress * 100)}%" in fragment
    assert lead.get(f"/whatif/{run.pk}/status.json").json()["stage"].startswith(stage)


def test_progress_moves_through_the_stages_while_replaying(cluster, history, monkeypatch):
    run = make_run(cluster, cluster.personas.lead_b)
    seen = []
    reach = Progress.reach

    def spy(self, value):
        seen.append(value)
        reach(self, value)

    monkeypatch.setattr(Progress, "reach", spy)
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert seen == [0.01, 0.05, 0.5, 0.95]


def test_results_read_as_cards_on_a_phone(cluster, history, lead):
    run = make_run(cluster, cluster.personas.lead_b)
    execute(run.pk)
    page = lead.get(f"/whatif/{run.pk}/").content.decode()
    assert 'class="responsive whatif-results"' in page
    assert 'data-label="Mean wait"' in page and 'class="sm-only"' in page

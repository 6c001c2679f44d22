"""What-if pages: leads plan for their cohort, everyone else gets a 404; progress and results."""

from __future__ import annotations

from datetime import timedelta

import pytest

from portal.whatif.models import WhatIfRun
from tests.whatif.conftest import T0
from tests.whatif.test_replay import make_run

FORM = {
    "change": "nominal",
    "value": "32",
    "period_start": T0.strftime("%Y-%m-%dT%H:%M"),
    "period_end": (T0 + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
}


def form_for(cluster, team=None, **kw):
    return FORM | {"team": (team or cluster.team_a).pk, "flavor": cluster.h100.pk} | kw


@pytest.fixture
def login(client):
    def _login(user):
        client.force_login(user)
        return client

    return _login


def test_a_lead_starts_a_what_if_for_a_team_of_their_cohort_and_sees_the_result(
    cluster, history, login, django_capture_on_commit_callbacks
):
    client = login(cluster.personas.lead_b)  # beta's lead plans alpha's quota: same cohort
    with _eager(), django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post("/whatif/", form_for(cluster))
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert response["Location"] == f"/whatif/{run.pk}/"
    assert len(callbacks) == 1
    run.refresh_from_db()
    assert run.created_by == cluster.personas.lead_b
    assert run.status == WhatIfRun.Status.DONE, run.error
    page = client.get(f"/whatif/{run.pk}/").content.decode()
    assert "alpha h100-80gb nominal quota → 32" in page
    assert "Mean wait" in page and "alpha" in page and "beta" in page
    assert "hx-trigger" not in page  # done: the status stops polling


class _eager:
    """Run Celery tasks in-process (CELERY_TASK_ALWAYS_EAGER) for the block."""

    def __enter__(self):
        from portal.celery import app

        self.app, self.before = app, app.conf.task_always_eager
        app.conf.task_always_eager = True

    def __exit__(self, *exc):
        self.app.conf.task_always_eager = self.before


def test_a_running_run_shows_a_progress_bar_that_polls_its_fragment(cluster, login):
    run = make_run(cluster, status=WhatIfRun.Status.RUNNING, progress=0.4)
    client = login(cluster.personas.lead_a)
    page = client.get(f"/whatif/{run.pk}/").content.decode()
    assert '<progress class="w-full" max="100" value="40"' in page
    assert f'hx-get="/whatif/{run.pk}/?fragment=status"' in page
    fragment = client.get(f"/whatif/{run.pk}/?fragment=status")
    assert fragment.status_code == 200
    assert "<html" not in fragment.content.decode() and "40%" in fragment.content.decode()
    status = client.get(f"/whatif/{run.pk}/status.json").json()
    assert status == {
        "id": run.pk,
        "status": "running",
        "progress": 0.4,
        "stage": "Replaying the history as configured",
        "done": False,
        "error": "",
        "url": f"/whatif/{run.pk}/",
    }


def test_a_failed_run_shows_its_error(cluster, login):
    run = make_run(cluster, status=WhatIfRun.Status.FAILED, error="the cluster has no nodes")
    page = login(cluster.personas.lead_a).get(f"/whatif/{run.pk}/").content.decode()
    assert "the cluster has no nodes" in page and "<progress" not in page


@pytest.mark.parametrize("who", ["member_a", "viewer_a"])
def test_members_and_viewers_get_404_everywhere(cluster, login, who):
    run = make_run(cluster)
    client = login(getattr(cluster.personas, who))
    for url in (
        "/whatif/",
        f"/whatif/{run.pk}/",
        f"/whatif/{run.pk}/?fragment=status",
        f"/whatif/{run.pk}/status.json",
    ):
        assert client.get(url).status_code == 404, url
    assert client.post("/whatif/", form_for(cluster)).status_code == 404
    assert WhatIfRun.objects.count() == 1


def test_a_lead_of_another_cohort_cannot_see_or_start_runs_for_this_one(cluster, gamma, login):
    team_c, lead_c = gamma
    run = make_run(cluster)
    client = login(lead_c)
    assert client.get(f"/whatif/{run.pk}/").status_code == 404
    assert client.get(f"/whatif/{run.pk}/status.json").status_code == 404
    assert client.get("/whatif/999999/").status_code == 404  # same answer as a missing run
    # the form only offers gamma; alpha is not a valid choice
    response = client.post("/whatif/", form_for(cluster))
    assert response.status_code == 200 and "team" in response.context["form"].errors
    assert WhatIfRun.objects.count() == 1
    assert str(run.pk) not in [str(r.pk) for r in client.get("/whatif/").context["runs"]]


def test_a_lead_sees_only_the_teams_of_their_cohort_in_results(cluster, gamma, login):
    run = make_run(
        cluster,
        status=WhatIfRun.Status.DONE,
        results={
            "teams": [
                {
                    "team": t,
                    "jobs": 1,
                    **{
                        m: {"before": 60.0, "after": 30.0, "delta": -30.0}
                        for m in ("mean_wait_s", "p90_wait_s", "gpu_hours")
                    },
                }
                for t in ("alpha", "beta", "gamma")
            ]
        },
    )
    page = login(cluster.personas.lead_a).get(f"/whatif/{run.pk}/").content.decode()
    assert "beta" in page and "gamma" not in page
    admin_page = login(cluster.personas.admin).get(f"/whatif/{run.pk}/").content.decode()
    assert "gamma" in admin_page


def test_a_lead_may_not_start_a_run_the_model_refuses(cluster, login):
    client = login(cluster.personas.lead_a)
    bad = client.post("/whatif/", form_for(cluster, value="-3", period_end=FORM["period_start"]))
    errors = bad.context["form"].errors
    assert "value" in errors and "period_end" in errors
    weight = client.post("/whatif/", form_for(cluster, change="weight", value="0"))
    assert "value" in weight.context["form"].errors
    assert WhatIfRun.objects.count() == 0


def test_anonymous_users_are_sent_to_login(cluster, client):
    run = make_run(cluster)
    response = client.get(f"/whatif/{run.pk}/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_staff_start_and_read_runs_in_the_admin(
    cluster, history, login, django_capture_on_commit_callbacks
):
    client = login(cluster.personas.admin)
    data = form_for(cluster, team=cluster.team_b)
    for name in ("period_start", "period_end"):  # the admin splits date and time
        data[f"{name}_0"], data[f"{name}_1"] = data.pop(name).split("T")
    with _eager(), django_capture_on_commit_callbacks(execute=True):
        response = client.post("/admin/whatif/whatifrun/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    run = WhatIfRun.objects.get()
    assert run.created_by == cluster.personas.admin and run.team == cluster.team_b
    assert run.status == WhatIfRun.Status.DONE, run.error
    page = client.get(f"/admin/whatif/whatifrun/{run.pk}/change/").content.decode()
    assert "mean wait" in page and "alpha" in page
    listing = client.get("/admin/whatif/whatifrun/").content.decode()
    assert "beta h100-80gb nominal quota" in listing
    with _eager(), django_capture_on_commit_callbacks(execute=True):
        client.post(
            "/admin/whatif/whatifrun/", {"action": "run_again", "_selected_action": [run.pk]}
        )
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE and run.results["teams"]


def test_the_dashboard_links_what_if_for_leads_only(client, cluster, personas):
    client.force_login(personas.lead_a)
    assert 'href="/whatif/"' in client.get(f"/teams/{cluster.team_a.slug}/").content.decode()
    client.force_login(personas.member_a)
    assert 'href="/whatif/"' not in client.get(f"/teams/{cluster.team_a.slug}/").content.decode()

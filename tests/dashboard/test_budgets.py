"""The overview's GPU-hour budget gauge and warning, and the budgets in the showback CSV."""

import csv
import io

from django.utils import timezone

from portal.core.actions.budgets import set_budget
from portal.core.budgets import month_bounds
from portal.core.models import Usage


def _budget(cluster, used, limit=100, soft=80):
    set_budget(
        cluster.team_a,
        cluster.h100,
        acting_user=cluster.personas.admin,
        limit_gpu_hours=limit,
        soft_gpu_hours=soft,
    )
    start, _ = month_bounds(timezone.now())
    Usage.objects.create(
        team=cluster.team_a, flavor=cluster.h100, hour=start, gpu_seconds=used * 3600
    )


def test_the_overview_shows_the_gauge_and_warns_past_the_soft_threshold(client, cluster):
    client.force_login(cluster.personas.member_a)
    _budget(cluster, used=85)
    page = client.get("/teams/alpha/").content.decode()
    assert 'data-budget="h100-80gb" data-state="warn"' in page
    assert 'aria-valuenow="85"' in page and 'aria-valuemax="100"' in page
    assert "h100-80gb budget past its soft threshold" in page


def test_at_the_limit_the_overview_says_new_jobs_wait(client, cluster):
    client.force_login(cluster.personas.member_a)
    _budget(cluster, used=100)
    page = client.get("/teams/alpha/").content.decode()
    assert 'data-state="exhausted"' in page
    assert "New h100-80gb jobs of this team wait (budget_exhausted)" in page


def test_no_budget_no_gauge(client, cluster):
    client.force_login(cluster.personas.member_a)
    assert 'id="budgets"' not in client.get("/teams/alpha/").content.decode()


def test_the_showback_csv_ends_with_the_budgets(client, cluster):
    client.force_login(cluster.personas.lead_a)
    _budget(cluster, used=42.5)
    rows = list(csv.reader(io.StringIO(client.get("/teams/alpha/usage.csv").content.decode())))
    blank = rows.index([])
    assert rows[0][0] == "date" and blank == 31  # 30 days, then the budgets
    header, (row,) = rows[blank + 1], rows[blank + 2 :]
    values = dict(zip(header, row, strict=True))
    assert values["budget"] == "h100-80gb"
    assert (values["used_gpu_hours"], values["soft_gpu_hours"], values["limit_gpu_hours"]) == (
        "42.5",
        "80.0",
        "100.0",
    )
    assert values["state"] == "ok" and values["resets_at"]

"""GPU-hour budgets in the API: the team detail shows each budget's figures to the team,
and a stranger learns nothing (the same 404 as for a missing team)."""

from django.utils import timezone

from portal.core.actions.budgets import set_budget
from portal.core.budgets import month_bounds
from portal.core.models import Usage
from tests.api.conftest import bearer


def test_the_team_detail_shows_its_budgets(cluster, personas):
    set_budget(
        cluster.team_a,
        cluster.h100,
        acting_user=personas.admin,
        limit_gpu_hours=100,
        soft_gpu_hours=80,
    )
    start, resets = month_bounds(timezone.now())
    Usage.objects.create(
        team=cluster.team_a, flavor=cluster.h100, hour=start, gpu_seconds=90 * 3600
    )

    body = bearer(personas.member_a).get("/api/v1/teams/alpha/").json()
    (b,) = body["budgets"]
    assert b["flavor"] == "h100-80gb"
    assert (b["used_gpu_hours"], b["soft_gpu_hours"], b["limit_gpu_hours"]) == (90.0, 80.0, 100.0)
    assert (b["state"], b["percent_used"], b["period"], b["window_days"]) == (
        "warn",
        90.0,
        "month",
        None,
    )
    assert b["resets_at"].startswith(resets.strftime("%Y-%m-%dT00:00:00"))
    assert b["forecast_gpu_hours"] >= 90.0

    assert bearer(personas.lead_b).get("/api/v1/teams/beta/").json()["budgets"] == []
    assert bearer(personas.lead_b).get("/api/v1/teams/alpha/").status_code == 404

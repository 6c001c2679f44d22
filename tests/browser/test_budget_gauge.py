"""The overview's GPU-hour budget gauge in a real browser: the bar is drawn to scale,
the soft threshold is marked, the warning shows, and a job over the budget says why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from portal.core.actions.budgets import set_budget
from portal.core.actions.jobs import submit_job
from portal.core.budgets import month_bounds
from portal.core.jobspec import clean_job_spec
from portal.core.models import Usage
from portal.core.scheduling import run_pass

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]


def test_the_gauge_warns_and_a_job_over_the_budget_says_why(
    page, live_server, cluster, log_in, shoot
):
    team, h100 = cluster.team_a, cluster.h100
    set_budget(
        team, h100, acting_user=cluster.personas.admin, limit_gpu_hours=100, soft_gpu_hours=80
    )
    start, _ = month_bounds(timezone.now())
    Usage.objects.create(team=team, flavor=h100, hour=start, gpu_seconds=90 * 3600)
    spec = clean_job_spec(
        team,
        {"name": "too-long", "image": "img", "command": ["true"], "flavor": "h100-80gb",
         "gpus_per_worker": 8, "max_runtime_seconds": 7200},
    )  # fmt: skip
    job = submit_job(team=team, spec=spec, user=cluster.personas.lead_a).job
    run_pass()

    log_in(page, cluster.personas.member_a)
    gauge = page.locator('.budget[data-budget="h100-80gb"]')
    expect(gauge).to_have_attribute("data-state", "warn")
    meter = gauge.get_by_role("meter")
    expect(meter).to_have_attribute("aria-valuenow", "90")
    expect(meter).to_have_attribute("aria-valuemax", "100")
    expect(page.locator('[data-budget-alert="h100-80gb"]')).to_contain_text(
        "past its soft threshold"
    )
    expect(gauge).to_contain_text("90 of 100 GPU-hours (90%)")

    # Drawn to scale: the used bar spans 90 % of the track, the soft mark sits at 80 %.
    track = meter.bounding_box()
    used = meter.locator("span.used").bounding_box()
    soft = meter.locator("i.mark.soft").bounding_box()
    assert used["width"] / track["width"] == pytest.approx(0.9, abs=0.02)
    assert (soft["x"] - track["x"]) / track["width"] == pytest.approx(0.8, abs=0.02)
    shoot(page, "budget-gauge")

    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator(".why")).to_contain_text(
        "team alpha used 90 of 100 h100-80gb GPU-hours this month; this job up to 16 "
        "(8 GPUs x 2 h max run time), which would cross the limit"
    )


def test_at_the_limit_the_gauge_turns_red_and_says_new_jobs_wait(
    page, live_server, cluster, log_in
):
    team, h100 = cluster.team_a, cluster.h100
    set_budget(team, h100, acting_user=cluster.personas.admin, limit_gpu_hours=100)
    start, resets = month_bounds(timezone.now())
    Usage.objects.create(team=team, flavor=h100, hour=start, gpu_seconds=100 * 3600)
    Usage.objects.create(
        team=team, flavor=h100, hour=timezone.now() - timedelta(hours=2), gpu_seconds=0
    )
    log_in(page, cluster.personas.member_a)
    gauge = page.locator('.budget[data-budget="h100-80gb"]')
    expect(gauge).to_have_attribute("data-state", "exhausted")
    expect(page.locator('[data-budget-alert="h100-80gb"]')).to_contain_text(
        f"until it resets on {resets.day} {resets:%b}"
    )
    color = gauge.locator("span.used").evaluate("e => getComputedStyle(e).backgroundColor")
    assert color == "rgb(197, 34, 31)"

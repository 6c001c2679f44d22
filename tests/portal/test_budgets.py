"""GPU-hour budgets through the portal: the audited admin actions, the pass's gate, the
soft-threshold warning recorded once per period, and the read model's figures.
Runs on PostgreSQL and SQLite alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from portal.core.actions.budgets import (
    THRESHOLD_EVENT,
    remove_budget,
    set_budget,
    warn_budget_thresholds,
)
from portal.core.actions.jobs import submit_job
from portal.core.budgets import budget_statuses, month_bounds
from portal.core.jobspec import clean_job_spec
from portal.core.models import AuditEntry, Budget, Delivery, Job, TeamWebhook, Usage
from portal.core.scheduling import run_pass

State = Job.State


def submit(cluster, *, gpus=1, seconds=600, team=None):
    team = team or cluster.team_a
    data = {
        "name": "job",
        "image": "img",
        "command": ["true"],
        "flavor": "h100-80gb",
        "gpus_per_worker": gpus,
        "max_runtime_seconds": seconds,
    }
    spec = clean_job_spec(team, data)
    return submit_job(team=team, spec=spec, user=cluster.personas.lead_a).job


def used(cluster, hours: float, *, team=None, at=None) -> None:
    """GPU-hours of team alpha's h100 usage this month (at the first hour by default)."""
    at = at or month_bounds(timezone.now())[0]
    Usage.objects.create(
        team=team or cluster.team_a, flavor=cluster.h100, hour=at, gpu_seconds=hours * 3600
    )


def budget(cluster, limit=100.0, soft=None, **kw) -> Budget:
    return set_budget(
        cluster.team_a,
        cluster.h100,
        acting_user=cluster.personas.admin,
        limit_gpu_hours=limit,
        soft_gpu_hours=soft,
        **kw,
    )


# --- the admin's actions ------------------------------------------------------------


def test_setting_a_budget_is_audited_with_old_and_new_values(cluster):
    b = budget(cluster, limit=5000, soft=4000)
    created = AuditEntry.objects.filter(target_type="budget", target_id=str(b.pk), action="create")
    assert {e.field: e.new_value for e in created}["limit_gpu_hours"] == "5000.0"
    assert created.first().actor == cluster.personas.admin

    budget(cluster, limit=6000, soft=4000)
    (change,) = AuditEntry.objects.filter(target_id=str(b.pk), action="update")
    assert (change.field, change.old_value, change.new_value) == (
        "limit_gpu_hours",
        "5000.0",
        "6000.0",
    )
    assert Budget.objects.count() == 1

    pk = b.pk
    remove_budget(b, acting_user=cluster.personas.admin)
    assert not Budget.objects.exists()
    assert AuditEntry.objects.filter(target_id=str(pk), action="delete").exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"limit": 0},
        {"limit": -5},
        {"limit": 100, "soft": 150},  # soft above the limit
        {"limit": 100, "soft": -1},
        {"limit": 100, "period": "weekly"},
        {"limit": 100, "period": "rolling", "window_days": 0},
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(cluster, fields):
    with pytest.raises(ValidationError):
        budget(cluster, **fields)
    assert not Budget.objects.exists()
    assert not AuditEntry.objects.filter(target_type="budget").exists()


def test_the_admin_form_goes_through_the_action(client, cluster):
    client.force_login(cluster.personas.admin)
    response = client.post(
        "/admin/core/budget/add/",
        {
            "team": cluster.team_a.pk,
            "flavor": cluster.h100.pk,
            "period": "month",
            "window_days": 30,
            "soft_gpu_hours": 80,
            "limit_gpu_hours": 100,
        },
    )
    assert response.status_code == 302, response.content[:2000]
    b = Budget.objects.get()
    assert (b.limit_gpu_hours, b.soft_gpu_hours) == (100, 80)
    entries = AuditEntry.objects.filter(target_type="budget", action="create")
    assert entries.first().actor == cluster.personas.admin

    bad = client.post(
        f"/admin/core/budget/{b.pk}/change/",
        {"period": "month", "window_days": 30, "soft_gpu_hours": 500, "limit_gpu_hours": 100},
    )
    assert bad.status_code == 200  # the form again, with the error
    assert Budget.objects.get().soft_gpu_hours == 80


def test_the_admin_deletes_through_the_action_and_the_team_page_shows_the_trail(client, cluster):
    b = budget(cluster, limit=100, soft=50)
    used(cluster, 60.0)
    warn_budget_thresholds(budget_statuses(timezone.now()))
    client.force_login(cluster.personas.admin)

    page = client.get(f"/admin/core/team/{cluster.team_a.pk}/change/").content.decode()
    assert "limit_gpu_hours" in page and THRESHOLD_EVENT in page

    pk = b.pk
    response = client.post(f"/admin/core/budget/{pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Budget.objects.exists()
    (gone,) = AuditEntry.objects.filter(target_type="budget", target_id=str(pk), action="delete")
    assert gone.actor == cluster.personas.admin
    page = client.get(f"/admin/core/team/{cluster.team_a.pk}/change/").content.decode()
    assert "alpha/h100-80gb: 100 GPU-hours per month" in page  # deleted, still in the trail


# --- the pass -------------------------------------------------------------------------


def test_the_pass_admits_up_to_the_limit_and_then_explains(cluster):
    budget(cluster, limit=100)
    used(cluster, 99.0)
    fits = submit(cluster, gpus=1, seconds=3600)  # 1 GPU-hour: lands on 100
    crosses = submit(cluster, gpus=8, seconds=600)  # 1.33 GPU-hours more
    other_team = submit(cluster, gpus=8, seconds=36000, team=cluster.team_b)

    run_pass()

    fits.refresh_from_db(), crosses.refresh_from_db(), other_team.refresh_from_db()
    assert fits.state == State.ADMITTED
    assert other_team.state == State.ADMITTED
    assert crosses.state == State.PENDING
    assert crosses.reason_code == "budget_exhausted"
    assert crosses.reason.startswith(
        "team alpha used 99 of 100 h100-80gb GPU-hours this month; its running jobs may use 1 "
        "more and this job up to 1.3 (8 GPUs x 10 min max run time), which would cross the limit"
    )
    _, resets = month_bounds(timezone.now())
    assert crosses.estimated_start_at == resets

    used(cluster, 5.0, at=timezone.now().replace(minute=0, second=0, microsecond=0))
    run_pass()  # past the limit: the running job goes on
    fits.refresh_from_db()
    assert fits.state == State.ADMITTED

    budget(cluster, limit=200)  # the admin raises it
    run_pass()
    crosses.refresh_from_db()
    assert crosses.state == State.ADMITTED


def test_a_rolling_window_counts_only_its_days(cluster):
    budget(cluster, limit=10, period="rolling", window_days=7)
    now = timezone.now()
    used(cluster, 500.0, at=(now - timedelta(days=9)).replace(minute=0, second=0, microsecond=0))
    used(cluster, 9.5, at=(now - timedelta(days=2)).replace(minute=0, second=0, microsecond=0))
    (status,) = budget_statuses(now)
    assert (status.used, status.resets_at, status.forecast) == (9.5, None, None)
    job = submit(cluster, gpus=1, seconds=3600)
    run_pass()
    job.refresh_from_db()
    assert job.reason_code == "budget_exhausted"
    assert "in the last 7 days" in job.reason


# --- the soft threshold ------------------------------------------------------------------


def test_the_soft_threshold_is_recorded_once_per_month(cluster):
    budget(cluster, limit=100, soft=80)
    used(cluster, 79.0)
    run_pass()
    assert not AuditEntry.objects.filter(action=THRESHOLD_EVENT).exists()

    used(cluster, 2.0, at=timezone.now().replace(minute=0, second=0, microsecond=0))
    run_pass()
    run_pass()
    (entry,) = AuditEntry.objects.filter(action=THRESHOLD_EVENT)
    assert entry.actor is None
    assert entry.note == (
        "team alpha used 81 of 100 h100-80gb GPU-hours this month (soft threshold 80)"
    )
    month = month_bounds(timezone.now())[0]
    assert Budget.objects.get().warned_period == month.strftime("%Y-%m")

    # next month, the same usage again: one more entry
    next_month = month_bounds(timezone.now())[1]
    Usage.objects.create(
        team=cluster.team_a, flavor=cluster.h100, hour=next_month, gpu_seconds=85 * 3600
    )
    warn_budget_thresholds(budget_statuses(next_month + timedelta(hours=2)))
    warn_budget_thresholds(budget_statuses(next_month + timedelta(hours=3)))
    assert AuditEntry.objects.filter(action=THRESHOLD_EVENT).count() == 2


def test_the_crossing_notifies_the_teams_webhooks_that_take_team_events(
    cluster, django_capture_on_commit_callbacks
):
    budget(cluster, limit=100, soft=50)
    used(cluster, 60.0)
    takes = TeamWebhook.objects.create(team=cluster.team_a, url="https://hooks.example/a")
    TeamWebhook.objects.create(
        team=cluster.team_a, url="https://hooks.example/b", team_events=False
    )
    TeamWebhook.objects.create(team=cluster.team_b, url="https://hooks.example/c")
    with django_capture_on_commit_callbacks(execute=False):
        warn_budget_thresholds(budget_statuses(timezone.now()))
        warn_budget_thresholds(budget_statuses(timezone.now()))  # once per period
    (delivery,) = Delivery.objects.all()
    assert delivery.webhook == takes and delivery.event == THRESHOLD_EVENT
    data = delivery.payload["data"]
    assert delivery.payload["team"] == "alpha" and delivery.payload["event"] == THRESHOLD_EVENT
    assert data["used_gpu_hours"] == 60.0 and data["soft_gpu_hours"] == 50.0
    assert data["resets_at"] == month_bounds(timezone.now())[1].isoformat()


def test_two_readers_of_the_same_crossing_warn_once(cluster):
    """Both saw the crossing before either wrote: the conditional update lets one win."""
    budget(cluster, limit=100, soft=50)
    used(cluster, 60.0)
    seen_twice = budget_statuses(timezone.now())
    assert len(warn_budget_thresholds(seen_twice)) == 1
    assert warn_budget_thresholds(seen_twice) == []
    assert AuditEntry.objects.filter(action=THRESHOLD_EVENT).count() == 1


def test_a_rolling_window_warns_again_after_falling_back_below(cluster):
    budget(cluster, limit=100, soft=50, period="rolling", window_days=7)
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    used(cluster, 60.0, at=now - timedelta(days=1))
    warn_budget_thresholds(budget_statuses(now))
    warn_budget_thresholds(budget_statuses(now + timedelta(days=3)))  # still inside
    assert AuditEntry.objects.filter(action=THRESHOLD_EVENT).count() == 1
    warn_budget_thresholds(budget_statuses(now + timedelta(days=10)))  # left the window
    assert Budget.objects.get().warned_period == ""
    used(cluster, 70.0, at=now + timedelta(days=10))
    warn_budget_thresholds(budget_statuses(now + timedelta(days=10, hours=1)))
    assert AuditEntry.objects.filter(action=THRESHOLD_EVENT).count() == 2


# --- the figures -----------------------------------------------------------------------


def test_month_bounds_roll_over_the_year():
    start, end = month_bounds(datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    assert (start, end) == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


def test_forecast_from_the_last_24_hours_burn_rate(cluster):
    budget(cluster, limit=5000, soft=4000)
    now = datetime(2026, 12, 21, 0, 0, tzinfo=UTC)  # 11 days = 264 h to the end of the month
    Usage.objects.create(
        team=cluster.team_a,
        flavor=cluster.h100,
        hour=now - timedelta(days=5),
        gpu_seconds=3000 * 3600,
    )
    Usage.objects.create(
        team=cluster.team_a,
        flavor=cluster.h100,
        hour=now - timedelta(hours=3),
        gpu_seconds=48 * 3600,
    )
    (s,) = budget_statuses(now)
    assert (s.used, s.last_day) == (3048.0, 48.0)
    assert s.forecast == 3048.0 + 2.0 * 264
    assert (s.state, s.percent) == ("ok", 61.0)

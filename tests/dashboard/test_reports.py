"""The read models the dashboard added to portal.core.reports, and the wait report's two paths."""

from __future__ import annotations

import math
import statistics
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from portal.core import reports
from portal.core.models import Gpu, Job
from tests.dashboard.story import make_job


def test_wait_by_week_sql_matches_the_python_definition(cluster, monkeypatch):
    now = timezone.now()
    waits = [60, 120, 180, 240, 300, 600, 900, 1200, 1800, 3600, 7200]
    # Noon two days ago: all in one week whatever the time now (near a Monday midnight
    # "now - 2 days - i minutes" fell in two weeks).
    noon = (now - timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
    for i, wait in enumerate(waits):
        admitted = noon - timedelta(minutes=i)
        make_job(
            cluster,
            cluster.team_a,
            cluster.personas.lead_a,
            f"w{i}",
            now,
            state=Job.State.SUCCEEDED,
            submitted_at=admitted - timedelta(seconds=wait),
            admitted_at=admitted,
        )
    got = reports.wait_by_week(cluster.team_a, now=now)  # the SQL path on PostgreSQL
    monkeypatch.setattr(connection, "vendor", "sqlite")
    python = reports.wait_by_week(cluster.team_a, now=now)
    assert got == python
    (week,) = got
    assert week["jobs"] == len(waits)
    assert week["median_wait_s"] == statistics.median(waits)
    assert week["p90_wait_s"] == sorted(waits)[math.ceil(0.9 * len(waits)) - 1] == 3600


def test_idle_jobs_flags_running_jobs_under_the_threshold_after_the_grace(story):
    idle = reports.idle_jobs(story.cluster.team_a)
    assert [(j.name, j.gpus, j.reporting, j.avg_utilization_pct) for j in idle] == [
        ("notebook-debug", 2, 2, 3.0)
    ]
    assert reports.idle_jobs(story.cluster.team_a, grace_s=3 * 3600) == []
    Gpu.objects.filter(allocations__job=story.notebook).update(utilization_pct=None)
    assert reports.idle_jobs(story.cluster.team_a) == []  # no telemetry: not flagged


def test_cohort_demand_counts_gpus_held_and_wanted_per_team(story):
    demand = reports.cohort_demand(story.cluster.team_a)
    assert demand["alpha"]["h100-80gb"] == {"used": 18, "pending": 12}
    assert demand["alpha"]["a100-40gb"] == {"used": 0, "pending": 2}
    assert demand["beta"] == {"h100-80gb": {"used": 8, "pending": 0}}

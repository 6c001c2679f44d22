"""The demo's seeded month (issue 16, item 7): a Philly slice replayed on the demo's cluster
through the what-if's own simulator, stored as finished jobs with their usage."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models import Max, Sum
from django.utils import timezone

from portal.core import reports
from portal.core.models import DecayedUsage, Job, JobEvent, Team, Usage
from portal.whatif.models import WhatIfRun
from portal.whatif.replay import execute
from tests.whatif.demo_cluster import register_demo_nodes

FINISHED = (Job.State.SUCCEEDED, Job.State.FAILED)


@pytest.fixture
def seeded(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", stdout=open(tmp_path / "out", "w"))  # noqa: SIM115
    return tmp_path


def test_a_month_of_finished_jobs_for_every_team(seeded):
    finished = Job.objects.filter(state__in=FINISHED)
    assert finished.count() > 1000
    now = timezone.now()
    days = {j.date() for j in finished.values_list("finished_at", flat=True)}
    assert len(days) >= 28 and min(days) >= (now - timedelta(days=31)).date()
    assert set(finished.values_list("team__slug", flat=True)) == {"vision", "nlp", "speech"}
    assert finished.filter(submitted_at__gt=now).count() == 0
    assert finished.filter(finished_at__gt=now).count() == 0
    # The portal's restart limit holds: a job preempted once too often failed instead.
    assert finished.aggregate(m=Max("restart_count"))["m"] <= 3
    assert JobEvent.objects.filter(kind="preempted").exists()


def test_usage_rows_match_the_timelines_and_fair_share_has_history(seeded):
    held = defaultdict(float)
    for job in (
        Job.objects.filter(state__in=FINISHED).select_related("team").prefetch_related("events")
    ):
        # One attempt per admission; it ends at the next requeue, or at the finish.
        admitted = [e.at for e in job.events.all() if e.kind == "admitted"]
        stops = [e.at for e in job.events.all() if e.kind == "requeued"] + [job.finished_at]
        for start, stop in zip(admitted, stops, strict=True):
            held[job.team.slug] += (stop - start).total_seconds() * job.gpus
    stored = dict(
        Usage.objects.values("team__slug")
        .annotate(s=Sum("gpu_seconds"))
        .values_list("team__slug", "s")
    )
    for team, seconds in held.items():
        assert stored[team] == pytest.approx(seconds, rel=1e-6), team
    assert DecayedUsage.objects.filter(gpu_seconds__gt=0).count() == 6  # 3 teams x 2 flavors
    for standing in reports.cohort_standing(Team.objects.get(slug="vision")):
        assert standing.historical > 0, standing


def test_waits_span_the_weeks_and_a_what_if_finds_differences(seeded):
    register_demo_nodes(seeded)
    vision = Team.objects.get(slug="vision")
    weeks = reports.wait_by_week(vision)
    assert len(weeks) >= 4 and any(w["p90_wait_s"] > 0 for w in weeks)
    now = timezone.now()
    run = WhatIfRun.objects.create(
        team=Team.objects.get(slug="nlp"),
        change=WhatIfRun.Change.WEIGHT,
        value=0.5,
        period_start=now - timedelta(days=14),
        period_end=now,
    )
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE, run.error
    deltas = [t["mean_wait_s"]["delta"] for t in run.results["teams"]]
    assert any(abs(d) > 60 for d in deltas), run.results["teams"]


def test_seeding_twice_adds_nothing(seeded):
    count = Job.objects.count()
    call_command("seed_demo", stdout=open(seeded / "again", "w"))  # noqa: SIM115
    assert Job.objects.count() == count

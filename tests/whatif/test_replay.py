"""A what-if run end to end: the database's history replayed twice through the simulator."""

from __future__ import annotations

from datetime import timedelta

import pytest

from portal.whatif import history as hist
from portal.whatif.models import WhatIfRun
from portal.whatif.replay import execute
from portal.whatif.tasks import run_whatif
from tests.whatif.conftest import T0, add_job


def make_run(cluster, user=None, **kw) -> WhatIfRun:
    fields = {
        "team": cluster.team_a,
        "flavor": cluster.h100,
        "change": WhatIfRun.Change.NOMINAL,
        "value": 32,
        "period_start": T0,
        "period_end": T0 + timedelta(days=1),
        "created_by": user,
    }
    return WhatIfRun.objects.create(**(fields | kw))


def test_history_records_use_real_run_times_and_skip_jobs_that_never_ran(cluster, history):
    records = hist.job_records(T0, T0 + timedelta(days=1))
    assert len(records) == 18  # the cancelled-before-start job is left out
    assert {r["duration_s"] for r in records if r["team"] == "beta"} == {7200.0}
    pending = add_job(
        cluster, cluster.team_a, cluster.queue_a, at=timedelta(hours=1), gpus=8, state="pending"
    )
    (rec,) = [r for r in hist.job_records(T0, T0 + timedelta(days=1)) if r["id"] == pending.pk]
    assert rec["duration_s"] == 4 * 3600  # unknown: its max runtime
    assert rec["workers"] == 1 and rec["gpus_per_worker"] == 8 and rec["flavor"] == "h100-80gb"


def test_cluster_nodes_and_teams_are_read_as_they_are_now(cluster):
    nodes = hist.cluster_nodes()
    assert (
        sorted((n.flavor, n.gpus) for n in nodes) == [("a100-40gb", 8)] * 2 + [("h100-80gb", 8)] * 4
    )
    teams = {t.name: t for t in hist.cluster_teams()}
    assert teams["alpha"].quotas["h100-80gb"].nominal == 16
    assert teams["alpha"].cohort == "research"


def test_the_task_replays_with_and_without_the_change_and_stores_per_team_results(cluster, history):
    run = make_run(cluster)
    run_whatif.apply(args=[run.pk])  # the Celery task, run in-process
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert run.progress == 1.0 and run.finished_at is not None
    rows = {r["team"]: r for r in run.results["teams"]}
    assert set(rows) >= {"alpha", "beta"}
    assert rows["alpha"]["jobs"] == 6 and rows["beta"]["jobs"] == 12
    alpha = rows["alpha"]["mean_wait_s"]
    assert alpha["before"] > 0  # alpha queued behind beta's borrowed GPUs
    assert alpha["after"] < alpha["before"]  # with 32 nominal it reclaims them
    assert alpha["delta"] == pytest.approx(alpha["after"] - alpha["before"], abs=0.1)
    assert rows["beta"]["mean_wait_s"]["after"] >= rows["beta"]["mean_wait_s"]["before"]
    assert run.results["setup"]["jobs"] == 18 and run.results["setup"]["gpus"] == 48
    assert run.results["changed"]["preemptions"] >= 1


def test_a_weight_change_needs_no_flavor(cluster, history):
    run = make_run(cluster, change=WhatIfRun.Change.WEIGHT, value=4.0, flavor=None)
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE, run.error


def test_a_period_without_jobs_is_done_with_a_note(cluster):
    run = make_run(cluster)
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE
    assert run.results["teams"] == [] and "No jobs" in run.results["note"]


def test_a_failure_is_stored_on_the_run(cluster, history, monkeypatch):
    monkeypatch.setattr(hist, "cluster_nodes", lambda: [])
    run = make_run(cluster)
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED
    assert "no nodes" in run.error


def test_a_run_is_replayed_once_even_if_the_task_is_delivered_twice(cluster, history, monkeypatch):
    run = make_run(cluster)
    execute(run.pk)
    calls = []
    monkeypatch.setattr("portal.whatif.replay.replay", lambda *a: calls.append(a) or {})
    execute(run.pk)
    assert calls == []
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE and run.results["teams"]

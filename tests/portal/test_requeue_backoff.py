"""Requeue backoff: a preempted or evicted job waits min(base x 2^(n-1), max) before it may
start again (Kueue's requeuingStrategy; scheduler/requeue.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core import scheduling
from portal.core.actions.jobs import requeue_or_fail
from portal.core.models import Allocation, Job
from portal.core.scheduling import run_pass
from tests.portal.test_agent_protocol import beat, make_job, node_token, report
from tests.portal.test_scheduling_pass import submit

State = Job.State


def preempt_and_stop(client, cluster, job: Job) -> None:
    """The pass preempts the running gang; its agent stops it and the portal requeues it."""
    from portal.core.scheduling.apply import apply_plan
    from portal.core.scheduling.snapshot import PassContext
    from scheduler import model as m

    node = Allocation.objects.filter(job=job).first().node
    token = node_token(node)
    beat(client, node, token, [report(job, 0, "running", attempt=job.attempt)])
    apply_plan(
        m.Plan(preemptions=(m.Preemption(job.pk, "reclaim", "Team beta reclaims its quota.", 9),)),
        PassContext(now=timezone.now()),
    )
    beat(client, node, token, [report(job, 0, "exited", 143, attempt=job.attempt)])
    job.refresh_from_db()


def pass_at(monkeypatch, when):
    """Run a pass as if the clock read `when`."""
    monkeypatch.setattr(scheduling.timezone, "now", lambda: when)
    return run_pass()


def test_a_preempted_job_backs_off_then_starts(client, cluster, personas, monkeypatch):
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    run_pass()
    job.refresh_from_db()
    assert job.state == State.ADMITTED and job.eligible_at is None

    before = timezone.now()
    preempt_and_stop(client, cluster, job)
    assert job.state == State.PENDING and job.restart_count == 1
    assert (
        before + timedelta(seconds=60) <= job.eligible_at <= timezone.now() + timedelta(seconds=60)
    )
    event = job.events.get(kind="requeued")
    assert f"eligible again from {job.eligible_at:%Y-%m-%d %H:%M:%S} UTC" in event.message
    assert "backoff of 60 s for its requeue 1" in event.message
    assert event.data["requeues"] == 1 and event.data["backoff_s"] == 60

    pass_at(monkeypatch, job.eligible_at - timedelta(seconds=1))
    job.refresh_from_db()
    assert job.state == State.PENDING and job.reason_code == "backoff"
    assert "backing off after its 1st requeue" in job.reason
    assert job.queue_position == 1 and job.estimated_start_at >= job.eligible_at

    result = pass_at(monkeypatch, job.eligible_at + timedelta(seconds=1))
    assert result.admitted == [job.pk]
    job.refresh_from_db()
    assert job.state == State.ADMITTED and job.attempt == 1


def test_a_job_in_backoff_does_not_hold_gpus_back_from_others(cluster, personas, monkeypatch):
    big = submit(cluster, personas.lead_a, workers=2, gpus_per_worker=8)
    Job.objects.filter(pk=big.pk).update(
        eligible_at=timezone.now() + timedelta(hours=1), restart_count=2
    )
    small = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    result = run_pass()
    assert result.admitted == [small.pk]
    assert result.plan.stats["backing_off"] == 1 and result.plan.stats["reservations"] == 0
    big.refresh_from_db()
    assert big.reason_code == "backoff" and "after its 2nd requeue" in big.reason


@pytest.mark.parametrize(
    ("restarts", "backoff"),
    [(0, 60), (1, 120), (2, 240), (6, 3600), (40, 3600)],
)
def test_the_backoff_doubles_per_requeue_up_to_the_max(cluster, restarts, backoff):
    job = make_job(cluster, restart_count=restarts, max_restarts=100, state=State.RUNNING)
    before = timezone.now()
    assert requeue_or_fail([job.pk], kind="node_lost", message="Node lost.")["requeued"] == [job.pk]
    job.refresh_from_db()
    delay = (job.eligible_at - before).total_seconds()
    assert backoff <= delay < backoff + 5
    assert job.restart_count == restarts + 1


def test_backoff_settings_and_jobs_past_their_limit(cluster, settings):
    settings.BERTH = {
        **settings.BERTH,
        "REQUEUE_BACKOFF_BASE_S": 10.0,
        "REQUEUE_BACKOFF_MAX_S": 25.0,
    }
    first = make_job(cluster, state=State.RUNNING)
    third = make_job(cluster, restart_count=2, state=State.RUNNING)
    done = make_job(cluster, restart_count=3, state=State.RUNNING)
    now = timezone.now()
    moved = requeue_or_fail([first.pk, third.pk, done.pk], kind="requeued", message="Preempted.")
    assert sorted(moved["requeued"]) == [first.pk, third.pk] and moved["failed"] == [done.pk]
    delays = {
        pk: (at - now).total_seconds()
        for pk, at in Job.objects.filter(pk__in=[first.pk, third.pk]).values_list(
            "pk", "eligible_at"
        )
    }
    assert 10 <= delays[first.pk] < 15 and 25 <= delays[third.pk] < 30  # 10 x 2^2 capped at 25
    done.refresh_from_db()
    assert done.state == State.FAILED and done.eligible_at is None


def test_a_base_of_zero_turns_the_backoff_off(cluster, settings):
    settings.BERTH = {**settings.BERTH, "REQUEUE_BACKOFF_BASE_S": 0.0}
    job = make_job(cluster, state=State.RUNNING)
    requeue_or_fail([job.pk], kind="requeued", message="Preempted.")
    job.refresh_from_db()
    assert job.eligible_at <= timezone.now()
    assert "eligible again at once" in job.events.get(kind="requeued").message
    assert run_pass().admitted == [job.pk]

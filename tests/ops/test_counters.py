"""Counters and histograms: counted from durable rows, monotonic, the same on every process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from portal.core.actions.heartbeat import GpuReport, record_heartbeat
from portal.core.actions.jobs import submit_job
from portal.core.actions.workers import WorkerReport
from portal.core.jobspec import JobSpec
from portal.core.models import Job, JobEvent, SchedulingPass, Worker
from portal.core.scheduling import run_pass
from portal.core.scheduling.apply import apply_plan
from portal.core.scheduling.snapshot import PassContext
from portal.ops import tallies
from scheduler import model as m

from .conftest import Scrape

State = Job.State
ALPHA = {"team": "alpha"}


def submit(cluster, personas, gpus=2) -> Job:
    spec = JobSpec(
        name="train",
        queue=cluster.queue_a,
        flavor=cluster.h100,
        image="img",
        command=["python", "train.py"],
        gpus_per_worker=gpus,
    )
    return submit_job(team=cluster.team_a, spec=spec, user=personas.lead_a).job


def report(job: Job, state: str, exit_code=None) -> None:
    """The agent of the job's node reports its (only) worker."""
    job.refresh_from_db()
    worker = Worker.objects.select_related("node__flavor").get(job=job, attempt=job.attempt)
    node = worker.node
    gpus = [
        GpuReport(index=g.index, uuid=g.uuid, name=node.flavor.display_name)
        for g in node.gpus.order_by("index")
    ]
    record_heartbeat(
        node,
        agent_version="test",
        gpus=gpus,
        workers=[WorkerReport(worker.key, state, exit_code=exit_code)],
    )


def assert_monotonic(history: list[Scrape]) -> None:
    for before, after in zip(history, history[1:], strict=False):
        now = after.counters()
        for key, value in before.counters().items():
            assert key in now, f"{key} disappeared"
            assert now[key] >= value, f"{key} went down: {value} → {now[key]}"


def test_counters_follow_jobs_through_admission_preemption_requeue_and_success(
    cluster, personas, scrape
):
    history = [scrape()]
    first = submit(cluster, personas)
    second = submit(cluster, personas)
    assert sorted(run_pass().admitted) == [first.pk, second.pk]
    history.append(scrape())
    assert history[-1].value("berth_admitted_jobs_total", **ALPHA) == 2
    assert history[-1].value("berth_admission_wait_time_seconds_count", **ALPHA) == 2
    assert history[-1].value("berth_scheduling_pass_duration_seconds_count") == 1

    report(first, "running")
    report(first, "exited", exit_code=0)
    history.append(scrape())
    assert history[-1].value("berth_finished_jobs_total", state="succeeded", **ALPHA) == 1
    assert history[-1].value("berth_running_jobs", flavor="h100-80gb", **ALPHA) == 1

    preempt = m.Preemption(second.pk, "reclaim", "preempted by a test", first.pk)
    apply_plan(m.Plan(preemptions=(preempt,)), PassContext(now=timezone.now()))
    history.append(scrape())
    assert history[-1].value("berth_preempted_jobs_total", reason="reclaim", **ALPHA) == 1
    assert history[-1].value("berth_preempting_jobs", flavor="h100-80gb", **ALPHA) == 1

    report(second, "exited", exit_code=143)  # stopped by its signal: the gang is requeued
    assert Job.objects.get(pk=second.pk).state == State.PENDING
    history.append(scrape())
    assert history[-1].value("berth_requeued_jobs_total", reason="requeued", **ALPHA) == 1

    Job.objects.filter(pk=second.pk).update(eligible_at=timezone.now())  # its backoff is over
    assert run_pass().admitted == [second.pk]
    history.append(scrape())
    final = history[-1]
    assert final.value("berth_admitted_jobs_total", **ALPHA) == 3
    assert final.value("berth_admission_wait_time_seconds_count", **ALPHA) == 3
    assert final.value("berth_scheduling_pass_duration_seconds_count") == 2
    assert final.value("berth_finished_jobs_total", state="succeeded", team="beta") == 0
    assert_monotonic(history)


def test_admission_wait_is_measured_from_submission_or_requeue(cluster, personas, scrape):
    job = submit(cluster, personas)
    JobEvent.objects.filter(job=job).update(at=timezone.now() - timedelta(seconds=100))
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(seconds=100))
    run_pass()
    result = scrape()
    assert result.value("berth_admission_wait_time_seconds_bucket", le="64.0", **ALPHA) == 0
    assert result.value("berth_admission_wait_time_seconds_bucket", le="128.0", **ALPHA) == 1
    assert result.value("berth_admission_wait_time_seconds_sum", **ALPHA) == pytest.approx(
        100, abs=5
    )


def test_pass_duration_histogram_counts_successful_passes_only(cluster, scrape):
    now = timezone.now()
    for ms in (5.0, 40.0, 40.0, 700.0, 120_000.0):
        SchedulingPass.objects.create(started_at=now, duration_ms=ms, policy="fairshare")
    SchedulingPass.objects.create(started_at=now, duration_ms=1.0, policy="fifo", dry_run=True)
    SchedulingPass.objects.create(started_at=now, duration_ms=1.0, policy="fifo", error="boom")
    result = scrape()
    bucket = "berth_scheduling_pass_duration_seconds_bucket"
    assert result.value(bucket, le="0.01") == 1
    assert result.value(bucket, le="0.05") == 3
    assert result.value(bucket, le="1.0") == 4
    assert result.value(bucket, le="60.0") == 4
    assert result.value(bucket, le="+Inf") == 5
    assert result.value("berth_scheduling_pass_duration_seconds_sum") == pytest.approx(120.785)


# --- the shared base --------------------------------------------------------------------------


def old_events(cluster, n: int, *, age_s: float = 7200) -> list[JobEvent]:
    """`n` admitted jobs whose events happened long ago (settled)."""
    at = timezone.now() - timedelta(seconds=age_s)
    events = []
    for _ in range(n):
        job = Job.objects.create(
            team=cluster.team_a,
            queue=cluster.queue_a,
            flavor=cluster.h100,
            name="old",
            image="img",
            max_runtime_seconds=60,
            state=State.SUCCEEDED,
            submitted_at=at,
        )
        events += JobEvent.objects.bulk_create(
            [
                JobEvent(job=job, at=at, kind="submitted", to_state=State.PENDING),
                JobEvent(
                    job=job, at=at, kind="admitted", from_state="pending", to_state="admitted"
                ),
                JobEvent(
                    job=job, at=at, kind="succeeded", from_state="admitted", to_state="succeeded"
                ),
            ]
        )
    return events


def base() -> tallies.Base:
    return (cache.get(tallies.cache_key()) or {}).get("events", tallies.Base())


def test_settled_rows_join_the_shared_base_and_totals_do_not_change(cluster, scrape):
    events = old_events(cluster, 3)
    cold = scrape()
    assert cold.value("berth_admitted_jobs_total", **ALPHA) == 3
    assert base().watermark == events[-1].pk
    warm = scrape()
    assert warm.samples == cold.samples
    fresh = old_events(cluster, 2, age_s=0)  # not settled: counted above the watermark
    result = scrape()
    assert result.value("berth_admitted_jobs_total", **ALPHA) == 5
    assert result.value("berth_finished_jobs_total", state="succeeded", **ALPHA) == 5
    assert base().watermark == events[-1].pk < fresh[0].pk
    tallies.reset()
    assert scrape().samples == result.samples  # recounted from scratch: same totals


def test_the_base_never_passes_an_unsettled_row(cluster, scrape):
    recent = old_events(cluster, 1, age_s=0)
    later_but_old = old_events(cluster, 1)  # higher ids, older timestamps (clock skew)
    assert scrape().value("berth_admitted_jobs_total", **ALPHA) == 2
    assert base().watermark < recent[0].pk
    JobEvent.objects.filter(pk__in=[e.pk for e in recent]).update(
        at=timezone.now() - timedelta(hours=2)
    )
    assert scrape().value("berth_admitted_jobs_total", **ALPHA) == 2
    assert base().watermark == later_but_old[-1].pk


def test_a_base_that_no_longer_matches_the_database_is_recounted(cluster, scrape):
    """E.g. the database was restored from a backup while Redis kept its entry."""
    events = old_events(cluster, 2)
    scrape()
    stale = base()
    stale.counts[("admitted", cluster.team_a.pk)] += 1000
    stale.stamp = stale.stamp - timedelta(seconds=1)
    cache.set(tallies.cache_key(), {"events": stale}, timeout=None)
    assert scrape().value("berth_admitted_jobs_total", **ALPHA) == 2
    assert base().watermark == events[-1].pk


@pytest.mark.parametrize(
    ("after", "settled", "unsettled", "expected"),
    [
        (0, None, None, 0),  # nothing there
        (0, 10, None, 10),  # all settled
        (0, None, 3, 0),  # all fresh
        (0, 10, 4, 3),  # a fresh row below settled ones stops the prefix
        (7, 10, 12, 10),
        (7, None, 8, 7),
    ],
)
def test_settled_prefix(after, settled, unsettled, expected):
    marks = {"settled": settled, "unsettled": unsettled}
    assert tallies._settled_prefix(after, marks) == expected

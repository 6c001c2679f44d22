"""The scheduling pass on PostgreSQL: snapshot, plan, writes, locking and accounting."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection
from django.utils import timezone

from portal.core import scheduling
from portal.core.actions.jobs import submit_job
from portal.core.jobspec import clean_job_spec
from portal.core.models import (
    Allocation,
    DecayedUsage,
    Gpu,
    Job,
    Node,
    SchedulingPass,
    Usage,
    Worker,
)
from portal.core.scheduling import run_pass
from portal.core.scheduling.usage import account_usage

State = Job.State


def submit(cluster, user, team=None, **fields):
    team = team or cluster.team_a
    data = {
        "name": "job",
        "image": "img",
        "command": ["true"],
        "flavor": "h100-80gb",
        "max_runtime_seconds": 600,
    }
    spec = clean_job_spec(team, data | fields)
    return submit_job(team=team, spec=spec, user=user).job


def test_pass_admits_a_gang_and_explains_the_rest(cluster, personas):
    fits = submit(cluster, personas.lead_a, workers=2, gpus_per_worker=8)
    too_big = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)  # must borrow

    result = run_pass()

    fits.refresh_from_db()
    assert fits.state == State.ADMITTED and fits.admitted_at
    allocations = Allocation.objects.filter(job=fits, active=True)
    assert allocations.count() == 16
    assert {a.node.flavor_id for a in allocations} == {cluster.h100.pk}
    assert Worker.objects.filter(job=fits, attempt=0).count() == 2
    nodes = {a.node for a in allocations}
    assert len({(n.rack, n.block) for n in nodes}) == 1, "a 2-node gang stays in one block"
    event = fits.events.get(kind="admitted")
    assert len(event.data["placement"]) == 2

    too_big.refresh_from_db()
    assert result.admitted == [fits.pk] or too_big.state == State.ADMITTED
    if too_big.state == State.PENDING:
        assert too_big.reason_code and too_big.reason and too_big.queue_position == 1
    assert SchedulingPass.objects.count() == 1


def test_dry_run_prints_the_plan_and_writes_nothing(cluster, personas, capsys):
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=4)
    call_command("schedule", "--dry-run")
    out = capsys.readouterr().out
    assert f"would admit job {job.pk}" in out and "dry run, nothing written" in out
    job.refresh_from_db()
    assert job.state == State.PENDING
    assert not Allocation.objects.exists() and not SchedulingPass.objects.exists()


def test_unschedulable_nodes_and_gpus_are_not_used(cluster, personas):
    h100 = [n for n in cluster.nodes if n.flavor_id == cluster.h100.pk]
    Node.objects.filter(pk=h100[0].pk).update(cordon=Node.Cordon.CORDONED)
    Node.objects.filter(pk=h100[1].pk).update(cordon=Node.Cordon.DRAINING)
    Node.objects.filter(pk=h100[2].pk).update(condition=Node.Condition.NOT_READY)
    Gpu.objects.filter(node=h100[3], index__in=[0, 1]).update(health=Gpu.Health.UNHEALTHY)
    fits = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=6)
    blocked = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=4)
    run_pass()
    fits.refresh_from_db()
    blocked.refresh_from_db()
    assert fits.state == State.ADMITTED
    assert set(Allocation.objects.filter(job=fits).values_list("gpu__index", flat=True)) == {
        2,
        3,
        4,
        5,
        6,
        7,
    }
    assert blocked.state == State.PENDING and blocked.reason_code


def test_query_count_does_not_grow_with_the_number_of_jobs(cluster, personas):
    """Passes doing the same kinds of work cost the same queries at 40 or 200 jobs."""

    def pass_after_submitting(pairs):
        for _ in range(pairs):
            submit(cluster, personas.lead_a, workers=1, gpus_per_worker=1)
            submit(cluster, personas.lead_b, team=cluster.team_b, workers=2, gpus_per_worker=8)
        return run_pass().queries

    run_pass()  # so that every pass below also accounts usage since the previous one
    small = pass_after_submitting(20)
    large = pass_after_submitting(100)
    assert large <= small + 1, (small, large)  # bulk statements, never one query per job
    assert large <= 25


def test_requeued_job_waits_for_its_previous_attempt_to_stop(cluster, personas):
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=1)
    run_pass()
    job.refresh_from_db()
    # Node lost elsewhere: requeued while its old worker is still stopping.
    Job.objects.filter(pk=job.pk).update(state=State.PENDING, attempt=1)
    Worker.objects.filter(job=job).update(state=Worker.State.STOPPING)
    run_pass()
    job.refresh_from_db()
    assert job.state == State.PENDING and job.reason_code == "previous_attempt"
    assert "waits for the workers of its previous attempt to stop" in job.reason  # the core's


def test_usage_is_accounted_per_hour_and_decayed(cluster, personas):
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=4)
    run_pass()
    start = timezone.now().replace(minute=50, second=0, microsecond=0) - timedelta(hours=1)
    Allocation.objects.filter(job=job).update(created_at=start)
    SchedulingPass.objects.update(started_at=start)
    now = start + timedelta(minutes=20)  # crosses an hour boundary: 10 min + 10 min
    totals = account_usage(now, half_life=7 * 24 * 3600)
    assert totals == {(cluster.team_a.pk, cluster.h100.pk): pytest.approx(4 * 20 * 60)}
    hours = sorted(Usage.objects.filter(team=cluster.team_a).values_list("gpu_seconds", flat=True))
    assert hours == [pytest.approx(2400), pytest.approx(2400)]
    decayed = DecayedUsage.objects.get(team=cluster.team_a, flavor=cluster.h100)
    assert decayed.gpu_seconds == pytest.approx(4800)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_passes_never_double_book(cluster, personas):
    if connection.vendor != "postgresql":
        pytest.skip("the advisory lock and concurrent writers need PostgreSQL")
    for _ in range(8):  # 32 GPUs asked, 32 h100 GPUs in the cluster, 16 nominal each
        submit(cluster, personas.lead_a, workers=1, gpus_per_worker=2)
        submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=2)
    barrier = threading.Barrier(2)
    results, errors = [], []

    def one_pass():
        try:
            barrier.wait()
            results.append(run_pass())
        except Exception as exc:  # noqa: BLE001 — collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    gpus = list(Allocation.objects.filter(active=True).values_list("gpu_id", flat=True))
    assert len(gpus) == len(set(gpus)) == 32  # every job admitted exactly once
    assert Job.objects.filter(state=State.ADMITTED).count() == 16


@pytest.mark.django_db(transaction=True)
def test_unique_index_is_the_backstop_when_the_lock_is_bypassed(cluster, personas, monkeypatch):
    """Even two passes that both skip the lock and plan the same GPUs cannot double-book:
    the second one's insert violates the partial unique index and rolls back whole."""
    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    monkeypatch.setattr(scheduling, "_try_lock", lambda: True)
    snapshot_plan = {}
    real_schedule = scheduling.schedule

    def same_plan(snapshot):
        return snapshot_plan.setdefault("plan", real_schedule(snapshot))

    monkeypatch.setattr(scheduling, "schedule", same_plan)
    run_pass()
    Job.objects.filter(pk=job.pk).update(
        state=State.PENDING
    )  # as if the second pass read it pending
    with pytest.raises(IntegrityError):
        run_pass()
    assert Allocation.objects.filter(active=True).count() == 8
    assert SchedulingPass.objects.count() == 1


def test_victims_name_their_preemptor_so_its_reservation_outlives_the_pass(cluster, personas):
    """A reclaim's victims carry their preemptor into the next snapshots, stopping and then
    requeued, and the preemptor is admitted on what they freed (scheduler.preemption)."""
    from portal.core.actions.jobs import requeue_or_fail
    from portal.core.scheduling.snapshot import build_snapshot
    from scheduler import PolicyConfig

    for _ in range(4):  # beta borrows alpha's 16 idle h100 GPUs
        submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=8)
    run_pass()
    gang = submit(cluster, personas.lead_a, workers=2, gpus_per_worker=8)
    run_pass()
    victims = list(Job.objects.filter(state=State.PREEMPTING).values_list("pk", flat=True))
    assert len(victims) == 2
    assert set(Job.objects.filter(pk__in=victims).values_list("preempted_by", flat=True)) == {
        gang.pk
    }
    snap, _ = build_snapshot(timezone.now(), PolicyConfig())
    assert {r.preempted_by for r in snap.running if r.stopping} == {gang.pk}
    assert {r.preempted_by for r in snap.running if not r.stopping} == {None}
    # Its reservation's nodes are stored, read back, and kept by the next pass.
    gang.refresh_from_db()
    freed = sorted(
        set(
            Allocation.objects.filter(job_id__in=victims, active=True).values_list(
                "node__hostname", flat=True
            )
        )
    )
    assert sorted(node for node, _ in gang.reserved_on) == freed
    assert [k for _, k in gang.reserved_on] == [8, 8]
    (mine,) = [j for j in snap.pending if j.id == gang.pk]
    assert mine.reserved_on == tuple((n, k) for n, k in gang.reserved_on)
    # Told to stop 20 s ago (30 s of grace): the next pass expects them in 10 s, not 30.
    told = timezone.now() - timedelta(seconds=20)
    Job.objects.filter(pk__in=victims).update(stop_requested_at=told)
    snap, _ = build_snapshot(timezone.now(), PolicyConfig())
    assert {r.stop_requested_at for r in snap.running if r.stopping} == {told.timestamp()}
    run_pass()
    kept = list(gang.reserved_on)
    gang.refresh_from_db()
    assert gang.state == State.PENDING and gang.reserved_on == kept
    assert gang.reason_code == "waiting_for_preemption"
    assert abs((gang.estimated_start_at - told).total_seconds() - 30) < 1

    Allocation.objects.filter(job_id__in=victims).update(active=False)  # their workers exited
    Worker.objects.filter(job_id__in=victims).update(state=Worker.State.EXITED)
    requeue_or_fail(victims, kind="requeued", message="Stopped.", from_states=[State.PREEMPTING])
    snap, _ = build_snapshot(timezone.now(), PolicyConfig())
    assert {j.preempted_by for j in snap.pending if j.id in victims} == {gang.pk}
    result = run_pass()
    assert result.admitted == [gang.pk]
    gang.refresh_from_db()
    assert gang.state == State.ADMITTED and gang.preempted_by is None
    assert gang.reserved_on == []
    on = Allocation.objects.filter(job=gang, active=True).values_list("node__hostname", flat=True)
    assert sorted(set(on)) == freed  # where its victims were, as reserved
    # The reservation is spent: the victims, still pending, no longer name the gang (else,
    # requeued itself one day, it would be honoured first as if it had preempted anew).
    assert set(Job.objects.filter(pk__in=victims).values_list("state", "preempted_by")) == {
        (State.PENDING, None)
    }


def test_a_reservation_and_the_horizon_it_counted_on_are_stored_and_read_back(cluster, personas):
    """Reservation.until and ending are written beside the nodes (Job.reserved_until,
    reserved_ending) and read back into the next snapshot (PendingJob.reserved_until,
    reserved_ending), so a claim on jobs that reach their max runtime keeps them and the
    horizon it decided with (scheduler.state.mark_ending)."""
    from django.db import transaction

    from portal.core.scheduling.apply import apply_plan
    from portal.core.scheduling.snapshot import build_snapshot
    from scheduler import PolicyConfig
    from scheduler import model as m

    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    on = (("h100-0", 8),)

    def stored(*reservations):
        _, ctx = build_snapshot(timezone.now(), PolicyConfig())
        with transaction.atomic():
            apply_plan(m.Plan(reservations=reservations), ctx)
        snap, _ = build_snapshot(timezone.now(), PolicyConfig())
        [mine] = [j for j in snap.pending if j.id == job.pk]
        return mine.reserved_on, mine.reserved_until, mine.reserved_ending

    until = timezone.now().timestamp() + 270.25
    kept = (on, pytest.approx(until, abs=1e-6), (7, 11))
    assert stored(m.Reservation(job.pk, on, until, (7, 11))) == kept
    job.refresh_from_db()
    assert abs(job.reserved_until.timestamp() - until) < 1e-6
    assert job.reserved_ending == [7, 11]
    # the horizon alone moves, then the jobs alone: written; then none counted: cleared,
    # the nodes kept
    assert stored(m.Reservation(job.pk, on, until + 330, (7, 11)))[1] == pytest.approx(until + 330)
    assert stored(m.Reservation(job.pk, on, until + 330, (7,)))[2] == (7,)
    assert stored(m.Reservation(job.pk, on)) == (on, None, ())
    stored(m.Reservation(job.pk, on, until, (7,)))
    assert stored() == ((), None, ())  # a plan that names it no more clears all three
    job.refresh_from_db()
    assert (job.reserved_on, job.reserved_until, job.reserved_ending) == ([], None, [])


def test_a_plan_not_from_the_snapshot_still_ends_its_preemptors_links(cluster, personas):
    """apply_plan with the context of an earlier snapshot (which does not know the jobs
    the plan admits) finds the links to end in the table."""
    from portal.core.actions.jobs import requeue_or_fail
    from portal.core.scheduling.apply import apply_plan
    from portal.core.scheduling.snapshot import build_snapshot
    from scheduler import PolicyConfig, schedule

    for _ in range(4):
        submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=8)
    run_pass()
    _, early = build_snapshot(timezone.now(), PolicyConfig())  # before the gang exists
    gang = submit(cluster, personas.lead_a, workers=2, gpus_per_worker=8)
    run_pass()
    victims = list(Job.objects.filter(state=State.PREEMPTING).values_list("pk", flat=True))
    Allocation.objects.filter(job_id__in=victims).update(active=False)
    Worker.objects.filter(job_id__in=victims).update(state=Worker.State.EXITED)
    requeue_or_fail(victims, kind="requeued", message="Stopped.", from_states=[State.PREEMPTING])
    snap, _ = build_snapshot(timezone.now(), PolicyConfig())
    plan = schedule(snap)
    assert [a.job_id for a in plan.admissions] == [gang.pk]
    early.now = timezone.now()
    assert apply_plan(plan, early).admitted == [gang.pk]
    assert set(Job.objects.filter(pk__in=victims).values_list("preempted_by", flat=True)) == {None}


def test_cancelling_a_stopping_job_keeps_when_it_was_told_to_stop(cluster, personas):
    """The agent does not restart a stop it is already running, so a preemption's victim
    cancelled during its grace period still stops a grace period after the preemption:
    its `stop_requested_at` stays (the scheduler reads it: RunningJob.stop_requested_at).
    A running job cancelled is told to stop now."""
    from portal.core.actions.jobs import cancel_jobs

    for _ in range(4):  # beta borrows alpha's 16 idle h100 GPUs
        submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=8)
    run_pass()
    submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    run_pass()
    (victim,) = Job.objects.filter(state=State.PREEMPTING)
    told = timezone.now() - timedelta(seconds=20)
    Job.objects.filter(pk=victim.pk).update(stop_requested_at=told)
    running = Job.objects.filter(team=cluster.team_b, state__in=Job.RUNNING_STATES).first()
    assert running.stop_requested_at is None
    assert sorted(cancel_jobs([victim.pk, running.pk], actor=None, message="x")) == sorted(
        [victim.pk, running.pk]
    )
    victim.refresh_from_db()
    running.refresh_from_db()
    assert victim.state == running.state == State.CANCELLED
    assert victim.stop_requested_at == told
    assert abs((running.stop_requested_at - timezone.now()).total_seconds()) < 5


def test_a_requeued_job_keeps_its_stop_time_until_it_is_admitted_again(cluster, personas):
    """A requeue keeps a preemption's stop time (its workers may still be stopping, the
    scheduler reads their end from it) and admission clears it: the new attempt was not
    told to stop (Job.stops_by, the API's stop_requested_at)."""
    from portal.core.actions.jobs import requeue_or_fail

    job = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    run_pass()
    told = timezone.now() - timedelta(seconds=20)
    Job.objects.filter(pk=job.pk).update(state=State.PREEMPTING, stop_requested_at=told)
    requeue_or_fail([job.pk], kind="requeued", message="Stopped.", from_states=[State.PREEMPTING])
    job.refresh_from_db()
    assert job.state == State.PENDING and job.stop_requested_at == told
    Allocation.objects.filter(job=job).update(active=False)  # its workers exited
    Worker.objects.filter(job=job).update(state=Worker.State.EXITED)
    Job.objects.filter(pk=job.pk).update(eligible_at=timezone.now() - timedelta(seconds=1))
    result = run_pass()
    job.refresh_from_db()
    assert result.admitted == [job.pk], (job.reason_code, job.reason)
    job.refresh_from_db()
    assert job.stop_requested_at is None


@pytest.mark.parametrize("on", [False, True])
def test_the_reclaim_backoff_is_kept_by_the_passes_that_reclaim(cluster, personas, settings, on):
    """BERTH_RECLAIM_BACKOFF (Kueue KEP-14468, docs/scheduling.md): the pass that
    reclaims beta's borrowed h100 GPUs records it, and while the cooldown lasts beta's
    next job that would borrow waits `backoff`, told why and until when; once it has
    ended the job starts. Off (the default), nothing is recorded and the job starts."""
    from portal.core.actions.jobs import cancel_job, requeue_or_fail
    from portal.core.models import ReclaimBackoff

    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": on}
    for _ in range(4):  # beta borrows alpha's 16 idle h100 GPUs
        submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=8)
    run_pass()
    gang = submit(cluster, personas.lead_a, workers=1, gpus_per_worker=8)
    reclaimed = run_pass()
    (victim,) = reclaimed.preempted
    rows = list(ReclaimBackoff.objects.values_list("team_id", "flavor__name", "reclaims"))
    assert rows == ([(cluster.team_b.pk, "h100-80gb", 1)] if on else [])
    # The victim stops and is requeued; alpha's gang is cancelled before it starts, so 8
    # GPUs are free, and beta's next job would borrow them.
    Allocation.objects.filter(job_id=victim).update(active=False)
    Worker.objects.filter(job_id=victim).update(state=Worker.State.EXITED)
    requeue_or_fail([victim], kind="requeued", message="Stopped.", from_states=[State.PREEMPTING])
    cancel_job(gang, actor=personas.lead_a)
    late = submit(cluster, personas.lead_b, team=cluster.team_b, workers=1, gpus_per_worker=8)
    result = run_pass()
    late.refresh_from_db()
    if not on:
        assert result.admitted == [late.pk]
        return
    assert result.admitted == [] and late.reason_code == "backoff"
    assert "team beta's borrowed h100-80gb GPUs were reclaimed at" in late.reason
    assert "(reclaim backoff)" in late.reason
    row = ReclaimBackoff.objects.get()
    assert abs((late.estimated_start_at - row.last_reclaim_at).total_seconds() - 60) < 1
    # A minute later the cooldown has ended.
    ReclaimBackoff.objects.update(last_reclaim_at=row.last_reclaim_at - timedelta(seconds=61))
    assert run_pass().admitted == [late.pk]

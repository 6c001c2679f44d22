"""The database itself refuses data that would break an invariant."""

import pytest
from django.db import IntegrityError, transaction

from portal.core.models import Allocation, Job, Quota, Team, Worker


def _job(cluster, **kw):
    return Job.objects.create(
        team=cluster.team_a,
        queue=cluster.queue_a,
        flavor=cluster.h100,
        name="j",
        image="img",
        command=["true"],
        max_runtime_seconds=60,
        **kw,
    )


def _allocate(job, gpu, active=True):
    worker, _ = Worker.objects.get_or_create(
        job=job, attempt=0, rank=0, defaults={"node": gpu.node}
    )
    return Allocation.objects.create(
        job=job, worker=worker, worker_rank=0, node=gpu.node, gpu=gpu, active=active
    )


def test_a_gpu_cannot_have_two_active_allocations(cluster):
    gpu = cluster.nodes[0].gpus.first()
    _allocate(_job(cluster), gpu)
    with pytest.raises(IntegrityError), transaction.atomic():
        _allocate(_job(cluster), gpu)


def test_a_gpu_may_have_many_released_allocations(cluster):
    gpu = cluster.nodes[0].gpus.first()
    _allocate(_job(cluster), gpu, active=False)
    _allocate(_job(cluster), gpu, active=False)
    _allocate(_job(cluster), gpu)
    assert Allocation.objects.filter(gpu=gpu).count() == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"nominal": -1},
        {"nominal": 4, "borrowing_limit": -1},
        {"nominal": 4, "lending_limit": 5},
        {"nominal": 4, "lending_limit": -1},
    ],
)
def test_bad_quota_is_rejected_by_the_database(cluster, fields):
    team = Team.objects.create(slug="gamma", name="Gamma")
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(team=team, flavor=cluster.h100, **fields)
    assert not Quota.objects.filter(team=team).exists()


def test_team_weight_must_be_positive(db):
    with pytest.raises(IntegrityError), transaction.atomic():
        Team.objects.create(slug="zero", name="Zero", weight=0)


def test_job_state_must_be_known(cluster):
    with pytest.raises(IntegrityError), transaction.atomic():
        _job(cluster, state="exploded")


def test_gang_needs_at_least_one_gpu(cluster):
    with pytest.raises(IntegrityError), transaction.atomic():
        _job(cluster, workers=0)


def test_idempotency_key_is_unique_per_team(cluster):
    _job(cluster, idempotency_key="ci-123")
    _job(cluster)  # no key: never conflicts
    _job(cluster)
    with pytest.raises(IntegrityError), transaction.atomic():
        _job(cluster, idempotency_key="ci-123")


def test_job_events_are_append_only(cluster):
    event = _job(cluster).events.create(kind="submitted")
    event.message = "rewritten"
    with pytest.raises(ValueError, match="append-only"):
        event.save()

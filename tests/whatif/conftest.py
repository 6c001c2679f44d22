"""What-if fixtures: a short congested job history on the shared cluster, and an outsider cohort.

The cluster (tests/factories.make_cluster): alpha and beta share cohort
"research", 16 h100 GPUs of nominal quota each, on 4 nodes x 8 h100. Gamma is
a team of another cohort with its own lead: the outsider here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.core.models import Cohort, Job, Membership, Queue
from tests.factories import make_team, make_user

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def gamma(cluster):
    other = Cohort.objects.create(name="vision")
    team = make_team("gamma", cohort=other, quotas={cluster.h100: 0})
    lead = make_user("lead_c")
    Membership.objects.create(user=lead, team=team, role=Membership.Role.LEAD)
    Queue.objects.create(team=team, name="default")
    return team, lead


def add_job(
    cluster, team, queue, *, at, gpus, ran=None, state=Job.State.SUCCEEDED, max_runtime=4 * 3600
):
    """A job submitted `at` after T0; `ran` seconds of run time (None: never started)."""
    submitted = T0 + at
    started = submitted if ran is not None else None
    return Job.objects.create(
        team=team,
        queue=queue,
        name=f"{team.slug}-{int(at.total_seconds())}",
        image="img",
        command=["true"],
        workers=max(1, gpus // 8),
        gpus_per_worker=min(8, gpus),
        flavor=cluster.h100,
        max_runtime_seconds=max_runtime,
        state=state,
        submitted_at=submitted,
        started_at=started,
        finished_at=started + timedelta(seconds=ran) if ran is not None else None,
    )


@pytest.fixture
def history(cluster):
    """Beta floods the h100s with 8-GPU jobs; alpha sends 8-GPU jobs into the queue behind.

    32 h100 GPUs, each team 16 nominal: as configured, alpha waits behind
    beta's borrowed GPUs; with alpha's nominal raised to 32 it may reclaim.
    """
    c = cluster
    jobs = []
    for i in range(12):
        jobs.append(add_job(c, c.team_b, c.queue_b, at=timedelta(minutes=i), gpus=8, ran=2 * 3600))
    for i in range(6):
        jobs.append(add_job(c, c.team_a, c.queue_a, at=timedelta(minutes=20 + i), gpus=8, ran=3600))
    # never started and cancelled: no demand, left out
    add_job(c, c.team_a, c.queue_a, at=timedelta(minutes=5), gpus=8, state=Job.State.CANCELLED)
    return jobs

"""A pipeline's story through the real scheduling pass: submit over the API, the pass
admits what fits, and the API tells where each job runs or why it waits."""

from __future__ import annotations

import pytest

from tests.api.conftest import job_body

try:
    from portal.core.scheduling import run_pass
except ImportError:  # the scheduler core is not importable in this checkout
    run_pass = None

pytestmark = pytest.mark.skipif(run_pass is None, reason="scheduler.schedule not importable")

JOBS = "/api/v1/jobs/"


def test_admitted_gangs_show_their_gpus_and_waiting_ones_say_why(as_member_a, as_viewer_a):
    # alpha: 16 h100 nominal + 16 it may borrow from beta; the cluster has two
    # blocks of two 8-GPU h100 nodes.
    ids = [
        as_member_a.post(JOBS, job_body(name=name, workers=2, gpus_per_worker=8)).json()["id"]
        for name in ("first", "second", "third")
    ]

    run_pass()

    jobs = [as_viewer_a.get(f"{JOBS}{i}/").json() for i in ids]
    assert [j["state"] for j in jobs] == ["admitted", "admitted", "pending"]
    for job in jobs[:2]:
        assert sorted(a["rank"] for a in job["allocations"]) == [0] * 8 + [1] * 8
        assert len({a["node"] for a in job["allocations"]}) == 2
    waiting = jobs[2]
    assert waiting["reason_code"] not in ("", "new") and waiting["reason"]
    assert waiting["position"] == 1 and waiting["allocations"] == []
    queued = as_viewer_a.get(JOBS, {"ordering": "queue", "state": "pending,admitted"}).json()
    assert [j["id"] for j in queued["results"]][-1] == ids[2]

"""The simulator's requeue backoff: a preempted job is requeued with the portal's backoff."""

from __future__ import annotations

import json

import pytest

from scheduler.sim.cli import main
from tests.sim.helpers import job, run, team

HOUR = 3600.0


def thrash_trace(hours=10):
    """A borrower's 10-hour job on the lender's one GPU; the lender runs 1 minute every 5."""
    lender = [job(100 + i, "lender", at=300.0 * i + 1, duration=60) for i in range(hours * 12)]
    return [job(1, "borrower", at=0, duration=10 * HOUR), *lender]


def one_gpu_run(jobs, **kw):
    teams = [team("lender", 1), team("borrower", 0)]
    return run(jobs, nodes=1, gpus=1, policy="fairshare", teams=teams, **kw)


def test_backoff_cuts_the_preemptions_of_a_borrower_that_keeps_being_reclaimed():
    loop, looping = one_gpu_run(thrash_trace(), requeue_backoff_s=0.0)
    _, bounded = one_gpu_run(thrash_trace())  # the portal's defaults: 60 s, at most 3600 s
    assert looping["preemptions"] >= 100  # readmitted after every reclaim
    assert bounded["preemptions"] <= 8 + 10  # 60, 120, ... 1920 s, then once an hour
    assert bounded["lost_gpu_hours"] < looping["lost_gpu_hours"]
    # The lender's guarantee is intact: its jobs wait at most the borrower's grace period.
    assert bounded["per_team"]["lender"]["max_wait_s"] <= 30
    assert loop.recs[1].finished is not None  # it completes once the lender stops


def test_a_job_whose_backoff_ends_when_nothing_else_happens_is_woken():
    jobs = [job(1, "borrower", at=0, duration=1000), job(2, "lender", at=100, duration=10)]
    sim, s = one_gpu_run(jobs, requeue_backoff_s=60.0)
    r = sim.recs[1]
    # Preempted at 100, stopped at 130, eligible at 190 although the lender ended at 140.
    assert s["preemptions"] == 1 and r.pending.eligible_at == r.job.submitted_at + 190
    assert r.finished == r.job.submitted_at + 190 + 1000
    assert r.waited == pytest.approx(60.0)


def test_the_flag_sets_the_backoff_and_the_json_records_it(tmp_path):
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster", "2017-10-01 00:00:00,600.0,1,0,a"]
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out.json"
    args = ["--trace", str(trace), "--nodes", "1", "--gpus-per-node", "8", "--json", str(out)]
    main(args)
    assert json.loads(out.read_text())["setup"]["requeue_backoff_s"] == [60.0, 3600.0]
    main([*args, "--requeue-backoff", "30,600"])
    assert json.loads(out.read_text())["setup"]["requeue_backoff_s"] == [30.0, 600.0]
    main([*args, "--requeue-backoff", "0"])
    assert json.loads(out.read_text())["setup"]["requeue_backoff_s"][0] == 0.0


@pytest.mark.parametrize("bad", ["soon", "60,30", "-1", "1,2,3"])
def test_a_bad_backoff_is_refused(bad, tmp_path):
    with pytest.raises(SystemExit):
        main(["--trace", "x.csv", "--nodes", "1", "--gpus-per-node", "8", "--requeue-backoff", bad])

"""The smallest case of docs/simulation.md, "Bounded waits: what the goal asks of fair
share": a team floods beyond its nominal quota and another team submits one job within
its nominal quota a little later. FIFO makes that job wait behind the flood; fair share
keeps the nominal-quota promise (the job starts after one grace period, by reclaim), and
so the flood's last job waits longer than FIFO's longest wait. Without preemption no
order has both: of five one-hour jobs on two GPUs the fifth to start starts at 2 h or
later, so either a flood job is fifth and waits 2 h, or the late job is and waits 1.5 h,
not a grace period (FIFO). Reclaim adds the lost work of its victim."""

from __future__ import annotations

from tests.sim.helpers import job, run, team

HOUR = 3600.0


def flood():
    jobs = [job(i, "a", at=0, duration=HOUR) for i in (1, 2, 3, 4)]  # team a: nominal 1
    jobs.append(job(5, "b", at=HOUR / 2, duration=HOUR))  # team b: nominal 1, within it
    return jobs


def teams():
    return [team("a", 1), team("b", 1)]


def test_fifo_makes_the_late_job_within_nominal_wait_behind_the_flood():
    sim, s = run(flood(), nodes=1, gpus=2, policy="fifo", teams=teams())
    assert sim.recs[5].waited == 1.5 * HOUR  # b's own quota is lent to a for 1.5 h
    assert s["max_wait_s"] == 1.5 * HOUR
    assert s["preemptions"] == 0


def test_fair_share_keeps_the_promise_and_the_flood_waits_longer_than_fifo_max():
    sim, s = run(flood(), nodes=1, gpus=2, policy="fairshare", teams=teams())
    assert sim.recs[5].waited == 30  # one grace period: reclaim
    assert s["preemptions"] == 1
    flood_max = max(sim.recs[i].waited for i in (1, 2, 3, 4))
    assert flood_max == 2 * HOUR  # the flood's last job waits 2 h, above FIFO's 1.5 h
    assert s["max_wait_s"] > 1.5 * HOUR

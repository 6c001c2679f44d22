"""Starvation bound (PolicyConfig.max_wait; Volcano's sla plugin, sla-waiting-time).

In the fair-share order a job that has waited `max_wait` or more comes before
the jobs of its class (within nominal quota / would borrow) that have not, and
such jobs go oldest first. A borrower of the team furthest above its share is
otherwise passed by every borrower of a lower-share team, for as long as they
keep coming; with the bound it gets the GPUs, the reservation or the cohort
hold once it has waited `max_wait`. Jobs within their nominal quota still go
before every borrower: that quota is guaranteed.
"""

from __future__ import annotations

from scheduler import schedule
from scheduler.ordering import team_key
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, make_job, reasons, verdict


def flood_cluster():
    """24 GPUs in a cohort: f (nominal 2) floods with 12 GPUs of long jobs (share 6);
    s (nominal 4) runs three 4-GPU gangs of 30 min that end one every 10 min (share 3);
    l (nominal 18) lends. Every GPU is busy."""
    c = Cluster().nodes_(3)
    c.team("f", nominal=2, cohort="co").team("s", nominal=4, cohort="co")
    c.team("l", nominal=18, cohort="co")
    for i in range(12):
        c.run(100 + i, "f", on={f"n{i // 8}": 1}, started=NOW - 600, runtime=30 * 24 * HOUR)
    for k, node in enumerate(("n1", "n2", "n2")):
        c.run(200 + k, "s", on={node: 4}, started=NOW - 1200 + 600 * k, runtime=1800)
    return c


def run_flood(steps=6 * 60, **config):
    """s submits a 4-GPU 30-min gang every 10 min, as its oldest ends; f waits with one
    1-GPU job. Return when f's job starts (None: not within `steps` minutes)."""
    c = flood_cluster()
    c.job(1, "f", gpus=1, submitted=NOW - 1, runtime=HOUR)
    sim = Sim(c, explain=False, **config)
    for n in range(steps):
        now = NOW + 60.0 * n
        if n % 10 == 0 and n > 0:
            sim.submit(make_job(1000 + n, "s", gpus=4, submitted=now, runtime=1800))
        sim.step(now)  # Sim raises if a GPU is handed out twice
        if 1 in sim.started:
            return sim.started[1]
    return None


def test_share_order_lets_lower_share_borrowers_pass_a_flooding_team_forever():
    assert run_flood() is None


def test_with_the_bound_the_flooding_teams_borrower_starts_once_it_has_waited_max_wait():
    # starving from NOW + 3599; the next GPUs come back when s's gang ends at NOW + 3600
    assert run_flood(max_wait=HOUR) == NOW + 3600


def test_the_bound_scales_with_max_wait():
    assert run_flood(max_wait=2 * HOUR) == NOW + 7200


def one_free_gpu():
    """f (share 6) and s (share 2.75) both borrow; one GPU of n2 is free."""
    c = Cluster().nodes_(3)
    c.team("f", nominal=2, cohort="co").team("s", nominal=4, cohort="co")
    c.team("l", nominal=18, cohort="co")
    for i in range(12):
        c.run(100 + i, "f", on={f"n{i // 8}": 1}, runtime=30 * 24 * HOUR)
    c.run(200, "s", on={"n1": 4}, runtime=1800)
    c.run(201, "s", on={"n2": 4}, runtime=1800)
    c.run(202, "s", on={"n2": 3}, runtime=1800)
    return c


def test_a_starving_borrower_goes_before_a_lower_share_teams_fresh_borrower():
    def first(**config):
        c = one_free_gpu()
        c.job(1, "f", gpus=1, submitted=NOW - 2 * HOUR)
        c.job(2, "s", gpus=1, submitted=NOW - 60)
        return admitted(schedule(c.snapshot(**config)))

    assert first() == [2]
    assert first(max_wait=HOUR) == [1]
    assert first(max_wait=3 * HOUR) == [2]  # not yet starving: share order


def test_a_starving_borrower_does_not_pass_a_job_within_nominal_quota():
    c = one_free_gpu()
    c.job(1, "f", gpus=1, submitted=NOW - 5 * HOUR)
    c.job(2, "l", gpus=1, submitted=NOW - 60)  # l is within its nominal 18
    assert admitted(schedule(c.snapshot(max_wait=HOUR))) == [2]


def test_starving_jobs_go_oldest_first_whatever_their_share():
    c = one_free_gpu()
    c.job(1, "f", gpus=1, submitted=NOW - 2 * HOUR)  # f: share 6, waited 2 h
    c.job(2, "s", gpus=1, submitted=NOW - 3 * HOUR)  # s: share 2.75, waited 3 h
    assert admitted(schedule(c.snapshot(max_wait=HOUR))) == [2]
    c = one_free_gpu()
    c.job(1, "f", gpus=1, submitted=NOW - 3 * HOUR)
    c.job(2, "s", gpus=1, submitted=NOW - 2 * HOUR)
    assert admitted(schedule(c.snapshot(max_wait=HOUR))) == [1]


def test_the_cohort_hold_goes_to_the_starving_borrower():
    """Both would borrow more idle quota than the cohort has: the first in order holds it."""

    def holder(**config):
        c = Cluster().nodes_(3)
        c.team("f", nominal=2, cohort="co").team("s", nominal=4, cohort="co")
        c.team("l", nominal=18, cohort="co")
        for i in range(12):
            c.run(100 + i, "f", on={f"n{i // 8}": 1}, runtime=30 * 24 * HOUR)
        c.run(200, "s", on={"n1": 4}, runtime=1800)
        c.run(201, "l", on={"n2": 6}, runtime=600)  # l takes back 6: 2 GPUs of idle quota
        c.job(1, "f", gpus=4, submitted=NOW - 2 * HOUR, runtime=HOUR)
        c.job(2, "s", gpus=4, submitted=NOW - 60, runtime=HOUR)
        plan = schedule(c.snapshot(**config))
        codes = reasons(plan)
        assert sorted(codes.values()) == ["cohort_busy", "reserved"], codes
        (held,) = [j for j, code in codes.items() if code == "cohort_busy"]
        return held, plan

    assert holder()[0] == 2
    held, plan = holder(max_wait=HOUR)
    assert held == 1
    assert "it would delay job 1," in verdict(plan, 2).message


def test_team_key_puts_starving_jobs_after_within_nominal_and_by_submit_time():
    old = make_job(1, submitted=NOW - 10)
    new = make_job(2, submitted=NOW)
    within = team_key(False, 0.1, new, 0)
    starving_old = team_key(True, 0.1, old, 1, starving=True)
    starving_new = team_key(True, 9.0, new, 2, starving=True)
    fresh = team_key(True, 9.0, new, 3)
    assert sorted([fresh, starving_new, starving_old, within]) == [
        within,
        starving_old,
        starving_new,
        fresh,
    ]


def test_a_starving_job_gets_a_reservation_when_an_earlier_job_has_the_flavors_only_one():
    """a's gang (within nominal, so first) takes the flavor's reservation on n0; f's
    starving gang would borrow and gets a second one, on n1, so s's long job may not
    take the 4 GPUs of n1 it will need."""

    def plan(**config):
        c = Cluster().nodes_(2)
        c.team("a", nominal=8, cohort="co").team("f", nominal=0, cohort="co")
        c.team("s", nominal=0, cohort="co").team("l", nominal=16, cohort="co")
        c.run(100, "l", on={"n0": 8}, started=NOW - 600, runtime=600 + HOUR)
        c.run(101, "l", on={"n1": 4}, started=NOW - 600, runtime=600 + 2 * HOUR)
        c.job(1, "a", gpus=8, submitted=NOW - 60, runtime=10 * HOUR)
        c.job(2, "f", gpus=8, submitted=NOW - 5 * HOUR)
        c.job(3, "s", gpus=4, submitted=NOW - 30, runtime=10 * HOUR)
        return schedule(c.snapshot(**config))

    before = plan()
    assert admitted(before) == [3]  # f's gang has no reservation: s's long job takes n1
    after = plan(max_wait=HOUR)
    assert admitted(after) == []
    assert reasons(after)[3] == "reserved"
    # (the message names the flavor's first reservation, as with backfill_reservations > 1)
    assert verdict(after, 2).estimated_start == NOW + 2 * HOUR

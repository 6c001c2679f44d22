"""The reclaim backoff per team and flavor (Kueue KEP-14468; scheduler.requeue,
PolicyConfig.reclaim_backoff, off by default): after a team's borrowing of a flavor is
reclaimed, its jobs that would borrow that flavor wait for a cooldown that doubles with
each reclaim in a row; jobs within its nominal quota never wait."""

from __future__ import annotations

import pytest

from scheduler import Plan, Preemption, requeue_backoff, schedule
from scheduler.requeue import (
    RECLAIM_RESET_S,
    count_reclaims,
    reclaim_cooldown_end,
    reclaim_victims,
    reclaimed,
    team_reclaims,
)
from tests.scheduler.helpers import (
    FLAVOR,
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    make_job,
    reasons,
    verdict,
)


def borrowing_team(reclaims):
    """b (nominal 4) runs 2 GPUs; job 2 would borrow 4 of a's idle quota, job 3 fits b's
    nominal quota."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c", reclaims=reclaims)
    c.run(10, "b", on={"n0": 2})
    c.job(2, "b", gpus=4)
    c.job(3, "b", gpus=2)
    return c


@pytest.mark.parametrize("on", [False, True])
def test_a_team_cooling_down_borrows_nothing_but_uses_its_nominal_quota(on):
    c = borrowing_team({FLAVOR: (3, NOW - 200)})  # 3rd in a row: 240 s, until NOW + 40
    plan = schedule(c.snapshot(reclaim_backoff=on))
    if not on:
        assert sorted(admitted(plan)) == [2, 3]
        return
    assert admitted(plan) == [3]
    assert reasons(plan) == {2: "backoff"}
    message = verdict(plan, 2).message
    assert "team b's borrowed h100 GPUs were reclaimed at 1970-01-12T13:43:20Z" in message
    assert "the 3rd reclaim in a row" in message
    assert "may not borrow h100 again before 1970-01-12T13:47:20Z (reclaim backoff)" in message
    assert verdict(plan, 2).estimated_start >= NOW + 40  # not before the cooldown ends


def test_the_cooldown_ends_on_time():
    c = borrowing_team({FLAVOR: (3, NOW - 240)})  # ended just now
    assert sorted(admitted(schedule(c.snapshot(reclaim_backoff=True)))) == [2, 3]


def test_another_flavor_and_another_team_are_not_held_back():
    c = borrowing_team({"a100": (1, NOW)})  # b cools down on another flavor only
    c.team("d", nominal=0, cohort="c", reclaims={"a100": (5, NOW)})
    c.job(4, "d", gpus=1)
    assert sorted(admitted(schedule(c.snapshot(reclaim_backoff=True)))) == [2, 3, 4]


@pytest.mark.parametrize(
    "count, delay", [(1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (40, 3600)]
)
def test_the_cooldown_doubles_per_reclaim_in_a_row_up_to_an_hour(count, delay):
    assert reclaim_cooldown_end(count, NOW) == NOW + delay == NOW + requeue_backoff(count)


def test_reclaims_in_a_row_count_up_within_the_reset_and_start_again_after_it():
    state: dict = {}
    pair = ("b", FLAVOR)
    assert count_reclaims(state, [pair, pair], NOW) == [pair]  # one pass: one reclaim
    assert state[pair] == (1, NOW)
    # during the cooldown (until NOW + 60): jobs that borrowed before it, not a new reclaim
    assert count_reclaims(state, [pair], NOW + 30) == []
    assert state[pair] == (1, NOW)
    end = NOW + 60
    assert count_reclaims(state, [pair], end + RECLAIM_RESET_S) == [pair]  # within the reset
    assert state[pair] == (2, end + RECLAIM_RESET_S)
    end = state[pair][1] + 120
    assert count_reclaims(state, [pair], end + RECLAIM_RESET_S + 1) == [pair]  # quiet: reset
    assert state[pair] == (1, end + RECLAIM_RESET_S + 1)


def test_cooldowns_that_ended_are_not_handed_to_the_pass():
    state = {("b", FLAVOR): (2, NOW - 100), ("d", FLAVOR): (2, NOW - 121), ("d", "a100"): (1, NOW)}
    assert team_reclaims(state, NOW) == {"b": {FLAVOR: (2, NOW - 100)}, "d": {"a100": (1, NOW)}}


def test_only_reclaims_count_not_priority_preemptions():
    plan = Plan(
        preemptions=(
            Preemption(1, "reclaim", "", 9),
            Preemption(2, "priority", "", 8),
            Preemption(3, "reclaim", "", 7),
        )
    )
    assert reclaim_victims(plan) == [1, 3]
    c = Cluster().node("n0").node("n1", flavor="a100")
    running = {
        1: c.run(1, "b", on={"n0": 1}),
        2: c.run(2, "a", on={"n0": 1}),
        3: c.run(3, "d", on={"n1": 1}, flavor="a100"),
    }
    assert reclaimed(plan, running) == [("b", FLAVOR), ("d", "a100")]


def thrash(reclaim_backoff, hours=10):
    """A lender runs a 1-minute job every 5 minutes on its one GPU; a borrower has ten
    10-hour jobs. Each reclaim requeues one of them (which backs off), and without the
    team's backoff the next one takes the GPU as soon as it is idle again."""
    c = Cluster().node("n0", gpus=1)
    c.team("lender", nominal=1, cohort="k").team("borrower", nominal=0, cohort="k")
    for i in range(1, 11):
        c.job(i, "borrower", gpus=1, runtime=10 * HOUR, submitted=NOW - 20 + i)
    sim = Sim(c, backoff=(60.0, 3600.0), reclaim_backoff=reclaim_backoff, explain=True)
    told = []
    for step in range(int(hours * HOUR) // 30):
        now = NOW + 30 * step
        if step % 10 == 0:
            sim.submit(make_job(100 + step, "lender", gpus=1, runtime=60, submitted=now))
        plan = sim.step(now)
        told += [v.message for v in plan.verdicts if "(reclaim backoff)" in v.message]
    waits = [sim.started[j] - (NOW + 30 * (j - 100)) for j in sim.started if j >= 100]
    return sim, waits, told


def test_the_team_backoff_bounds_thrash_that_the_job_backoff_leaves():
    """Each job's own requeue backoff does not stop the borrower: its next job borrows the
    GPU the moment it is idle, and is reclaimed 5 minutes later, 120 times in 10 h. With
    the team's backoff the borrower borrows again after 60, 120, ... 1920 s, then once an
    hour: at most 1 + log2(3600 / 60) + 1 reclaims before the cap, then one per hour. The
    lender's jobs start within the grace period either way."""
    loop, loop_waits, _ = thrash(False)
    bounded, bounded_waits, told = thrash(True)
    assert len(loop.preempted) >= 100
    assert len(bounded.preempted) <= 8 + 10
    assert max(loop_waits) <= 30 and max(bounded_waits) <= 30
    assert len(loop_waits) == len(bounded_waits) == 120  # every lender job ran
    assert told and all("team borrower's borrowed h100 GPUs were reclaimed" in m for m in told)


@pytest.mark.parametrize("priority", [0, 1])
def test_a_job_within_nominal_once_its_teams_stopping_job_stops_is_not_held_back(priority):
    """b cools down and its job 10 stops; job 20 fits b's nominal quota once it has
    stopped (Pass.within_nominal), so it starts as with the rule off. Before, the gate
    asked the ledger, which still counts job 10: job 20 was told `backoff` and, with
    priority 1, preempted b's 10-hour job 11 to start (a review's case)."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c")
    c.team("b", nominal=8, cohort="c", reclaims={FLAVOR: (1, NOW - 10)})
    c.run(10, "b", on={"n0": 4}, stopping=True, stop_requested=NOW - 5)
    c.run(11, "b", on={"n0": 4}, runtime=10 * HOUR)
    c.job(20, "b", gpus=4, priority=priority)
    plan = schedule(c.snapshot(reclaim_backoff=True))
    assert plan.preemptions == () and admitted(plan) == [20]


@pytest.mark.parametrize("on", [False, True])
def test_a_job_its_quota_refuses_is_told_quota_not_the_backoff(on):
    """b may not borrow at all (borrowing limit 0): its job waits `quota` for its own job
    to end in 10 h, cooling down or not, and keeps its quota hold (a review's case: told
    the backoff, it was promised a start at the cooldown's end)."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c")
    c.team("b", nominal=4, cohort="c", borrowing_limit=0, reclaims={FLAVOR: (1, NOW - 10)})
    c.run(10, "b", on={"n0": 4}, runtime=10 * HOUR)
    c.job(2, "b", gpus=2, runtime=HOUR)
    v = verdict(schedule(c.snapshot(reclaim_backoff=on)), 2)
    assert v.reason_code == "quota" and v.estimated_start >= NOW + 9 * HOUR


def test_a_job_told_a_hold_first_is_not_promised_a_start_before_the_cooldown_ends():
    """b cools down until NOW + 3590; its job 40 would borrow and outlasts d's cohort hold
    (from NOW + 300), which the gate tells first (`reserved`): its estimate still waits
    for the cooldown (a review's case: NOW + 360)."""
    c = Cluster()
    for i in range(5):
        c.node(f"n{i}")
    for t in "abde":
        reclaims = {FLAVOR: (7, NOW - 10)} if t == "b" else None
        c.team(t, nominal=8, cohort="c", weight=10 if t == "d" else 1, reclaims=reclaims)
    c.run(10, "a", on={"n0": 8}, runtime=100 * HOUR)
    c.run(11, "b", on={"n1": 4}, runtime=100 * HOUR)
    c.run(20, "d", on={"n2": 8}, runtime=100 * HOUR)
    c.run(21, "d", on={"n3": 8}, started=NOW - 3300, runtime=HOUR)  # ends at NOW + 300
    c.run(22, "d", on={"n1": 4}, runtime=100 * HOUR)
    c.job(30, "d", gpus=4, runtime=60)  # cohort_busy: the cohort hold, from NOW + 300
    c.job(40, "b", gpus=8, runtime=HOUR)  # would borrow 4, and outlasts the hold
    plan = schedule(c.snapshot(reclaim_backoff=True, explain=True))
    assert verdict(plan, 40).reason_code == "reserved"
    assert verdict(plan, 40).estimated_start >= NOW + 3590


def test_the_estimate_counts_the_nominal_quota_the_backoff_leaves_free():
    """b cools down until NOW + 3590; its 8-GPU job would borrow 4 now, and fits b's
    nominal quota once b's 4-GPU job ends at NOW + 600: it is estimated then, not at
    the cooldown's end (a review's case: told +3590, it started at +600)."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c")
    c.team("b", nominal=8, cohort="c", reclaims={FLAVOR: (7, NOW - 10)})
    c.run(11, "b", on={"n0": 4}, started=NOW - HOUR + 600, runtime=HOUR)  # ends at NOW + 600
    c.job(40, "b", gpus=8, runtime=HOUR)
    plan = schedule(c.snapshot(reclaim_backoff=True, explain=True))
    assert verdict(plan, 40).reason_code == "backoff"
    assert verdict(plan, 40).estimated_start == NOW + 600
    sim = Sim(c, reclaim_backoff=True)
    sim.reclaims[("b", FLAVOR)] = (7, NOW - 10)
    assert sim.start_of(40, every=30, passes=40) == NOW + 600

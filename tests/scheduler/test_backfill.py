"""Backfill with a reservation (Slurm's rule): lower jobs never delay the top blocked job."""

from dataclasses import replace
from itertools import count, cycle

import pytest

from scheduler import POLICIES, schedule
from scheduler.gates import Gate
from scheduler.policies import Policy, fair_share_order, register_policy
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    make_job,
    make_team,
    reasons,
    verdict,
)


def two_nodes_busy():
    """n0 busy until +1000, n1 half busy until +3000; a 16-GPU gang must wait for both."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 8}, started=NOW - 1000, runtime=2000)
    c.run(11, on={"n1": 4}, started=NOW - 1000, runtime=4000)
    c.job(1, workers=2, gpus=8)
    return c


@pytest.mark.parametrize("policy", ["fairshare", "fifo-backfill"])
def test_short_job_backfills_long_job_waits(policy):
    c = two_nodes_busy()
    c.job(2, gpus=4, runtime=5000)  # fits n1 now, but the gang needs n1 at +3000
    c.job(3, gpus=4, runtime=500)  # ends long before +3000
    plan = schedule(c.snapshot(policy=policy))
    assert admitted(plan) == [3]
    assert reasons(plan) == {1: "no_capacity", 2: "reserved"}
    assert verdict(plan, 1).estimated_start == NOW + 3000
    assert "reserved for it from 1970-01-12T14:36:40Z" in verdict(plan, 1).message  # NOW + 3000
    assert "would delay job 1" in verdict(plan, 2).message
    assert "at most 50 min" in verdict(plan, 2).message


def test_long_job_may_use_gpus_the_reservation_does_not_need():
    c = two_nodes_busy()
    c.node("n2", block="b2")  # another block: the gang cannot use it
    c.job(3, gpus=8, runtime=5000)
    plan = schedule(c.snapshot())
    assert admitted(plan) == [3]
    assert [w.node for w in plan.admissions[0].placement] == ["n2"]


def test_gpus_released_before_the_reservation_are_not_held_twice():
    # n0: 4 free now, 4 more at +1000; n1: all 8 at +2000. The gang starts at
    # +2000 and needs n0's 4 free GPUs, but none of n1's: nothing else is free.
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 4}, started=NOW, runtime=1000)
    c.run(11, on={"n1": 8}, started=NOW, runtime=2000)
    c.job(1, workers=2, gpus=8)
    c.job(2, gpus=4, runtime=5000)
    c.job(3, gpus=4, runtime=2000)  # ends exactly at the reservation: allowed
    plan = schedule(c.snapshot())
    assert reasons(plan) == {1: "no_capacity", 2: "reserved"}
    assert admitted(plan) == [3]


def test_without_backfill_a_job_waiting_for_gpus_blocks_its_flavor():
    c = two_nodes_busy()
    c.job(2, gpus=4, runtime=500)
    c.job(3, gpus=1, flavor="a100")  # another flavor is not blocked (no nodes here)
    plan = schedule(c.snapshot(backfill=False))
    assert admitted(plan) == []
    assert reasons(plan) == {1: "no_capacity", 2: "fifo_blocked", 3: "no_nodes"}


def test_quota_blocked_job_holds_its_teams_quota_not_gpus():
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=9).team("b", nominal=8)
    c.run(10, "a", on={"n0": 4}, runtime=10**6)
    c.run(11, "a", on={"n0": 4}, started=NOW, runtime=1000)
    c.job(1, "a", gpus=4)  # a uses 8 of 9: its quota frees when job 11 ends at +1000
    c.job(2, "b", gpus=4, runtime=10**6)  # another team: no GPUs are held for job 1
    c.job(3, "a", gpus=1, runtime=10**6)  # fits a's quota now, but would outlast +1000
    plan = schedule(c.snapshot(policy="fifo-backfill"))
    assert admitted(plan) == [2]
    assert reasons(plan) == {1: "quota", 3: "reserved"}
    assert verdict(plan, 1).estimated_start == NOW + 1000
    assert "quota from 1970-01-12T14:03:20Z" in verdict(plan, 3).message  # NOW + 1000


def test_a_job_its_quota_refuses_anyway_is_not_told_it_could_start_now():
    """A quota hold says the job could start now if it ended before the hold's time;
    that is false of a job its team's limit cannot take at all (a at 8 of 8): it is
    still held (`reserved`: told `quota` it would try to preempt), and told so."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 4}, runtime=10**6)
    c.run(11, "a", on={"n0": 4}, started=NOW, runtime=1000)
    c.job(1, "a", gpus=4)
    c.job(3, "a", gpus=1, runtime=10**6)
    plan = schedule(c.snapshot(policy="fifo-backfill"))
    assert reasons(plan) == {1: "quota", 3: "reserved"}
    message = verdict(plan, 3).message
    assert "could start now" not in message
    assert "team a uses 8 of 8 nominal and may hold at most 8, so it could not start now" in (
        message
    )


# -- no starvation ------------------------------------------------------------


@pytest.fixture
def greedy():
    """A policy without reservations: backfill that may delay the top job."""
    register_policy(Policy("greedy-test", fair_share_order, lambda config: Gate()))
    yield "greedy-test"
    del POLICIES["greedy-test"]


def busy_cluster(stream_team):
    """8 nodes x 8 GPUs, all held by 1-GPU jobs ending at staggered times."""
    c = Cluster().nodes_(8)
    c.team("a", nominal=64).team("s", nominal=64)
    runtimes = cycle([600.0, 1800.0, 3600.0, 900.0, 2400.0])
    for i in range(64):
        c.run(
            1000 + i,
            stream_team,
            on={f"n{i // 8}": 1},
            started=NOW - (i * 37) % 600,
            runtime=next(runtimes),
        )
    longest = max(r.max_runtime for r in c.running)
    c.job(1, "a", workers=8, gpus=8, submitted=NOW, runtime=3600)
    return c, longest


def run_stream(sim, stream_team, steps, step=60.0):
    """Submit 10 one-GPU jobs a minute, more than the cluster drains; return the gang's start."""
    ids = count(10_000)
    runtimes = cycle([300.0, 1200.0, 5000.0, 60.0, 2000.0])
    for n in range(steps):
        now = NOW + n * step
        for _ in range(10):
            jid = next(ids)
            sim.submit(
                make_job(
                    jid, stream_team, gpus=1, submitted=now + jid * 1e-6, runtime=next(runtimes)
                )
            )
        sim.step(now)
        if 1 in sim.started:
            return sim.started[1]
    return None


@pytest.mark.parametrize("stream_team", ["a", "s"])
@pytest.mark.parametrize("policy", ["fairshare", "fifo-backfill"])
def test_big_gang_is_not_starved_by_a_stream_of_small_jobs(policy, stream_team):
    c, longest = busy_cluster(stream_team)
    sim = Sim(c, policy=policy)
    started = run_stream(sim, stream_team, steps=int(longest // 60) + 3)
    assert started is not None, "the 64-GPU gang starved"
    assert started - NOW <= longest
    assert len(sim.started) > 10  # small jobs did backfill meanwhile


def test_the_starvation_check_fails_without_reservations(greedy):
    c, longest = busy_cluster("s")
    sim = Sim(c, policy=greedy)
    assert run_stream(sim, "s", steps=int(2 * longest // 60)) is None


@pytest.mark.parametrize("policy", ["fairshare", "fifo-backfill"])
@pytest.mark.parametrize("limit", [1, 2])
def test_a_second_reservation_keeps_a_long_job_off_the_next_gangs_gpus(policy, limit):
    # n0 frees at +1000 and is reserved for job 1. Job 2 fits next on n1 at +2000 (4 GPUs
    # free now, 4 at +2000), after job 1 has taken n0. A long 4-GPU job would take n1's
    # free GPUs; only a second reservation keeps them for job 2 (Slurm plans every job).
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 8}, started=NOW - 1000, runtime=2000)
    c.run(11, on={"n1": 4}, started=NOW - 1000, runtime=3000)
    c.job(1, gpus=8, runtime=3000)
    c.job(2, gpus=8, runtime=3000)
    c.job(3, gpus=4, runtime=10_000)
    c.job(4, gpus=4, runtime=900)  # ends before both reservations: may use anything
    plan = schedule(c.snapshot(policy=policy, backfill_reservations=limit))
    if limit == 1:
        assert admitted(plan) == [3]
        assert reasons(plan)[2] == "no_capacity"  # and job 3 took what job 4 needed
    else:
        assert admitted(plan) == [4]
        assert reasons(plan) == {1: "no_capacity", 2: "no_capacity", 3: "reserved"}


@pytest.mark.parametrize("policy", ["fairshare", "fifo-backfill"])
def test_a_later_reservations_surplus_does_not_free_an_earlier_ones_gpus(policy):
    # n0: 4 free now, 4 more at +1000. Job 1 (8 GPUs) is reserved n0 from +1000 and
    # needs its 4 free GPUs kept. Job 2 (2 GPUs, after job 1 on n0 at +4000) needs none
    # of them: n0 gives back 4 before its start, 2 more than it takes. That surplus is
    # not job 1's to lose: a long 2-GPU job must not take 2 of the 4 it needs.
    c = Cluster().node("n0")
    c.team("a", nominal=64)
    c.run(10, on={"n0": 4}, started=NOW - 1000, runtime=2000)
    c.job(1, gpus=8, runtime=3000)
    c.job(2, gpus=2, runtime=10_000)
    c.job(3, gpus=2, runtime=10_000)
    plan = schedule(c.snapshot(policy=policy, backfill_reservations=2))
    assert admitted(plan) == []
    assert verdict(plan, 1).estimated_start == NOW + 1000
    assert reasons(plan)[3] == "reserved"


def test_a_job_no_free_gpu_holds_is_not_told_it_could_start_now_if_shorter():
    # a uses 12 of 16; job 1 (8 GPUs) holds a's quota from +1000, when job 11 ends. Job 2
    # (4 GPUs) fits a's quota but no free GPU: n0 and n1 are full. It was told "it could
    # start now if its max runtime were at most 16 min"; shorter, it would still wait.
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=16).team("e", nominal=8)
    c.run(10, "a", on={"n0": 8}, runtime=10**6)
    c.run(11, "a", on={"n1": 4}, started=NOW, runtime=1000)
    c.run(12, "e", on={"n1": 4}, runtime=10**6)
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=4, runtime=10**6)
    plan = schedule(c.snapshot())
    assert reasons(plan) == {1: "quota", 2: "reserved"}
    message = verdict(plan, 2).message
    assert "could start now" not in message
    assert "which needs the team's quota from 1970-01-12T14:03:20Z" in message  # NOW + 1000
    assert "nor do the free GPUs it may use hold it now" in message
    c.pending[-1] = make_job(2, "a", gpus=4, runtime=900)
    assert reasons(schedule(c.snapshot()))[2] == "no_capacity"


def _passed_by_own_short_job() -> Sim:
    """Teams a and b, no cohort, nominal 16 each on 18 GPUs. b's two 8-GPU jobs should
    end in an hour; a's 2x8 gang 1 is reserved for then, and a's 1-GPU job 2 (50 min)
    is backfilled beside it. b's jobs end after 10 minutes instead, and b's 8-GPU job 3
    (100 h) arrives at 5 minutes; a's usage share is the lower."""
    c = Cluster().nodes_(2).node("s", gpus=2)
    c.team("a", nominal=16).team("b", nominal=16, decayed={"h100": 1e7})
    c.run(10, "b", on={"n0": 8}, started=NOW - HOUR, runtime=2 * HOUR)
    c.run(11, "b", on={"n1": 8}, started=NOW - HOUR, runtime=2 * HOUR)
    c.job(1, "a", workers=2, gpus=8, runtime=100 * HOUR)
    c.job(2, "a", gpus=1, runtime=50 * 60)
    sim = Sim(c)
    sim.runs[10] = sim.runs[11] = HOUR + 600
    return sim


def test_a_gang_keeps_its_place_and_gpus_when_its_own_backfilled_job_outlasts_the_wait():
    """With b's jobs gone, gang 1 is over a's nominal quota by job 2 alone, which
    passed it. Ordered as one that would borrow, behind b's job 3 within nominal, it
    lost the GPUs to job 3 and waited its 100 hours. Now it keeps its place in the
    order (Pass.ordered_within) and its GPUs are reserved from job 2's end: job 3
    waits `reserved`, and the gang starts when job 2 ends (50 min)."""
    sim = _passed_by_own_short_job()
    for t in range(0, 2 * 3600, 60):
        if t == 300:
            sim.submit(make_job(3, "b", gpus=8, runtime=100 * HOUR, submitted=NOW + t))
        plan = sim.step(NOW + t)
        if t == 600:
            gang, other = verdict(plan, 1), verdict(plan, 3)
            assert gang.reason_code == "quota"
            assert gang.estimated_start == NOW + 50 * 60
            assert other.reason_code == "reserved"
            assert "it would delay job 1" in other.message
    assert sim.started[1] == NOW + 50 * 60
    assert 3 not in sim.started or sim.started[3] > NOW + 50 * 60


def test_a_team_whose_share_is_higher_still_goes_first_within_nominal():
    """The same, with b's share the lower: b's job 3 comes first in fair share, as it
    would have without job 2, and takes its GPUs; only the passed job's effect is
    undone, not the share order."""
    sim = _passed_by_own_short_job()
    sim.teams = tuple(
        make_team(t.name, 16, decayed={"h100": 1e7} if t.name == "a" else None) for t in sim.teams
    )
    for t in range(0, 2 * 3600, 60):
        if t == 300:
            sim.submit(make_job(3, "b", gpus=8, runtime=100 * HOUR, submitted=NOW + t))
        sim.step(NOW + t)
    assert sim.started[3] == NOW + 600
    assert 1 not in sim.started


def _gang_behind_a_team_over_quota(c: Cluster) -> Cluster:
    """b's 2x8 gang 2 fits its quota and waits for GPUs (n1 frees in 1 h, n2 in 2 h);
    c's 10-hour job 3 would delay it. a (nominal 8, no cohort) is over its quota."""
    c.team("b", nominal=16, decayed={"h100": 1e8}).team("c", nominal=24, decayed={"h100": 1e9})
    c.run(11, "c", on={"n1": 8}, started=NOW - 600, runtime=HOUR + 600)
    c.run(12, "c", on={"n2": 8}, started=NOW - 600, runtime=2 * HOUR + 600)
    c.job(2, "b", workers=2, gpus=8, runtime=HOUR)
    c.job(3, "c", gpus=8, runtime=10 * HOUR)
    return c


@pytest.mark.parametrize(
    "case", ["started_before_it", "preempted_in_this_pass", "released_from_its_dependency"]
)
def test_only_jobs_that_passed_a_job_are_counted_out_of_its_order(case):
    """a's job 1 is over a's nominal quota by jobs that did not pass it: a
    lower-priority job running since before job 1 was submitted, or a later job that
    a's priority-5 job 5 preempts in this pass (`settled` leaves it out already), or a
    job that started while job 1 was held for its dependency, out of the queue (its
    release is its `eligible_at`; an adversarial helper's case).
    Counted as having passed it, job 1 was ordered within nominal and took the
    flavor's only reservation from 10 h on; b's gang 2 got none and c's job 3 took the
    GPUs it needed (a review's cases). Gang 2 keeps the reservation, job 3 waits."""
    c = Cluster().nodes_(4)
    c.team("a", nominal=8)
    if case == "started_before_it":
        c.run(10, "a", on={"n0": 8}, started=NOW - 5 * HOUR, runtime=15 * HOUR, preemptible=False)
        c.job(1, "a", gpus=8, priority=5, submitted=NOW - 60, runtime=HOUR)
    elif case == "released_from_its_dependency":
        c.run(10, "a", on={"n0": 8}, started=NOW - 5 * HOUR, runtime=15 * HOUR, preemptible=False)
        c.job(1, "a", gpus=8, submitted=NOW - 10 * HOUR, runtime=HOUR)
        c.pending[-1] = replace(c.pending[-1], eligible_at=NOW - 30)
    else:
        c.run(10, "a", on={"n0": 4}, started=NOW - 5 * HOUR, runtime=15 * HOUR)
        c.run(13, "a", on={"n0": 4}, submitted=NOW - 100, started=NOW - 90, runtime=15 * HOUR)
        c.job(5, "a", gpus=4, priority=5, submitted=NOW - 30)
        c.job(1, "a", gpus=4, submitted=NOW - 200, runtime=HOUR)
    plan = schedule(_gang_behind_a_team_over_quota(c).snapshot())
    assert verdict(plan, 1).reason_code == "quota"
    assert "reserved for it from" in verdict(plan, 2).message
    assert verdict(plan, 3).reason_code == "reserved"


def test_a_reservation_holds_no_gpu_an_earlier_one_takes_while_it_runs():
    """One 8-GPU node: e's job 10 holds 4 GPUs for 10 h, e's job 11 4 more until +300 s.
    With three reservations, a's job 1 (2 GPUs, 10 min) is reserved from +300 s and job 2
    (4 GPUs, 30 min) from +900 s, when job 1 gives its 2 back. Job 3 (1 GPU, 1 h) fits
    the 2 GPUs left at +300 s, but would still hold one at +900 s, when job 2 needs all
    4. Asked at its start alone, it was told +300 s, was held for job 2 at +300 s and
    started at +2700 s (an adversarial tester's case). The whole time it would run is
    asked (backfill._place): it is told +2700 s, and every job starts when it is told."""
    config = {"backfill_reservations": 3}
    c = Cluster().node("n0", gpus=8)
    c.team("a", nominal=8).team("e", nominal=8)
    c.run(10, "e", on={"n0": 4}, runtime=10 * HOUR, started=NOW)
    c.run(11, "e", on={"n0": 4}, runtime=900, started=NOW - 600)
    c.job(1, "a", gpus=2, priority=2, runtime=600)
    c.job(2, "a", gpus=4, priority=1, runtime=1800)
    c.job(3, "a", gpus=1, priority=0, runtime=HOUR)
    plan = schedule(c.snapshot(**config))
    told = {j: verdict(plan, j).estimated_start for j in (1, 2, 3)}
    assert told == {1: NOW + 300, 2: NOW + 900, 3: NOW + 2700}, verdict(plan, 3).message
    sim = Sim(c, **config)
    for k in range(80):
        sim.step(NOW + 60.0 * k)
    late = {j: (t - NOW, sim.started.get(j, NOW + 1e9) - NOW) for j, t in told.items()}
    assert all(s <= t + 60 for t, s in late.values()), f"(told, started): {late}"


@pytest.mark.parametrize(
    ("config", "submitted"),
    [({"backfill_reservations": 2}, NOW - 500), ({"max_wait": HOUR}, NOW - 2 * HOUR)],
    ids=["two reservations", "a starving job's"],
)
def test_a_later_reservation_starts_when_its_team_has_the_quota(config, submitted):
    """One 8-GPU node, busy with e's jobs: 4 GPUs free at +300 s, 4 more at +600 s. Team
    a (nominal 4) waits with job 1 (4 GPUs, 1 h), reserved from +300 s, and job 2 (2
    GPUs, 2 min), which ends before then if started now (not held for job 1's quota),
    but no GPU is free: it gets a reservation of its own (a second one, or, starving, the
    flavor's one more). Placed on GPUs alone it was told +600 s, when job 1 holds a's
    whole nominal quota until +3900 s, and started at +3900 s (an adversarial tester's
    case). Its quota is asked at its start with the earlier reservations' jobs running
    (backfill._with_quota): told +3900 s, and every job starts when it is told."""
    c = Cluster().node("n0", gpus=8)
    c.team("a", nominal=4).team("e", nominal=8)
    c.run(10, "e", on={"n0": 4}, runtime=900, started=NOW - 600)
    c.run(11, "e", on={"n0": 4}, runtime=1200, started=NOW - 600)
    c.job(1, "a", gpus=4, priority=1, runtime=HOUR)
    c.job(2, "a", gpus=2, priority=0, runtime=120, submitted=submitted)
    plan = schedule(c.snapshot(**config))
    told = {j: verdict(plan, j).estimated_start for j in (1, 2)}
    assert told == {1: NOW + 300, 2: NOW + 3900}, verdict(plan, 2).message
    sim = Sim(c, **config)
    for k in range(80):
        sim.step(NOW + 60.0 * k)
    late = {j: (t - NOW, sim.started.get(j, NOW + 1e9) - NOW) for j, t in told.items()}
    assert all(s <= t + 60 for t, s in late.values()), f"(told, started): {late}"


@pytest.mark.parametrize("preemption", [True, False])
def test_three_reservations_of_a_team_count_each_others_quota(preemption):
    """Team a (nominal 8) has three 4-GPU, 1-hour jobs, each reserved (three
    reservations): job 1 (1x4) from +1000 s, job 2 (2x2) from +200 s, job 3 (4x1) from
    +100 s. Each pair fits a's quota at +1000 s, all three do not. Counted with only the
    reservations planned before it, the first's quota looked free at its start: with
    preemption, job 3 started and a's job 2 preempted it, its work lost; without, job 2,
    told +200 s, started at +3720 s (a review's case). Every reservation's quota now
    counts every other one running then: each job starts when it is told, and none
    of a's jobs is preempted."""
    config = {"backfill_reservations": 3, "preemption": preemption}
    c = Cluster().nodes_(7)
    c.team("a", nominal=8).team("e", nominal=100)
    ids = count(100)
    c.run(next(ids), "e", on={"n0": 4}, started=NOW, runtime=1000)
    c.run(next(ids), "e", on={"n0": 4}, started=NOW, runtime=100 * HOUR)
    for n in ("n1", "n2"):
        c.run(next(ids), "e", on={n: 2}, started=NOW, runtime=200)
        c.run(next(ids), "e", on={n: 6}, started=NOW, runtime=100 * HOUR)
    for n in ("n3", "n4", "n5", "n6"):
        c.run(next(ids), "e", on={n: 1}, started=NOW, runtime=100)
        c.run(next(ids), "e", on={n: 7}, started=NOW, runtime=100 * HOUR)
    c.job(1, "a", workers=1, gpus=4, priority=3, runtime=HOUR)
    c.job(2, "a", workers=2, gpus=2, priority=2, runtime=HOUR)
    c.job(3, "a", workers=4, gpus=1, priority=1, runtime=HOUR)
    plan = schedule(c.snapshot(**config))
    told = {j: verdict(plan, j).estimated_start for j in (1, 2, 3)}
    sim = Sim(c, **config)
    for k in range(150):
        sim.step(NOW + 60.0 * k)
    assert sim.preempted == []
    late = {j: (t - NOW, sim.started.get(j, NOW + 1e9) - NOW) for j, t in told.items()}
    assert all(s <= t + 60 for t, s in late.values()), f"(told, started): {late}"

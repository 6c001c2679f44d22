"""A review of the stop-time and explain fixes (2026-12-06): cases that failed on the
first version (ef85694) and pass since (spare stopping GPUs by Stops.surplus, each
reservation's own ready time, preemptors told only the stops they draw on, target
times from the spare stops by bisection, Pass.ahead_in_queue's answer kept per shape).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler import schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, preempted, verdict
from tests.scheduler.test_reclaim_stop_times import _slow_stopper_beside_free_gpus

LONG = 100 * HOUR


# -- 1. _waits_longer / _earliest still count a node's surplus as on - resv ------------


def _hidden_free_beside_slow_stop() -> Cluster:
    """The commit's own fixture (n0: 2 free, b's job 11 on 4, x's cancelled job 10 on 2
    stopping at +590) plus n1, where x's cancelled job 21 frees 2 GPUs at +30 s, and y's
    job 2 (2 GPUs, within nominal, no victims needed)."""
    c = Cluster()
    c.node("n0", gpus=8).node("n1", gpus=8)
    c.team("a", nominal=6, cohort="c").team("b", nominal=0, cohort="c")
    c.team("x", nominal=4).team("y", nominal=2)
    c.run(10, "x", on={"n0": 2}, stopping=True, grace=600.0, stop_requested=NOW - 10, runtime=LONG)
    c.run(11, "b", on={"n0": 4}, runtime=LONG)
    c.run(20, "x", on={"n1": 6}, preemptible=False, runtime=LONG)
    c.run(21, "x", on={"n1": 2}, stopping=True, grace=30.0, stop_requested=NOW, runtime=LONG)
    c.job(1, "a", gpus=6, runtime=LONG)
    c.job(2, "y", gpus=2, runtime=LONG)
    return c


def test_a_waiting_job_is_not_placed_behind_a_slow_stop_that_a_reservation_left_over():
    """Job 1 reclaims job 11; its reservation on n0 now draws on job 11's 4 GPUs and
    *hides the 2 free ones*, so job 10's 2 GPUs (stop at +590) are n0's surplus in rule
    2's view although on[n0] == resv[n0] == 6. Job 2 (no victims) is placed by best fit
    on n0; `_waits_longer` asks `on > resv` (6 > 6: no), so it is never moved, and
    `_earliest` would not help either (it counts what `_future` gave back as on - resv
    = 0). n1 frees 2 GPUs at +30 s and they stay idle: job 2 starts at +600 s."""
    plan = schedule(_hidden_free_beside_slow_stop().snapshot())
    assert preempted(plan) == [11]
    assert verdict(plan, 2).estimated_start <= NOW + 30, verdict(plan, 2).message
    sim = Sim(_hidden_free_beside_slow_stop())
    sim.stop_at[10], sim.stop_at[21] = NOW + 590, NOW + 30
    assert sim.start_of(2, 30.0, 25) <= NOW + 60  # starts at NOW + 600


# -- 2. Stops.ready is one time per node (the latest holder's) ------------------------


def _two_preemptors_on_one_node(second: bool) -> Cluster:
    """n0 (8 GPUs): 2 free; b's job 10 stopping for a's job 1 (stops at +30 s); x's
    cancelled jobs 11 and 12 stopping on 2 GPUs each (+600 s). Job 1 kept its target
    n0:4 (2 free + job 10's 2). `second`: y's job 2 (2 GPUs) waits for x's stopping GPUs
    on n0. z's job 3 (2 GPUs) comes last."""
    c = Cluster()
    c.node("n0", gpus=8)
    c.team("a", nominal=4, cohort="c").team("b", nominal=0, cohort="c")
    c.team("x", nominal=8).team("y", nominal=2).team("z", nominal=2)
    v = c.run(10, "b", on={"n0": 2}, stopping=True, grace=30.0, stop_requested=NOW, runtime=LONG)
    c.running[-1] = replace(v, preempted_by=1)
    c.run(11, "x", on={"n0": 2}, stopping=True, grace=600.0, stop_requested=NOW, runtime=LONG)
    c.run(12, "x", on={"n0": 2}, stopping=True, grace=600.0, stop_requested=NOW, runtime=LONG)
    j = c.job(1, "a", gpus=4, runtime=LONG)
    c.pending[-1] = replace(j, reserved_on=(("n0", 4),))
    if second:
        c.job(2, "y", gpus=2, runtime=LONG)
    c.job(3, "z", gpus=2, runtime=LONG)
    return c


def test_a_second_preemptor_on_the_node_does_not_unhide_the_first_ones_free_gpus():
    """Job 1's reservation (ready +30 s) hides n0's 2 free GPUs. Job 2's reservation on
    the same node is ready only at +600 s and `Stops.reserve` sets ready[n0] = max(30,
    600): `_draws` then counts jobs 11/12 (stopping by +600) as 'soon' for *both*
    reservations (soon = min(6, 6) = 6, free = 0), `_rehide` gives the 2 free GPUs
    back, and z's job 3 is admitted on them. Job 1 starts at +600 s instead of +30 s
    (without job 2 it starts at +30 s): the case the commit fixed, with two holders."""
    plan = schedule(_two_preemptors_on_one_node(True).snapshot())
    assert 3 not in admitted(plan), plan.reservations
    sim = Sim(_two_preemptors_on_one_node(True))
    sim.stop_at[10], sim.stop_at[11], sim.stop_at[12] = NOW + 30, NOW + 600, NOW + 600
    assert sim.start_of(1, 30.0, 25) == NOW + 30  # starts at NOW + 600


# -- 3. The preemptor is told it waits for stopping jobs its reservation no longer draws on


def test_a_preemptor_is_told_it_starts_when_its_victims_stop_not_when_a_slower_job_beside_them_does():
    """The commit's fixture without the competitor: job 1 (6 GPUs) draws on the 2 free
    GPUs and job 11's 4 (+30 s), and the commit's own test shows it starts at +30 s. But
    `_waited` still lists every stopping job on the target's nodes (job 10, +590 s):
    job 1 is told +590 s, and Pass.claim holds its team's quota claim until then."""
    plan = schedule(_slow_stopper_beside_free_gpus(False).snapshot())
    assert preempted(plan) == [11]
    v = verdict(plan, 1)
    assert v.estimated_start <= NOW + 30, v.message  # told NOW + 590


def test_a_kept_preemptor_is_told_when_its_own_victim_stops():
    """Same with a kept target (honour_reservations/_keep): job 1 waits only for its
    victim 10 (+30 s; the Sim shows it starts then) and is told +600 s (jobs 11/12)."""
    plan = schedule(_two_preemptors_on_one_node(False).snapshot())
    v = verdict(plan, 1)
    assert v.estimated_start <= NOW + 30, v.message


# -- 4. _earliest's tries are spent on stop times of nodes absent from the snapshot -----


def test_stops_on_nodes_absent_from_the_snapshot_do_not_use_up_the_earliest_tries():
    """The commit's _two_stopping_nodes (job 1, 4 GPUs, no victims: n0 frees 6 GPUs at
    +30 s, n1 frees 4 at +3,600 s; the commit's test shows +30 s), plus x's four 1-GPU
    jobs stopping (+10..+13 s) on a node cordoned away (absent from the snapshot).
    `first` (choose) and `later` (_earliest) take every stop of the pool, those with no
    GPUs on schedulable nodes too: the four tries are +10, +11, +12, +13 s, none places
    the job, `_earliest` returns None and the best fit, n1, stands: told and started at
    +3,600 s."""
    from tests.scheduler.test_reclaim_stop_times import _two_stopping_nodes

    def build() -> Cluster:
        c = _two_stopping_nodes()
        c.node("gone", gpus=8)
        for i in range(4):
            c.run(
                30 + i,
                "x",
                on={"gone": 1},
                stopping=True,
                grace=10.0 + i,
                stop_requested=NOW,
                runtime=LONG,
            )
        del c.nodes["gone"]  # cordoned: not in the snapshot
        return c

    plan = schedule(build().snapshot())
    assert verdict(plan, 1).estimated_start <= NOW + 30, verdict(plan, 1).message


# -- 5. ahead_in_queue: O(nodes) per capacity-blocked job, explain on or off -------------


def test_ahead_in_queue_does_not_rebuild_the_free_index_for_every_blocked_job(monkeypatch):
    """Pass.ahead_in_queue gives back every GPU the queue's jobs took (took[2], one
    entry per node) and runs placement.choose, for every capacity-blocked job of the
    queue, with explain off too: 200 nodes filled by one queue's 1-GPU jobs and 500 1x8
    jobs of that queue behind them cost 100,000 Transaction.give calls (a7734cc: 0);
    500 nodes x 3,000 jobs took 7.7 s against 0.18 s, 1,000 x 3,000 18.7 s against
    0.31 s on this machine. Nothing changes between two such jobs: the answer can be
    kept per (team, queue, flavor, shape) until the queue takes more or the pool
    changes."""
    import scheduler.state as state

    calls = [0]
    give = state.Transaction.give

    def counted(self, *args, **kw):
        calls[0] += 1
        return give(self, *args, **kw)

    monkeypatch.setattr(state.Transaction, "give", counted)
    nodes, blocked = 200, 500
    c = Cluster()
    c.nodes_(nodes, gpus=8, per_block=nodes)
    c.team("a", nominal=10**6)
    i = 0
    for _ in range(nodes * 8):
        i += 1
        c.job(i, "a", gpus=1, submitted=NOW - 10**6 + i)
    for _ in range(blocked):
        i += 1
        c.job(i, "a", gpus=8, submitted=NOW - 10**6 + i)
    plan = schedule(c.snapshot(explain=False))
    assert len(plan.admissions) == nodes * 8
    assert calls[0] <= 10 * blocked, calls[0]

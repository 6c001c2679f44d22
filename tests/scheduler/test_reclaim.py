"""Reclaim and priority preemption under fragmentation, over several passes (issue 13).

Each scenario is a small cluster on the fixed clock; the multi-pass ones apply
every plan to the scenario (tests.scheduler.helpers.Sim), let grace periods
elapse and check who starts, and that one reclaim costs the victims it needs.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler import schedule
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    preempted,
    reasons,
    verdict,
)

GRACE = 30.0


def scattered(c, team, nodes, per_node, first_id, **kw):
    """Run 1-GPU jobs of `team`, `per_node` on each node, interleaved so that victim
    order (newest first) walks across the nodes rather than down one."""
    ids = []
    kw.setdefault("runtime", 100 * HOUR)
    for k in range(per_node):
        for i, node in enumerate(nodes):
            job = first_id + k * len(nodes) + i
            c.run(job, team, on={node: 1}, started=NOW - 5000 + job, **kw)
            ids.append(job)
    return ids


def on_node(c, job_id):
    (r,) = [r for r in c.running if r.id == job_id]
    return {w.node for w in r.placement}


def preemptions_by(sim_plans):
    out = Counter()
    for plan in sim_plans:
        for p in plan.preemptions:
            out[p.preemptor_id] += 1
    return out


def run_passes(sim, times):
    return [sim.step(t) for t in times]


# -- 1. placement-aware victim choice -------------------------------------------


def test_gang_reclaims_whole_nodes_from_a_scattered_borrower():
    """b borrows 16 GPUs as 1-GPU jobs spread over all four nodes; a's 2x8 gang
    preempts the 16 jobs of two nodes and starts after one grace period."""
    c = Cluster().nodes_(4, per_block=4)
    c.team("a", nominal=16, cohort="c").team("b", nominal=16, cohort="c")
    scattered(c, "b", ["n0", "n1", "n2", "n3"], 8, 100)
    c.job(1, "a", workers=2, gpus=8)
    plan = schedule(c.snapshot())
    victims = preempted(plan)
    assert len(victims) == 16
    assert len(set().union(*(on_node(c, v) for v in victims))) == 2  # two whole nodes
    assert verdict(plan, 1).reason_code == "waiting_for_preemption"
    sim = Sim(c)
    plans = run_passes(sim, [NOW, NOW + 10, NOW + GRACE])
    assert sim.started[1] == NOW + GRACE
    assert preemptions_by(plans) == {1: 16}


def test_victims_in_the_block_that_can_host_the_gang():
    """Block b0 has a non-preemptible job on each node, so only b1 can be cleared."""
    c = Cluster().nodes_(4, per_block=2)  # n0, n1 in b0; n2, n3 in b1
    c.team("a", nominal=16, cohort="c").team("d", nominal=16, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.run(90, "b", on={"n0": 1}, preemptible=False)
    c.run(91, "b", on={"n1": 1}, preemptible=False)
    scattered(c, "b", ["n0", "n1", "n2", "n3"], 7, 100)
    c.run(92, "b", on={"n2": 1}, started=NOW - 6000, runtime=100 * HOUR)
    c.run(93, "b", on={"n3": 1}, started=NOW - 6000, runtime=100 * HOUR)
    c.job(1, "a", workers=2, gpus=8)
    plan = schedule(c.snapshot())
    nodes = set().union(*(on_node(c, v) for v in preempted(plan)))
    assert nodes == {"n2", "n3"}
    assert len(preempted(plan)) == 16
    assert 90 not in preempted(plan) and 91 not in preempted(plan)


def test_victims_only_of_the_preemptors_flavor():
    c = Cluster()
    c.node("h0").node("h1").node("a0", flavor="a100").node("a1", flavor="a100")
    quotas = {"h100": None, "a100": None}
    from scheduler import Quota

    quotas = {"h100": Quota(8), "a100": Quota(8)}
    c.team("a", nominal=quotas, cohort="c")
    c.team("b", nominal={"h100": Quota(8), "a100": Quota(8)}, cohort="c")
    scattered(c, "b", ["h0", "h1"], 8, 100)
    scattered(c, "b", ["a0", "a1"], 8, 200, flavor="a100")
    c.job(1, "a", gpus=8, flavor="a100")
    plan = schedule(c.snapshot())
    victims = preempted(plan)
    assert len(victims) == 8 and all(v >= 200 for v in victims)
    assert len(set().union(*(on_node(c, v) for v in victims))) == 1


def test_priority_gang_behind_scattered_low_priority_jobs_of_its_queue():
    """A high-priority 8-GPU job preempts the eight 1-GPU jobs of one node, not one per node."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=16)
    scattered(c, "a", ["n0", "n1"], 8, 100)
    c.job(1, "a", gpus=8, priority=10)
    plan = schedule(c.snapshot())
    assert {p.reason_code for p in plan.preemptions} == {"priority"}
    victims = preempted(plan)
    assert len(victims) == 8
    assert len(set().union(*(on_node(c, v) for v in victims))) == 1
    sim = Sim(c)
    run_passes(sim, [NOW, NOW + GRACE])
    assert sim.started[1] == NOW + GRACE


def lender_and_borrower(nodes=2):
    """Teams a and d with 8 GPUs of nominal quota each, b with none, on 8-GPU nodes."""
    c = Cluster().nodes_(nodes)
    c.team("a", nominal=8, cohort="c").team("d", nominal=8, cohort="c")
    return c.team("b", nominal=0, cohort="c")


def test_target_node_that_loses_least_work():
    """n0: one 8-GPU job 5,000 s into its run; n1: two 4-GPU jobs checkpointed a minute
    ago. Two victims losing 8 GPU-minutes beat one losing 11 GPU-hours."""
    c = lender_and_borrower()
    c.run(10, "b", on={"n0": 8}, started=NOW - 5000, runtime=100 * HOUR)
    c.run(11, "b", on={"n1": 4}, started=NOW - 5000, checkpointed=NOW - 60, runtime=100 * HOUR)
    c.run(12, "b", on={"n1": 4}, started=NOW - 5000, checkpointed=NOW - 60, runtime=100 * HOUR)
    c.job(1, "a", gpus=8)
    assert sorted(preempted(schedule(c.snapshot()))) == [11, 12]


def test_fewest_jobs_when_work_lost_is_equal():
    c = lender_and_borrower()
    c.run(10, "b", on={"n0": 8}, started=NOW - 100)
    c.run(11, "b", on={"n1": 4}, started=NOW - 200)
    c.run(12, "b", on={"n1": 4}, started=NOW - 200)
    c.job(1, "a", gpus=8)
    assert preempted(schedule(c.snapshot())) == [10]


# -- 2. no lending and reclaiming in one pass ---------------------------------------


def a_waits_behind_its_borrowing_head(c, lender_nominal, runtime=HOUR):
    """Teams a (nominal 8, high share), b (nominal 0) and d (a lender) of one cohort;
    b's 8-GPU job 20, a's 2x8 job 1 (it would borrow, so b comes first) and a's 8-GPU
    job 2 (within a's nominal quota, `runtime` long)."""
    c.team("a", nominal=8, cohort="c", decayed={"h100": 8 * 7 * 24 * HOUR})
    c.team("b", nominal=0, cohort="c")
    c.team("d", nominal=lender_nominal, cohort="c")
    c.job(20, "b", gpus=8)
    c.job(1, "a", workers=2, gpus=8, priority=5)
    c.job(2, "a", gpus=8, runtime=runtime)
    return c


def test_idle_quota_a_team_waits_for_is_not_lent_in_the_same_pass():
    """b (low share) is considered before a's within-nominal job, because a's first job
    would borrow. Lent to b, a's quota would be reclaimed from b's older job at once.
    (a's job 2 ends by the time b's job 10 gives a's gang its quota back, +50 min, so
    a's cohort hold lets it through; a longer one waits for the gang: test_cohort_hold.)"""
    c = a_waits_behind_its_borrowing_head(Cluster().nodes_(2), lender_nominal=8, runtime=2400)
    c.run(10, "b", on={"n0": 8})
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    assert admitted(plan) == [2]
    v = verdict(plan, 20)
    assert v.reason_code == "cohort_busy"
    assert "8 GPUs of idle quota are kept for teams within their nominal quota" in v.message
    c = a_waits_behind_its_borrowing_head(Cluster().nodes_(2), lender_nominal=8)
    c.run(10, "b", on={"n0": 8})
    plan = schedule(c.snapshot())
    assert (admitted(plan), preempted(plan)) == ([], [])
    assert "it would take quota that job 1 of team a needs" in verdict(plan, 2).message


def test_a_borrower_admitted_in_a_pass_is_never_its_victim():
    c = Cluster().nodes_(3)
    c.team("a", nominal=16, cohort="c").team("b", nominal=0, cohort="c").team(
        "d", nominal=8, cohort="c"
    )
    c.run(10, "b", on={"n0": 8})
    c.job(20, "b", gpus=8)
    c.job(1, "a", workers=2, gpus=8)
    plan = schedule(c.snapshot())
    assert 20 not in preempted(plan)
    assert not set(preempted(plan)) & set(admitted(plan))


# -- 3. freed GPUs belong to the preemptor ---------------------------------------------


def preemptor_beside_free_gpus():
    """Job 1 (priority 10) needs n0, where job 10 (priority 0) holds 4 GPUs and 4 are free;
    job 2 (priority 1) of the same queue would fit on those 4."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=24)
    c.run(10, "a", on={"n0": 4}, priority=0)
    c.run(11, "a", on={"n1": 8}, priority=5)
    c.job(1, "a", gpus=8, priority=10)
    c.job(2, "a", gpus=4, priority=1)
    return c


def test_free_gpus_of_the_target_are_reserved_during_the_grace_period():
    """Job 1 preempts the 4-GPU job next to 4 free GPUs; job 2, behind it in the queue,
    may not take those 4 GPUs (it would then be preempted in turn)."""
    sim = Sim(preemptor_beside_free_gpus())
    first = sim.step(NOW)
    assert preempted(first) == [10]
    v = verdict(first, 2)
    assert v.reason_code == "no_capacity"
    assert "4 free GPUs are reserved for job(s) 1" in v.message
    second = sim.step(NOW + 10)  # the victim is still stopping: the reservation holds
    assert reasons(second)[1] == "waiting_for_preemption" and 2 not in admitted(second)
    assert second.preemptions == ()
    sim.step(NOW + GRACE)
    assert sim.started[1] == NOW + GRACE
    assert sim.preempted == [10]


def test_a_reclaim_costs_one_victim_even_if_a_lower_share_team_arrives():
    """During a's grace period team e (lower share, within nominal) submits a gang of
    the same size. e must reclaim its own GPUs; it may neither wait for a's victim
    nor take the node when a's victim stops."""
    c = Cluster().nodes_(4)
    c.team("a", nominal=8, cohort="c", decayed={"h100": 8 * 7 * 24 * HOUR})
    c.team("d", nominal=16, cohort="c")
    c.team("e", nominal=8, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.run(11, "d", on={"n1": 8}, runtime=100 * HOUR)
    c.run(12, "d", on={"n2": 8}, runtime=100 * HOUR)
    c.run(10, "b", on={"n0": 8}, runtime=100 * HOUR)
    c.run(13, "b", on={"n3": 8}, runtime=100 * HOUR)
    c.job(1, "a", gpus=8, runtime=100 * HOUR)
    sim = Sim(c)
    plans = [sim.step(NOW)]
    assert len(plans[0].preemptions) == 1
    e_job = c.job(2, "e", gpus=8, submitted=NOW + 5, runtime=100 * HOUR)
    sim.submit(e_job)
    plans += run_passes(sim, [NOW + 10, NOW + GRACE, NOW + GRACE + 10, NOW + 2 * GRACE + 10])
    assert preemptions_by(plans) == {1: 1, 2: 1}
    assert sim.started[1] == NOW + GRACE
    assert 2 in sim.started


def test_reservation_lapses_when_the_preemptor_is_cancelled():
    sim = Sim(preemptor_beside_free_gpus())
    sim.step(NOW)
    del sim.pending[1]  # cancelled while its victim stops
    plan = sim.step(NOW + 10)
    assert admitted(plan) == [2]


# -- 4. a second preemptor counts what earlier victims free once -------------------------


def test_second_preemptor_uses_the_surplus_of_the_first_ones_victim():
    """a and d each reclaim 4 GPUs; b's 8-GPU job frees enough for both: one victim."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=4, cohort="c").team("d", nominal=4, cohort="c")
    c.team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 8}, started=NOW - 100)
    c.run(11, "b", on={"n1": 8}, started=NOW - 200)
    c.job(1, "a", gpus=4)
    c.job(2, "d", gpus=4)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [10]
    assert reasons(plan) == {1: "waiting_for_preemption", 2: "waiting_for_preemption"}
    sim = Sim(c)
    run_passes(sim, [NOW, NOW + GRACE])
    assert sim.started.keys() == {1, 2}
    assert sim.preempted == [10]


def test_second_preemptor_of_a_team_reports_usage_counted_once():
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    scattered(c, "b", ["n0", "n1"], 8, 100)
    c.job(1, "a", gpus=4)
    c.job(2, "a", gpus=4)
    plan = schedule(c.snapshot())
    by = Counter(p.preemptor_id for p in plan.preemptions)
    assert by == {1: 4, 2: 4}
    last = [p for p in plan.preemptions if p.preemptor_id == 2][-1]
    assert "uses 0 of 8 nominal" in last.message
    # 16 minus the 4 that job 1's victims free: each of job 2's victims reads what b
    # borrowed before them (not "9 used", counted after each of its own victims)
    assert "(12 used of 8 nominal)" in last.message
    for p in plan.preemptions:
        assert "of 8 nominal" in p.message and "uses 12" not in p.message


def test_a_preemptor_whose_own_team_is_being_reclaimed_counts_without_its_stopping_jobs():
    """d reclaims b's 8-GPU job 3 (b borrows 4 of it); b's 4-GPU job 7 then reclaims a's
    borrowed GPUs in the same pass, within b's nominal 4 once job 3 has stopped. Its
    victims were told "b uses 8 of 4 nominal" (job 3 counted while it stops), which
    reads as a team far above its quota reclaiming (found by tests/scheduler/test_runs.py)."""
    c = Cluster().nodes_(2, gpus=4).node("n5")
    c.team("a", nominal=0, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=8, cohort="c")
    c.run(3, "b", on={"n5": 8}, started=NOW - 60)
    c.run(5, "a", on={"n0": 1}, started=NOW - 30)
    c.run(6, "a", on={"n1": 1}, started=NOW - 30)
    c.job(8, "d", workers=2, gpus=4)
    c.job(7, "b", workers=2, gpus=2)
    plan = schedule(c.snapshot())
    by = {p.job_id: p.preemptor_id for p in plan.preemptions}
    assert by == {3: 8, 5: 7, 6: 7}
    for p in plan.preemptions:
        if p.preemptor_id == 7:
            assert "uses 0 of 4 nominal" in p.message, p.message


# -- 5. why reclaim cannot help -----------------------------------------------------------


def test_reason_names_the_non_preemptible_borrower_and_when_it_ends():
    c = Cluster().nodes_(3)
    c.team("a", nominal=16, cohort="c").team("b", nominal=0, cohort="c").team(
        "d", nominal=8, cohort="c"
    )
    c.run(10, "b", on={"n0": 8}, preemptible=False, runtime=2 * HOUR)  # ends NOW + 6600
    c.run(11, "b", on={"n1": 8}, preemptible=False, runtime=3 * HOUR)
    c.run(12, "d", on={"n2": 8})
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    v = verdict(plan, 1)
    assert v.reason_code == "cohort_busy"
    # NOW is 1970-01-12 13:46:40 UTC; job 10 ends 6,600 s later.
    assert (
        "the 16 GPUs lent from team a's quota run non-preemptible jobs of team b, so reclaim "
        "cannot free them; they free up when those end, at the latest 1970-01-12T15:37:00Z"
    ) in v.message
    assert "+" not in v.message.split("latest")[1]


def test_lent_sentence_times_the_jobs_it_names_or_says_whose_end_gives_the_quota():
    """An adversarial helper's case: team b runs 4 GPUs of a's quota on a non-preemptible
    job that ends in an hour, and the cohort gives a's 2x8 gang its quota when a's own
    non-preemptible 8-GPU job ends, at +60 s. It was told that b's jobs "free up when
    those end, at the latest" +60 s: the time of its own team's job, given to b's."""
    c = Cluster().nodes_(4)
    c.team("a", nominal=26, cohort="c").team("b", nominal=0, cohort="c")
    c.run(13, "a", on={"n0": 8}, started=NOW - 600, runtime=660, preemptible=False)
    c.run(11, "b", on={"n1": 4}, started=NOW - 600, runtime=600 + HOUR, preemptible=False)
    c.run(12, "b", on={"n1": 3}, started=NOW - 600, runtime=10 * HOUR)
    c.job(1, "a", workers=2, gpus=8, runtime=HOUR)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "cohort_busy"
    assert "run non-preemptible jobs of team b, so reclaim cannot free them" in v.message
    # NOW is 1970-01-12 13:46:40 UTC; job 13 ends 60 s later (rounded up to the minute)
    assert "they free up when those end, at the latest" not in v.message, v.message
    assert v.message.endswith(
        "; it has its quota back at the latest 1970-01-12T13:48:00Z, when jobs of team a "
        "that reclaim cannot take have ended"
    ), v.message
    assert Sim(c).start_of(1, 30.0, 10) == NOW + 60  # and it starts then


@pytest.mark.parametrize("preemptible", [True, False])
def test_reason_only_when_reclaim_cannot_help(preemptible):
    c = Cluster().nodes_(3)
    c.team("a", nominal=16, cohort="c").team("b", nominal=0, cohort="c").team(
        "d", nominal=8, cohort="c"
    )
    c.run(10, "b", on={"n0": 8}, preemptible=preemptible)
    c.run(11, "b", on={"n1": 8}, preemptible=preemptible)
    c.run(12, "d", on={"n2": 8})
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert bool(plan.preemptions) == preemptible
    assert ("non-preemptible" in verdict(plan, 1).message) == (not preemptible)


def test_non_preemptible_jobs_within_the_borrowers_nominal_are_not_blamed():
    """b runs 8 non-preemptible GPUs, its nominal quota, 4 on each node, and borrows 4
    with a preemptible job on n0. a's 8-GPU job cannot get a whole node by reclaim
    (that job's 4 GPUs leave n0 half full), but a's lent quota is held by that
    preemptible job, not by the non-preemptible ones: the reason said "the 4 GPUs lent
    from team a's quota run non-preemptible jobs of team b", counting every
    non-preemptible GPU of b as borrowed."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 4}, preemptible=False, runtime=100 * HOUR)
    c.run(11, "b", on={"n1": 4}, preemptible=False, runtime=100 * HOUR)
    c.run(12, "b", on={"n0": 4}, runtime=100 * HOUR)
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    assert "non-preemptible" not in verdict(plan, 1).message, verdict(plan, 1).message


# -- property: reclaim completes within two passes -------------------------------------


@st.composite
def reclaimable(draw):
    """A cohort where team a's gang (within its nominal quota) fits once the preemptible
    jobs of borrower b on some target nodes stop; other nodes hold b's jobs (some not
    preemptible), lender c's jobs within its nominal quota, or free GPUs."""
    blocks, per_block = draw(st.integers(1, 2)), draw(st.integers(2, 3))
    c = Cluster().nodes_(blocks * per_block, per_block=per_block)
    workers = draw(st.integers(1, 2))
    per_worker = draw(st.sampled_from([1, 2, 4, 8] if workers == 1 else [4, 8]))
    block = draw(st.integers(0, blocks - 1))
    names = [f"n{i}" for i in range(blocks * per_block)]
    targets = names[block * per_block : block * per_block + workers]
    ids = iter(range(100, 1000))
    used = Counter()
    for name in names:
        left = 8
        if name not in targets:
            left -= draw(st.integers(0, 8))  # free GPUs off the target
        while left > 0:
            k = min(left, draw(st.sampled_from([1, 1, 2, 4, 8])))
            team = "b" if name in targets else draw(st.sampled_from(["b", "c"]))
            fixed = name not in targets and team == "b" and draw(st.booleans())
            started = NOW - draw(st.integers(1, 5000))
            c.run(
                next(ids),
                team,
                on={name: k},
                started=started,
                runtime=100 * HOUR,
                preemptible=not fixed,
                checkpointed=draw(st.none() | st.just(NOW - 30)),
            )
            used[team] += k
            left -= k
    on_targets = sum(r.gpus for r in c.running if {w.node for w in r.placement} <= set(targets))
    gang = workers * per_worker
    nominal_a = gang + draw(st.integers(0, 8))
    nominal_c = used["c"] + draw(st.integers(0, 8))
    nominal_b = draw(st.integers(0, max(0, used["b"] - on_targets)))
    c.team("a", nominal=nominal_a, cohort="c")
    c.team("b", nominal=nominal_b, cohort="c")
    c.team("c", nominal=nominal_c, cohort="c")
    after = {"a": 0, "b": used["b"] - on_targets, "c": used["c"]}
    assume(slack(c.teams, after) >= gang)  # quota holds the gang once b's target jobs stop
    assume(slack(c.teams, used) >= 0)
    c.job(1, "a", workers=workers, gpus=per_worker, runtime=100 * HOUR)
    for j in range(draw(st.integers(0, 3))):  # borrowers that would like the freed GPUs
        c.job(2 + j, "b", gpus=draw(st.sampled_from([1, 2, 4])), runtime=100 * HOUR)
    return c


def slack(teams, usage) -> int:
    """Lendable idle quota minus borrowing over the cohort (>= 0: not over-committed)."""
    total = 0
    for t in teams:
        q = t.quotas["h100"]
        u = usage.get(t.name, 0)
        total += min(max(0, q.nominal - u), q.nominal) - max(0, u - q.nominal)
    return total


def check_not_over_committed(sim):
    usage = Counter()
    per_node = Counter()
    for r in sim.running.values():
        usage[r.team] += r.gpus
        for w in r.placement:
            per_node[w.node] += len(w.gpus)
    assert all(per_node[n] <= sim.nodes[n]["gpus"] for n in per_node)
    assert slack(sim.teams, usage) >= 0, usage


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaimable())
def test_reclaim_admits_the_gang_within_two_passes(c):
    sim = Sim(c)
    for t in (NOW, NOW + GRACE):
        plan = sim.step(t)
        running = {r.id: r for r in sim.running.values()}
        assert all(running[p.job_id].preemptible for p in plan.preemptions)
        check_not_over_committed(sim)
    assert 1 in sim.started


# -- a reservation's held GPUs do not stop a reclaim ------------------------------


def test_within_nominal_job_that_fits_only_on_held_gpus_reclaims_elsewhere():
    """g's 8-GPU job cannot reclaim a whole node (b borrows only 4), so it reserves n0
    from +1000 s and its 4 free GPUs are held. a's 4-GPU job, within a's nominal,
    fits only on those held GPUs and outlasts the reservation: it is `reserved`, but
    it may reclaim b's borrowed GPUs on n1 instead (before, it waited without
    reclaiming until g's job started: hours of reclaim latency in replays)."""
    c = Cluster().node("n0").node("n1")
    c.team("g", nominal=16, cohort="c").team("b", nominal=4, cohort="c")
    c.team("a", nominal=4, cohort="c", decayed={"h100": 4 * 7 * 86400 / 0.693})
    c.run(10, "g", on={"n0": 4}, runtime=1600)  # ends at +1000
    c.run(20, "b", on={"n1": 4}, runtime=100 * HOUR)
    c.run(21, "b", on={"n1": 4}, runtime=100 * HOUR)
    c.job(1, "g", gpus=8, runtime=HOUR)
    c.job(2, "a", gpus=4, runtime=2 * HOUR)
    plan = schedule(c.snapshot())
    assert verdict(plan, 1).reason_code == "no_capacity"
    assert preempted(plan) == [21]  # b's newest: b then uses its nominal 4
    assert verdict(plan, 2).reason_code == "waiting_for_preemption"
    sim = Sim(c)
    run_passes(sim, [NOW, NOW + GRACE])
    assert sim.started[2] == NOW + GRACE


def test_placement_not_lent_quota_is_named_when_reclaim_covers_the_quota():
    """A fifth tester's case: a (nominal 12) asks for 8 GPUs on one node; the only 8-GPU
    node n0 runs b's preemptible 7-GPU job and b's non-preemptible 1-GPU job, which ends
    in 10 minutes; n1 (4 GPUs) is free. Reclaim would give a its quota (4 idle + 7 of
    b's), but no victim set frees a whole node. The reason said "the 1 GPU lent from
    team a's quota run non-preemptible jobs of team b ... at the latest" now (rounded up
    to the minute), at every pass, and the job started when job 11 ended, 10 minutes
    later: what stops it is where the GPUs are, and the sentence now says so."""
    c = Cluster()
    c.node("n0", gpus=8, block="b0", rack="r0")
    c.node("n1", gpus=4, block="b1", rack="r1")
    c.team("a", nominal=12, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 7}, started=NOW - 100, runtime=100 * HOUR)
    c.run(11, "b", on={"n0": 1}, started=NOW - 100, runtime=100 + 600, preemptible=False)
    c.job(1, "a", workers=1, gpus=8, submitted=NOW, runtime=HOUR)
    plan = schedule(c.snapshot())
    assert plan.preemptions == ()
    v = verdict(plan, 1)
    assert v.reason_code == "cohort_busy"
    assert "lent from team a's quota" not in v.message, v.message
    assert "at the latest" not in v.message, v.message
    assert "reclaim cannot make room for it" in v.message, v.message
    sim = Sim(c, preemption=True)
    for step in range(30):
        sim.step(NOW + 30.0 * step)
        if 1 in sim.started:
            break
    assert sim.started[1] == NOW + 600.0  # when job 11 ends, as the sentence says


def test_placement_is_not_blamed_when_the_free_gpus_hold_the_job():
    """A review's cases: the sentence said the GPUs would not hold the job's workers
    whole (1) when its borrower's only job reaches its max runtime in 10 s (no reclaim
    candidate, but its worker fits n1's 4 free GPUs: it waits for that job's quota), and
    (2) when the peer counted as reclaimable borrows only through a stopping job (no
    candidate once that job stops; the job fits n2's 8 free GPUs)."""
    c = Cluster()
    c.node("n0", gpus=4).node("n1", gpus=4)
    c.team("t", nominal=4, cohort="c").team("b", nominal=0, cohort="c")
    c.run(100, "b", on={"n0": 4}, started=NOW - HOUR + 10, runtime=HOUR)
    c.job(1, "t", workers=1, gpus=4, submitted=NOW, runtime=HOUR)
    v = verdict(schedule(c.snapshot()), 1)
    assert "hold its workers whole" not in v.message, v.message

    c = Cluster()
    c.node("n0", gpus=8).node("n1", gpus=8).node("n2", gpus=8)
    c.team("t", nominal=4, cohort="c").team("d", nominal=4, cohort="c")
    c.team("x", nominal=0, cohort="c")
    c.run(100, "d", on={"n0": 4}, started=NOW - HOUR, runtime=100 * HOUR, stopping=True,
          grace=HOUR, stop_requested=NOW)  # fmt: skip
    c.run(101, "x", on={"n0": 4}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    c.run(102, "d", on={"n1": 2}, started=NOW - HOUR, runtime=100 * HOUR)
    c.run(103, "x", on={"n1": 1}, started=NOW - HOUR, runtime=100 * HOUR, preemptible=False)
    c.job(1, "t", workers=1, gpus=2, submitted=NOW, runtime=HOUR)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "cohort_busy"
    assert "hold its workers whole" not in v.message, v.message

"""Invariants over random snapshots: whatever the input, the plan is safe and deterministic."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    REASONS,
    Node,
    PendingJob,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    WorkerPlacement,
    schedule,
)
from tests.scheduler.helpers import NOW, examples

FLAVORS = ["h100", "a100"]
MOSTLY_H100 = st.sampled_from(["h100", "h100", "h100", "a100"])
# Most jobs were never requeued; some are in their requeue backoff, some just out of it.
ELIGIBLE_AT = st.sampled_from([0.0, 0.0, 0.0, NOW - 10, NOW, NOW + 60, NOW + 3600])
SETTINGS = settings(
    max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def nodes(draw):
    out = []
    for i in range(draw(st.integers(1, 8))):
        total = draw(st.sampled_from([1, 2, 4, 8, 8]))
        healthy = total - draw(st.integers(0, 1 if total > 1 else 0))
        block = draw(st.sampled_from(["", "b0", "b1"]))
        rack = draw(st.sampled_from(["r0", "r1"]))
        ids = [f"n{i}/{g}" for g in range(healthy)]
        out.append(
            {
                "name": f"n{i}",
                "flavor": draw(MOSTLY_H100),
                "total": total,
                "free": ids,
                "block": block,
                "rack": rack,
            }
        )
    return out


@st.composite
def teams(draw):
    out = []
    for i in range(draw(st.integers(1, 4))):
        quotas = {}
        for f in FLAVORS:
            if f == "h100" or draw(st.booleans()):
                limit = st.none() | st.integers(0, 8)
                quotas[f] = Quota(draw(st.integers(0, 24)), draw(limit), draw(limit))
        decayed = {f: draw(st.floats(0, 1e7)) for f in FLAVORS if draw(st.booleans())}
        cohort = draw(st.sampled_from([None, "c0", "c0", "c0", "c1"]))
        out.append(Team(f"t{i}", draw(st.sampled_from([0.5, 1.0, 2.0])), cohort, quotas, decayed))
    return out


@st.composite
def running(draw, node_specs, team_names):
    out = []
    for j in range(draw(st.integers(0, 10))):
        flavor = draw(MOSTLY_H100)
        hosts = [n for n in node_specs if n["flavor"] == flavor and n["free"]]
        if not hosts:
            continue
        chosen = draw(
            st.lists(st.sampled_from(hosts), min_size=1, max_size=2, unique_by=lambda n: n["name"])
        )
        per_worker = draw(st.integers(1, min(len(n["free"]) for n in chosen)))
        placement = []
        for n in chosen:
            placement.append(
                WorkerPlacement(len(placement), n["name"], tuple(n["free"][:per_worker]))
            )
            del n["free"][:per_worker]
        started = NOW - draw(st.floats(0, 10_000))
        checkpointed = draw(st.none() | st.floats(started, NOW))
        out.append(
            RunningJob(
                100 + j,
                draw(st.sampled_from(team_names)),
                draw(st.sampled_from(["q0", "q1"])),
                flavor,
                per_worker * len(chosen),
                draw(st.integers(0, 3)),
                started - 5,
                started,
                draw(st.floats(1, 20_000)),
                tuple(placement),
                draw(st.sampled_from([True, True, False])),
                draw(st.sampled_from([False, False, False, True])),
                checkpointed,
                draw(st.sampled_from([0.0, 30.0])),
                # a stopping victim names its preemptor (pending ids are 0..11)
                draw(st.none() | st.integers(0, 11)),
            )
        )
    return out


@st.composite
def pending(draw, team_names):
    out = []
    for j in range(draw(st.integers(0, 12))):
        out.append(
            PendingJob(
                j,
                draw(st.sampled_from([*team_names, *team_names, "ghost"])),
                draw(st.sampled_from(["q0", "q1"])),
                draw(st.sampled_from(["h100", "h100", "h100", "a100", "t4"])),
                draw(st.sampled_from([1, 1, 2, 3])),
                draw(st.sampled_from([1, 1, 2, 4, 8])),
                draw(st.integers(0, 3)),
                NOW - draw(st.integers(0, 5)) * 100.0,
                draw(st.sampled_from([60.0, 3600.0, 1e5])),
                draw(st.booleans()),
                draw(st.integers(0, 3)),
                draw(ELIGIBLE_AT),
                draw(st.sampled_from([None, None, None, 0, 1, 2])),  # a requeued victim's preemptor
            )
        )
    return out


@st.composite
def snapshots(draw):
    node_specs = draw(nodes())
    team_list = draw(teams())
    names = [t.name for t in team_list]
    run = draw(running(node_specs, names))
    config = PolicyConfig(
        policy=draw(st.sampled_from(["fairshare", "fairshare", "fifo-backfill", "fifo"])),
        backfill=draw(st.booleans()),
        preemption=draw(st.booleans()),
        explain=draw(st.booleans()),
        topology_key=draw(st.sampled_from(["block", "rack"])),
        max_backfill_candidates=draw(st.sampled_from([100_000, 100_000, 4])),
        age_weight=draw(st.sampled_from([0.0, 0.0, 1.0])),
        max_age=draw(st.sampled_from([600.0, 86400.0])),
        backfill_reservations=draw(st.sampled_from([1, 1, 3])),
        max_wait=draw(st.sampled_from([0.0, 0.0, 200.0])),  # jobs waited 0-500 s
    )
    built = tuple(
        Node(n["name"], n["flavor"], tuple(n["free"]), n["total"], n["rack"], n["block"])
        for n in node_specs
    )
    return Snapshot(NOW, built, tuple(team_list), tuple(run), tuple(draw(pending(names))), config)


@st.composite
def dense_snapshots(draw):
    """A full cluster shared by a cohort, to exercise reclaim, priority and multi-node gangs."""
    node_specs = [
        {
            "name": f"n{i}",
            "flavor": "h100",
            "total": 8,
            "free": [f"n{i}/{g}" for g in range(8)],
            "block": draw(st.sampled_from(["b0", "b1"])),
            "rack": "r0",
        }
        for i in range(draw(st.integers(2, 6)))
    ]
    team_list = [
        Team(
            f"t{i}",
            1.0,
            "c0",
            {"h100": Quota(draw(st.integers(0, 24)), draw(st.none() | st.integers(0, 16)))},
        )
        for i in range(draw(st.integers(2, 3)))
    ]
    names = [t.name for t in team_list]
    run, jid = [], 100
    for n in node_specs:
        while len(n["free"]) > draw(st.integers(0, 4)):
            k = draw(st.sampled_from([2, 4, 8]))
            if k > len(n["free"]):
                break
            wp = (WorkerPlacement(0, n["name"], tuple(n["free"][:k])),)
            del n["free"][:k]
            started = NOW - draw(st.floats(0, 5000))
            stopping = draw(st.sampled_from([False] * 5 + [True]))
            run.append(
                RunningJob(
                    jid,
                    draw(st.sampled_from(names)),
                    "q0",
                    "h100",
                    k,
                    draw(st.integers(0, 3)),
                    started,
                    started,
                    10_000.0,
                    wp,
                    draw(st.sampled_from([True, True, True, False])),
                    stopping,
                )
            )
            jid += 1
    jobs = [
        PendingJob(
            j,
            draw(st.sampled_from(names)),
            "q0",
            "h100",
            draw(st.integers(1, 2)),
            draw(st.sampled_from([2, 4, 8])),
            draw(st.integers(0, 4)),
            NOW - j,
            draw(st.sampled_from([60.0, 20_000.0])),
            eligible_at=draw(ELIGIBLE_AT),
        )
        for j in range(draw(st.integers(1, 8)))
    ]
    config = PolicyConfig(
        policy="fairshare", backfill=draw(st.booleans()), explain=draw(st.booleans())
    )
    built = tuple(
        Node(n["name"], n["flavor"], tuple(n["free"]), n["total"], n["rack"], n["block"])
        for n in node_specs
    )
    return Snapshot(NOW, built, tuple(team_list), tuple(run), tuple(jobs), config)


ANY_SNAPSHOT = st.one_of(snapshots(), dense_snapshots())


def shuffled(draw, snap: Snapshot) -> Snapshot:
    def perm(items):
        return tuple(draw(st.permutations(items)))

    return replace(
        snap,
        nodes=perm(snap.nodes),
        teams=perm(snap.teams),
        running=perm(snap.running),
        pending=perm(snap.pending),
    )


# -- the invariants -----------------------------------------------------------


def check_every_pending_job_answered_once(snap, plan):
    answered = [a.job_id for a in plan.admissions] + [v.job_id for v in plan.verdicts]
    assert sorted(answered) == sorted(j.id for j in snap.pending)
    for v in plan.verdicts:
        assert v.reason_code in REASONS
        assert v.position >= 1 and v.message
        assert v.estimated_start is None or v.estimated_start >= snap.now
        if not snap.config.explain:
            assert v.estimated_start is None


def check_gangs_placed_all_or_nothing_on_free_gpus(snap, plan):
    free = {n.name: set(n.free_gpus) for n in snap.nodes}
    flavor = {n.name: n.flavor for n in snap.nodes}
    held = {g for r in snap.running for w in r.placement for g in w.gpus}
    jobs = {j.id: j for j in snap.pending}
    used = set()
    for a in plan.admissions:
        job = jobs[a.job_id]
        assert [w.rank for w in a.placement] == list(range(job.workers))
        for w in a.placement:
            assert flavor[w.node] == job.flavor
            assert len(w.gpus) == len(set(w.gpus)) == job.gpus_per_worker
            assert set(w.gpus) <= free[w.node], "a worker got a GPU that is not free on its node"
            assert not set(w.gpus) & held, "a GPU held by a running job was handed out"
            assert not set(w.gpus) & used, "a GPU was handed out twice"
            used |= set(w.gpus)


def limit(team: Team | None, flavor: str) -> float:
    if team is None:
        return 0
    q = team.quotas.get(flavor, Quota(0))
    if team.cohort is None:
        return q.nominal
    return math.inf if q.borrowing_limit is None else q.nominal + q.borrowing_limit


def imbalance(teams, usage, cohort, flavor) -> float:
    """Borrowed minus lendable idle quota over a cohort (> 0: over-committed)."""
    total = 0
    for t in teams:
        if t.cohort == cohort:
            q = t.quotas.get(flavor, Quota(0))
            u = usage.get((t.name, flavor), 0)
            lend = q.nominal if q.lending_limit is None else min(q.nominal, q.lending_limit)
            total += max(0, u - q.nominal) - min(max(0, q.nominal - u), lend)
    return total


def check_quotas_respected(snap, plan):
    """Replay the admissions on an independent ledger: no limit is ever crossed."""
    teams = {t.name: t for t in snap.teams}
    usage: dict[tuple[str, str], int] = {}
    for r in snap.running:
        usage[(r.team, r.flavor)] = usage.get((r.team, r.flavor), 0) + r.gpus
    jobs = {j.id: j for j in snap.pending}
    for a in plan.admissions:
        job = jobs[a.job_id]
        team, key = teams.get(job.team), (job.team, job.flavor)
        before = (
            imbalance(snap.teams, usage, team.cohort, job.flavor) if team and team.cohort else 0
        )
        usage[key] = usage.get(key, 0) + job.gpus
        assert usage[key] <= limit(team, job.flavor), (
            f"job {job.id} took team {job.team} over its limit"
        )
        if team and team.cohort:
            after = imbalance(snap.teams, usage, team.cohort, job.flavor)
            assert after <= max(0, before), f"job {job.id} borrowed quota nobody could lend"


def check_preemptions_are_allowed(snap, plan):
    victims = [p.job_id for p in plan.preemptions]
    assert len(victims) == len(set(victims))
    if victims:
        assert snap.config.policy == "fairshare" and snap.config.preemption
    running = {r.id: r for r in snap.running}
    teams = {t.name: t for t in snap.teams}
    jobs = {j.id: j for j in snap.pending}
    waiting = {v.job_id: v.reason_code for v in plan.verdicts}
    for p in plan.preemptions:
        victim, preemptor = running[p.job_id], jobs[p.preemptor_id]
        assert victim.preemptible and not victim.stopping
        assert victim.flavor == preemptor.flavor
        assert waiting[preemptor.id] == "waiting_for_preemption"
        if p.reason_code == "priority":
            assert (victim.team, victim.queue) == (preemptor.team, preemptor.queue)
            assert victim.priority < preemptor.priority
        else:
            assert p.reason_code == "reclaim" and victim.team != preemptor.team
            assert teams[victim.team].cohort == teams[preemptor.team].cohort is not None


def check_fifo_is_head_of_line(snap, plan):
    if snap.config.policy != "fifo":
        return
    codes = {v.job_id: v.reason_code for v in plan.verdicts}
    blocked = set()
    for job in sorted(snap.pending, key=lambda j: (j.submitted_at, j.id)):
        # A job in its requeue backoff is not in line yet: it blocks nothing.
        if job.id in codes and codes[job.id] not in (
            "never_fits",
            "no_nodes",
            "priority",
            "backoff",
        ):
            blocked.add(job.flavor)
        elif job.id not in codes:
            assert job.flavor not in blocked, f"job {job.id} passed a blocked job under strict fifo"


def check_backoff_respected(snap, plan):
    """No job starts or preempts before it is eligible; one that is not says so and when."""
    jobs = {j.id: j for j in snap.pending}
    for a in plan.admissions:
        assert jobs[a.job_id].eligible_at <= snap.now, f"job {a.job_id} admitted in its backoff"
    for p in plan.preemptions:
        assert jobs[p.preemptor_id].eligible_at <= snap.now
    for v in plan.verdicts:
        job = jobs[v.job_id]
        if job.eligible_at <= snap.now:
            assert v.reason_code != "backoff"
            continue
        assert v.reason_code in ("backoff", "never_fits", "no_nodes")
        assert v.estimated_start is None or v.estimated_start >= job.eligible_at


@SETTINGS
@given(ANY_SNAPSHOT)
def test_plans_are_safe(snap):
    plan = schedule(snap)
    check_every_pending_job_answered_once(snap, plan)
    check_gangs_placed_all_or_nothing_on_free_gpus(snap, plan)
    check_quotas_respected(snap, plan)
    check_preemptions_are_allowed(snap, plan)
    check_fifo_is_head_of_line(snap, plan)
    check_backoff_respected(snap, plan)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_same_input_same_plan_in_any_order(data):
    snap = data.draw(ANY_SNAPSHOT)
    plan = schedule(snap)
    assert schedule(snap) == plan
    assert schedule(shuffled(data.draw, snap)) == plan


def test_the_checks_catch_a_bad_plan():
    """The invariants are not vacuous: a hand-made bad plan fails them."""
    snap = Snapshot(
        NOW,
        (Node("n0", "h100", ("n0/0", "n0/1"), 2),),
        (Team("a", quotas={"h100": Quota(1)}),),
        (),
        (PendingJob(1, "a", "q", "h100", 1, 2, 0, NOW, 60.0),),
    )
    from scheduler import Admission, Plan

    bad = Plan(admissions=(Admission(1, (WorkerPlacement(0, "n0", ("n0/0", "n0/1")),)),))
    check_every_pending_job_answered_once(snap, bad)
    check_gangs_placed_all_or_nothing_on_free_gpus(snap, bad)
    try:
        check_quotas_respected(snap, bad)
    except AssertionError:
        pass
    else:
        raise AssertionError("a quota overrun went unnoticed")
    assert schedule(snap).admissions == ()

"""Differential round trip: the portal's snapshot -> plan -> apply -> agents -> snapshot
against the core's own multi-pass driver (tests/scheduler/helpers.Sim), on random small
clusters (2-5 nodes of 4 or 8 GPUs, one or two flavors, racks and blocks, 2-4 teams of one
cohort with random quotas, borrowing and lending limits and weights; gangs, priorities,
non-preemptible jobs, grace periods of 30-600 s, arrays with %1 and %2 limits).

Each step k: the portal runs a pass at t_k (snapshot S_k, plan P_k). A Sim built from
S_k applies P_k at t_k, the same agent events (victims stop, jobs complete) happen in
both worlds by t_{k+1}, the same jobs are submitted; the portal's S_{k+1} must equal the
Sim's state at t_{k+1} (the Sim uses the portal's job and GPU ids): every field of every
node, running and pending job (stop times, links to preemptors, stored reservations and
their horizons, requeue backoffs, arrays) and team. Also: the pass applies exactly its
plan (admissions, allocations, workers, preemptions, links, stop times) and stores
exactly its verdicts. Decayed usage is left out: the portal accounts it after the pass.

One thing the two models do differently on purpose is not drawn: a victim's workers
that exit 0 during its grace period finish the job in the Sim (its trace ends there) and
requeue it in the portal, which cannot tell a finished job from one that checkpointed
and exited on its stop signal (docs/protocol.md).

6 seeds by default (about 15 s), times BERTH_PROPERTY_SCALE (`make fuzz-roundtrip`);
BERTH_ROUNDTRIP_SEEDS=0-49 picks them (odd seeds run with the reclaim backoff on),
BERTH_ROUNDTRIP_JITTER=1 adds sub-second pass
times, BERTH_ROUNDTRIP_PREEMPTIBLE the share of preemptible jobs (0.8).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from portal.core.actions.heartbeat import GpuReport, record_heartbeat
from portal.core.actions.workers import WorkerReport
from portal.core.models import (
    Allocation,
    Cohort,
    Gpu,
    GpuFlavor,
    Job,
    JobArray,
    Node,
    Queue,
    Quota,
    Team,
    Worker,
)
from portal.core.scheduling import run_pass
from portal.core.scheduling.apply import ESTIMATE_SLACK_S
from scheduler import model as m
from scheduler import schedule
from scheduler.requeue import team_reclaims
from tests.scheduler.helpers import Sim, examples

State = Job.State
WS = Worker.State


def _seeds():
    spec = os.environ.get("BERTH_ROUNDTRIP_SEEDS", f"0-{examples(6) - 1}")
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


JITTER = os.environ.get("BERTH_ROUNDTRIP_JITTER") == "1"
PREEMPTIBLE = float(os.environ.get("BERTH_ROUNDTRIP_PREEMPTIBLE", "0.8"))


class Clock:
    def __init__(self, start: datetime):
        self.now = start


@pytest.fixture
def clock(monkeypatch):
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    c = Clock(start)
    monkeypatch.setattr(timezone, "now", lambda: c.now)
    return c


# --- the random cluster -----------------------------------------------------------------

FLAVORS = [("h100-80gb", "NVIDIA H100 80GB HBM3"), ("a100-40gb", "NVIDIA A100-SXM4-40GB")]


@dataclass
class World:
    rng: random.Random
    flavors: list
    nodes: list
    teams: list
    queues: dict
    sizes: dict  # flavor pk -> list of node sizes
    arrays: list = field(default_factory=list)
    # driver's plan of agent events, per job id (current attempt)
    run_for: dict = field(default_factory=dict)  # job -> seconds it runs once admitted
    stop_at: dict = field(default_factory=dict)  # stopping job -> when its workers exit
    n_jobs: int = 0


def make_world(rng: random.Random) -> World:
    cohort = Cohort.objects.create(name="c")
    nflav = rng.choice([1, 1, 2])
    flavors = [
        GpuFlavor.objects.create(name=n, display_name=d, product_names=[d], memory_mib=1)
        for n, d in FLAVORS[:nflav]
    ]
    nodes, sizes = [], {f.pk: [] for f in flavors}
    for i in range(rng.randint(2, 5)):
        flavor = flavors[i % nflav] if i < nflav else rng.choice(flavors)
        gpus = rng.choice([4, 8, 8])
        rack = rng.choice(["r1", "r2"])
        node = Node.objects.create(
            hostname=f"n{i}",
            flavor=flavor,
            rack=rack,
            block=rack.replace("r", "b"),
            condition=Node.Condition.READY,
        )
        Gpu.objects.bulk_create(
            Gpu(node=node, index=g, uuid=f"GPU-n{i}-{g}", product_name=flavor.display_name)
            for g in range(gpus)
        )
        nodes.append(node)
        sizes[flavor.pk].append(gpus)
    teams, queues = [], {}
    nteams = rng.randint(2, 4)
    for t in range(nteams):
        team = Team.objects.create(
            slug=f"t{t}", name=f"T{t}", cohort=cohort, weight=rng.choice([1.0, 1.0, 2.0])
        )
        for f in flavors:
            total = sum(sizes[f.pk])
            nominal = rng.randint(0, max(1, total // 4 if t == 0 else total * 2 // nteams))
            Quota.objects.create(
                team=team,
                flavor=f,
                nominal=nominal,
                borrowing_limit=rng.choice([None, None, rng.randint(0, total)]),
                lending_limit=rng.choice([None, None, rng.randint(0, nominal)]),
            )
        queues[team.pk] = Queue.objects.create(
            team=team, name="default", max_runtime_seconds=24 * 3600, max_restarts=1000
        )
        teams.append(team)
    return World(rng, flavors, nodes, teams, queues, sizes)


def submit_random(w: World, now: datetime, team=None) -> list[int]:
    rng = w.rng
    team = team or rng.choice(w.teams)
    flavor = rng.choice(w.flavors)
    big = max(w.sizes[flavor.pk]) if w.sizes[flavor.pk] else 0
    if not big:
        return []
    gpw = rng.choice([g for g in (1, 2, 4, 8) if g <= big])
    workers = rng.choice([1, 1, 1, 2]) if gpw >= 4 else 1
    array, count = None, 1
    if rng.random() < 0.15:
        count = rng.randint(2, 4)
        array = JobArray.objects.create(
            team=team,
            name="arr",
            spec=f"0-{count - 1}",
            size=count,
            task_limit=rng.choice([None, 1, 2]),
        )
    common = dict(
        team=team,
        queue=w.queues[team.pk],
        flavor=flavor,
        name="j",
        image="img",
        command=["true"],
        workers=workers,
        gpus_per_worker=gpw,
        priority=rng.choice([0, 0, 5, 10]),
        preemptible=rng.random() < PREEMPTIBLE,
        max_runtime_seconds=rng.choice([120, 300, 600, 1800, 3600]),
        grace_period_seconds=rng.choice([30, 30, 60, 120, 300, 600]),
        submitted_at=now,
        max_restarts=1000,
        reason_code="new",
        reason="Waiting for the next scheduling pass.",
    )
    ids = []
    for i in range(count):
        job = Job.objects.create(**common, array=array, array_index=i if array else None)
        ids.append(job.pk)
    w.n_jobs += count
    return ids


# --- the agents ---------------------------------------------------------------------------


def beat_all(w: World, now: datetime) -> None:
    """Every node heartbeats: workers of jobs whose planned end came exit (0 for a job
    that completes, 143 for a preempted one), the others run or stop."""
    ts = now.timestamp()
    for node in w.nodes:
        live = list(
            Worker.objects.filter(node=node)
            .exclude(state__in=[WS.EXITED, WS.LOST])
            .select_related("job")
        )
        reports = []
        for wk in live:
            job = wk.job
            if wk.attempt != job.attempt:
                state, code = "exited", 143
            elif job.state == State.PREEMPTING:
                done = w.stop_at.get(job.pk, float("inf")) <= ts
                state, code = ("exited", 143) if done else ("stopping", None)
            elif job.state in Job.RUNNING_STATES:
                ends = job.admitted_at.timestamp() + w.run_for.get(job.pk, 1e18)
                state, code = ("exited", 0) if ends <= ts else ("running", None)
            else:
                state, code = "exited", 143
            reports.append(WorkerReport(wk.key, state, code))
        gpus = [
            GpuReport(g.index, g.uuid, g.product_name, memory_total_mib=g.memory_mib)
            for g in node.gpus.order_by("index")
        ]
        record_heartbeat(node, agent_version="fuzz", gpus=gpus, workers=reports)


# --- the reference: the core's driver ------------------------------------------------------


def sim_from(snap: m.Snapshot, w: World, restarts: dict, array_limits: dict) -> Sim:
    """The Sim in the state the portal handed the pass: same ids, same GPUs."""
    s = Sim.__new__(Sim)
    cfg = settings.BERTH
    s.config = snap.config
    s.backoff = (cfg["REQUEUE_BACKOFF_BASE_S"], cfg["REQUEUE_BACKOFF_MAX_S"])
    s.early, s._stops = (), 0
    s.requeues = dict(restarts)
    s.nodes = {
        n.name: {
            "flavor": n.flavor,
            "gpus": n.total_gpus,
            "rack": n.rack,
            "block": n.block,
            "free": list(n.free_gpus),
        }
        for n in snap.nodes
    }
    s.teams = snap.teams
    s.pending = {j.id: j for j in snap.pending}
    s.running = {r.id: r for r in snap.running}
    s.stop_at = {r.id: w.stop_at[r.id] for r in snap.running if r.stopping and r.id in w.stop_at}
    s.started, s.preempted = {}, []
    s.runs = {r.id: w.run_for[r.id] for r in snap.running if r.id in w.run_for and not r.stopping}
    s.array_limits = dict(array_limits)
    s.reclaims = {}
    return s


def sim_snapshot(s: Sim, now: float, config) -> m.Snapshot:
    nodes = tuple(
        m.Node(name, n["flavor"], tuple(sorted(n["free"])), n["gpus"], n["rack"], n["block"])
        for name, n in s.nodes.items()
    )
    cooling = team_reclaims(s.reclaims, now)  # the reclaim backoff's state, as it carries it
    teams = tuple(replace(t, reclaims=cooling.get(t.name, {})) for t in s.teams)
    return m.Snapshot(
        now, nodes, teams, tuple(s.running.values()), tuple(s.pending.values()), config
    )


def _norm_running(r: m.RunningJob) -> dict:
    d = {f.name: getattr(r, f.name) for f in fields(r)}
    d["placement"] = tuple(sorted((p.rank, p.node, tuple(sorted(p.gpus))) for p in r.placement))
    return d


def _norm_pending(j: m.PendingJob) -> dict:
    return {f.name: getattr(j, f.name) for f in fields(j) if f.name != "gpus"}


def _norm_team(t: m.Team) -> dict:
    return {
        "name": t.name,
        "weight": t.weight,
        "cohort": t.cohort,
        "quotas": dict(t.quotas),
        "reclaims": dict(t.reclaims),
    }


def diff_snapshots(got: m.Snapshot, want: m.Snapshot) -> list[str]:
    out = []
    if got.now != want.now:
        out.append(f"now {got.now} != {want.now}")
    if got.config != want.config:
        out.append(f"config {got.config} != {want.config}")
    gn = {n.name: n for n in got.nodes}
    wn = {n.name: n for n in want.nodes}
    for name in sorted(gn.keys() | wn.keys()):
        a, b = gn.get(name), wn.get(name)
        if a is None or b is None:
            out.append(f"node {name}: portal {a} sim {b}")
            continue
        a = replace(a, free_gpus=tuple(sorted(a.free_gpus)))
        b = replace(b, free_gpus=tuple(sorted(b.free_gpus)))
        if a != b:
            out.append(f"node {name}: portal {a} sim {b}")
    for kind, g, wnt, norm in (
        ("running", got.running, want.running, _norm_running),
        ("pending", got.pending, want.pending, _norm_pending),
    ):
        gm = {x.id: norm(x) for x in g}
        wm = {x.id: norm(x) for x in wnt}
        for pk in sorted(gm.keys() | wm.keys()):
            a, b = gm.get(pk), wm.get(pk)
            if a is None or b is None:
                out.append(f"{kind} job {pk}: only in {'sim' if a is None else 'portal'}")
                continue
            for k in a:
                if a[k] != b[k]:
                    out.append(f"{kind} job {pk}.{k}: portal {a[k]!r} sim {b[k]!r}")
    gt = {t.name: _norm_team(t) for t in got.teams}
    wt = {t.name: _norm_team(t) for t in want.teams}
    if gt != wt:
        out.append(f"teams: portal {gt} sim {wt}")
    return out


# --- what the pass wrote ------------------------------------------------------------------


def check_applied(plan: m.Plan, result, now: datetime) -> list[str]:
    out = []
    adm = {a.job_id: a for a in plan.admissions}
    if sorted(result.admitted) != sorted(adm):
        out.append(f"admitted {sorted(result.admitted)} != plan {sorted(adm)}")
    for pk, a in adm.items():
        job = Job.objects.get(pk=pk)
        if job.state != State.ADMITTED or job.admitted_at != now:
            out.append(f"admitted job {pk}: state {job.state} admitted_at {job.admitted_at}")
        if job.preempted_by is not None or job.reserved_on or job.stop_requested_at:
            out.append(f"admitted job {pk} keeps a link/reservation/stop")
        held = sorted(
            Allocation.objects.filter(job_id=pk, active=True).values_list(
                "worker_rank", "node__hostname", "gpu_id"
            )
        )
        want = sorted((p.rank, p.node, g) for p in a.placement for g in p.gpus)
        if held != want:
            out.append(f"admitted job {pk}: allocations {held} != placement {want}")
        ws = sorted(
            Worker.objects.filter(job_id=pk, attempt=job.attempt).values_list(
                "rank", "node__hostname"
            )
        )
        if ws != sorted((p.rank, p.node) for p in a.placement):
            out.append(f"admitted job {pk}: workers {ws}")
    pre = {p.job_id: p for p in plan.preemptions}
    if sorted(result.preempted) != sorted(pre):
        out.append(f"preempted {sorted(result.preempted)} != plan {sorted(pre)}")
    for pk, p in pre.items():
        job = Job.objects.get(pk=pk)
        if (job.state, job.preempted_by, job.stop_requested_at) != (
            State.PREEMPTING,
            p.preemptor_id,
            now,
        ):
            out.append(f"victim {pk}: {job.state} by {job.preempted_by} at {job.stop_requested_at}")
    for v in plan.verdicts:
        job = Job.objects.get(pk=v.job_id)
        if job.state != State.PENDING:
            continue
        got = (job.reason_code, job.reason, job.queue_position)
        if got != (v.reason_code[:32], v.message, v.position):
            out.append(
                f"verdict {v.job_id}: stored {got} != plan {(v.reason_code, v.message, v.position)}"
            )
        est = job.estimated_start_at.timestamp() if job.estimated_start_at else None
        if (est is None) != (v.estimated_start is None) or (
            est is not None and abs(est - v.estimated_start) >= ESTIMATE_SLACK_S
        ):
            out.append(f"verdict {v.job_id}: estimate {est} != {v.estimated_start}")
    return out


# --- the driver ----------------------------------------------------------------------------


def run_case(seed: int, clock: Clock, steps: int = 25) -> tuple[list[str], dict]:
    rng = random.Random(seed)
    w = make_world(rng)
    stats = {"passes": 0, "admissions": 0, "preemptions": 0, "requeues": 0}
    reclaims: dict = {}  # the driver's reclaim backoff state, kept across its passes
    # A borrower floods the cluster first; the others come later and reclaim.
    flood = w.teams[0]
    for _ in range(rng.randint(4, 10)):
        submit_random(w, clock.now, team=flood)
    findings: list[str] = []
    expected = None
    for step in range(steps):
        now = clock.now
        result = run_pass()
        snap, plan = result.snapshot, result.plan
        stats["passes"] += 1
        if expected is not None:
            for d in diff_snapshots(snap, expected):
                findings.append(f"seed {seed} step {step}: {d}")
        if schedule(snap) != plan:
            findings.append(f"seed {seed} step {step}: plan not deterministic")
        for d in check_applied(plan, result, now):
            findings.append(f"seed {seed} step {step}: {d}")
        stats["reservations"] = stats.get("reservations", 0) + len(plan.reservations)
        stats["until"] = stats.get("until", 0) + sum(r.until is not None for r in plan.reservations)
        stats["linked_pending"] = stats.get("linked_pending", 0) + sum(
            j.preempted_by is not None for j in snap.pending
        )
        stats["array_limit"] = stats.get("array_limit", 0) + sum(
            v.reason_code == "array_limit" for v in plan.verdicts
        )
        stats["admissions"] += len(plan.admissions)
        stats["preemptions"] += len(plan.preemptions)
        # The reference: the core's driver from the same snapshot and plan.
        restarts = dict(
            Job.objects.filter(pk__in=[r.id for r in snap.running]).values_list(
                "pk", "restart_count"
            )
        )
        restarts.update({j.id: j.restart_count for j in snap.pending})
        limits = dict(
            Job.objects.filter(
                pk__in=[r.id for r in snap.running] + [a.job_id for a in plan.admissions]
            ).values_list("pk", "array__task_limit")
        )
        s = sim_from(snap, w, restarts, limits)
        s.reclaims = reclaims
        # The driver's agent events for this pass's admissions and preemptions.
        ts = now.timestamp()
        for a in plan.admissions:
            job = next(j for j in snap.pending if j.id == a.job_id)
            w.run_for[a.job_id] = round(job.max_runtime * rng.choice([0.1, 0.3, 0.6, 1.0]))
        for p in plan.preemptions:
            r = next(r for r in snap.running if r.id == p.job_id)
            stop = ts + round(r.grace_period * rng.choice([0.05, 0.3, 0.7, 1.0]))
            # stopped by its max run time at the latest: the portal's timeout sweep, which
            # fails a victim past it, is not run here (test_agent_protocol.py has it)
            w.stop_at[p.job_id] = min(stop, r.started_at + r.max_runtime)
        s.apply(plan, ts)
        s.runs = {
            pk: w.run_for[pk] for pk, r in s.running.items() if pk in w.run_for and not r.stopping
        }
        s.stop_at = {
            pk: w.stop_at[pk] for pk, r in s.running.items() if r.stopping and pk in w.stop_at
        }
        # Next pass time; events happen at it.
        clock.now = now + timedelta(seconds=rng.choice([5, 10, 20, 30, 45, 60, 90]))
        if JITTER:
            clock.now += timedelta(microseconds=rng.randint(0, 999_999))
        nts = clock.now.timestamp()
        before = {r.id for r in s.running.values() if r.stopping}
        s._finish(nts)
        stats["requeues"] += len(before & set(s.pending))
        beat_all(w, clock.now)
        # Mirror what neither driver models (jobs failed as unfittable) into the Sim.
        for pk in list(s.pending):
            if Job.objects.filter(pk=pk, state=State.FAILED).exists():
                del s.pending[pk]
        for pk in [
            pk for _ in range(rng.choice([0, 0, 1, 1, 2])) for pk in submit_random(w, clock.now)
        ]:
            j = Job.objects.get(pk=pk)
            s.submit(
                m.PendingJob(
                    pk,
                    j.team.slug,
                    j.queue.name,
                    j.flavor.name,
                    j.workers,
                    j.gpus_per_worker,
                    j.priority,
                    j.submitted_at.timestamp(),
                    float(j.max_runtime_seconds),
                    j.preemptible,
                    array_id=j.array_id,
                    array_limit=j.array.task_limit if j.array_id else None,
                    grace_period=float(j.grace_period_seconds),
                )
            )
        expected = sim_snapshot(s, nts, snap.config)
    return findings, stats


@pytest.mark.parametrize("seed", _seeds())
def test_roundtrip(seed, clock, db, settings):
    # odd seeds with the reclaim backoff on (BERTH_RECLAIM_BACKOFF): the portal's rows and
    # the driver's count_reclaims must carry the same state into every pass
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": seed % 2 == 1}
    findings, stats = run_case(seed, clock)
    assert stats["passes"] == 25 and stats["admissions"] > 0  # the run did something
    assert not findings, "\n".join(findings[:40])

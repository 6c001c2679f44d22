"""Issue 13's promises under disruptions the earlier probes left out: nodes cordoned or
gone and unhealthy GPUs while a preemptor waits, preemptors cancelled mid-grace,
PolicyConfig options, requeue backoff, GPU-hour budgets, checkpoints and long grace
periods (docs/scheduling.md, Preemption, reservations across passes)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from scheduler import Budget, Snapshot, schedule
from tests.scheduler.helpers import (
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    preempted,
    verdict,
)
from tests.scheduler.test_runs import (
    PASSES,
    check_messages,
    check_quotas,
    check_waits_name_stopping_jobs,
    describe,
    floods,
    runs,
    usage_of,
)

LONG = 100 * HOUR


class DSim(Sim):
    """Sim with disruptions: nodes missing from the snapshot (cordoned, NotReady),
    free GPUs hidden (unhealthy), GPU-hour budgets, per-job grace periods and
    checkpoints."""

    def __init__(self, cluster, budgets=(), grace=None, checkpoint=None, **kw):
        super().__init__(cluster, **kw)
        self.gone: set[str] = set()
        self.unhealthy: dict[str, int] = {}
        self.budgets = {(b.team, b.flavor): b for b in budgets}
        self.grace = grace or {}
        self.checkpoint = checkpoint or {}
        self.last = None
        self.snap = None

    def _nodes(self):
        out = []
        for n in super()._nodes():
            if n.name in self.gone:
                continue
            k = self.unhealthy.get(n.name, 0)
            if k:
                n = replace(n, free_gpus=n.free_gpus[k:])
            out.append(n)
        return tuple(out)

    def _accrue(self, now):
        if self.last is not None:
            dt = now - self.last
            for r in self.running.values():
                b = self.budgets.get((r.team, r.flavor))
                if b is not None:
                    self.budgets[(r.team, r.flavor)] = replace(b, used=b.used + r.gpus * dt / HOUR)
        self.last = now

    def step(self, now):
        self._finish(now)
        self._accrue(now)
        for i, period in self.checkpoint.items():
            r = self.running.get(i)
            if r is not None and now > r.started_at:
                done = r.started_at + period * ((now - r.started_at) // period)
                self.running[i] = replace(r, checkpointed_at=done)
        snapshot = Snapshot(
            now,
            self._nodes(),
            self.teams,
            tuple(self.running.values()),
            tuple(self.pending.values()),
            self.config,
            tuple(self.budgets.values()),
        )
        self.snap = snapshot
        plan = schedule(snapshot)
        free = {g for n in snapshot.nodes for g in n.free_gpus}
        for a in plan.admissions:  # only GPUs the snapshot lists free
            for w in a.placement:
                assert set(w.gpus) <= free, (a.job_id, w)
        return self.apply(plan, now)

    def _start(self, job, adm, now):
        super()._start(job, adm, now)
        r = self.running[job.id]
        self.running[job.id] = replace(
            r,
            grace_period=self.grace.get(job.id, r.grace_period),
        )


# -- random runs with disruptions ----------------------------------------------------


@st.composite
def disrupted(draw, base=runs):
    c, arrivals, config, backoff, every, early = draw(base())
    names = sorted(c.nodes)
    events = []
    for _ in range(draw(st.integers(0, 3))):
        events.append(
            (
                draw(st.integers(1, PASSES - 1)),
                draw(st.sampled_from(["gone", "unhealthy", "cancel"])),
                draw(st.sampled_from(names)),
                draw(st.integers(1, 4)),  # passes it lasts / GPUs hidden
            )
        )
    ids = [j.id for _, j in arrivals]
    grace = {i: draw(st.sampled_from([30.0, 30.0, 90.0, 5.0])) for i in ids}
    checkpoint = {i: 20.0 for i in ids if draw(st.integers(0, 3)) == 0}
    budgets = []
    for t in c.teams:
        for f in ("h100", "a100"):
            if draw(st.integers(0, 4)) == 0:
                budgets.append(
                    Budget(
                        t.name,
                        f,
                        draw(st.sampled_from([1.0, 5.0, 50.0, 500.0])),
                        0.0,
                        resets_at=NOW + 30 * 24 * HOUR,
                    )
                )
    config = dict(config, explain=True)  # estimates bound when a claim falls due
    if draw(st.booleans()):
        config["age_weight"] = draw(st.sampled_from([0.5, 2.0]))
        config["max_age"] = draw(st.sampled_from([60.0, 600.0]))
    return c, arrivals, config, backoff, every, early, events, grace, checkpoint, tuple(budgets)


def run_disrupted(run, strict=True):
    c, arrivals, config, backoff, every, early, events, grace, checkpoint, budgets = run
    note(describe(c, arrivals, config, backoff))
    note(f"every {every} early {early} events {events} grace {grace} ckpt {checkpoint}")
    note(f"budgets {budgets}")
    sim = DSim(
        c,
        budgets=budgets,
        grace=grace,
        checkpoint=checkpoint,
        backoff=backoff,
        early=early,
        preemption=True,
        **config,
    )
    nominal = {(t.name, f): q.nominal for t in c.teams for f, q in t.quotas.items()}
    claims: dict[int, int] = {}
    told: dict[int, float] = {}
    disturbed_at = -1
    restore = []
    for step in range(PASSES):
        now = NOW + step * every
        for when, job in arrivals:
            if when == step:
                sim.submit(job)
        for until, kind, node, k in list(restore):
            if until == step:
                restore.remove((until, kind, node, k))
                if kind == "gone":
                    sim.gone.discard(node)
                else:
                    sim.unhealthy.pop(node, None)
        for when, kind, node, k in events:
            if when != step:
                continue
            if kind == "cancel":
                waiting = sorted(
                    {r.preempted_by for r in sim.running.values() if r.stopping and r.preempted_by}
                    & set(sim.pending)
                )
                if waiting:
                    del sim.pending[waiting[0]]
                    note(f"pass {step}: cancel {waiting[0]}")
                continue
            disturbed_at = step
            if kind == "gone":
                sim.gone.add(node)
            else:
                sim.unhealthy[node] = k
            restore.append((step + k, kind, node, k))
        sim._finish(now)
        settled = usage_of(r for r in sim.running.values() if not r.stopping)
        pending = dict(sim.pending)
        before = dict(sim.running)
        plan = sim.step(now)
        snap = sim.snap
        note(
            f"pass {step}: admit {admitted(plan)} preempt "
            f"{[(p.job_id, p.preemptor_id) for p in plan.preemptions]} gone {sim.gone} "
            f"unhealthy {sim.unhealthy}"
        )
        assert not set(preempted(plan)) & set(admitted(plan))
        check_quotas(c.teams, usage_of(sim.running.values()))
        for p in plan.preemptions:
            victim = before[p.job_id]
            assert victim.preemptible and not victim.stopping, p
        check_messages(plan, pending, before, nominal)
        if config.get("explain"):
            check_waits_name_stopping_jobs(
                plan, sim.running, now, grace=max(grace.values(), default=30.0)
            )
        # budgets: admissions of jobs no victim names stay within the budget
        named = {r.preempted_by for r in snap.running} | {j.preempted_by for j in snap.pending}
        for b in snap.budgets:
            key = (b.team, b.flavor)
            taken = [
                pending[a.job_id]
                for a in plan.admissions
                if (pending[a.job_id].team, pending[a.job_id].flavor) == key
            ]
            checked = [j for j in taken if j.id not in named]
            if not checked:
                continue
            committed = sum(
                r.gpus * max(0.0, r.started_at + r.max_runtime - now) / HOUR
                for r in snap.running
                if (r.team, r.flavor) == key and not r.stopping
            )
            spent = sum(j.gpus * j.max_runtime / HOUR for j in taken)
            assert b.used + committed + spent <= b.limit + 1e-6, (b, taken)
        if not strict:
            continue
        for job_id, due in list(claims.items()):
            job = pending.get(job_id)
            if job is None:
                del claims[job_id]
                continue
            key = (job.team, job.flavor)
            if settled[key] + job.gpus > nominal[key] or disturbed_at >= 0:
                continue
            again = [p.job_id for p in plan.preemptions if p.preemptor_id == job_id]
            assert again == [], f"preemptor {job_id} preempted again at pass {step}"
            if job_id in told:  # it may wait for other stopping jobs too (rule 4)
                due = max(due, math.ceil((told[job_id] - NOW) / every - 1e-9))
            if due <= step:
                del claims[job_id]
                assert job_id in admitted(plan), f"preemptor {job_id} not admitted (pass {step})"
                if job_id in told and disturbed_at < 0:
                    assert now <= told[job_id] + every, (job_id, told[job_id] - NOW, now - NOW)
        for p in plan.preemptions:
            g = before[p.job_id].grace_period
            due = step + math.ceil(g / every)
            claims[p.preemptor_id] = max(claims.get(p.preemptor_id, 0), due)
        for a in plan.admissions:  # a claim met; requeued and preempting again, it is told anew
            told.pop(a.job_id, None)
        for v in plan.verdicts:
            if v.reason_code == "waiting_for_preemption" and v.estimated_start is not None:
                told.setdefault(v.job_id, v.estimated_start)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(disrupted())
def test_random_disrupted_runs_keep_the_promises(run):
    """Random runs (test_runs.py's two strategies) with nodes leaving the snapshot and
    unhealthy GPUs for a few passes, waiting preemptors cancelled, grace periods of 5,
    30 or 90 s, victims that checkpoint, GPU-hour budgets and the age factor: no GPU
    outside the snapshot's free lists is handed out, no quota or budget overrun, victims
    preemptible and not admitted in their pass, messages true; while no node was
    disturbed, every preemptor within nominal is admitted by the pass after its
    estimated start and preempts once."""
    run_disrupted(run)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(disrupted(base=floods))
def test_random_disrupted_floods_keep_the_promises(run):
    run_disrupted(run)


# -- a preemptor's target ignores when its GPUs come free ----------------------------


def test_a_preemptor_does_not_wait_for_another_preemptors_slow_victim_beside_free_gpus():
    """Cohort c: a (nominal 3), d (nominal 5, idle: lends 5), b (nominal 0) borrows 7 of
    the 8 lendable. n0 (4 GPUs): b's 1-GPU job 10 (grace 600 s, the newest) and 3-GPU
    job 11; n1 (8 GPUs): b's 2-GPU job 12 and 1-GPU job 13; 5 GPUs of n1 free. a submits
    job 1 (2 GPUs) then job 2 (1 GPU), both within a's nominal quota and both short of
    cohort quota only.

    Job 1 reclaims 10 (the idle 1 + 10's 1 of quota) and reserves 2 free GPUs of n1.
    Job 2 reclaims 12 (30 s grace) for quota. Its target was n0 (best fit on the
    cluster as it will be): the one GPU job 10 frees beyond job 1's reservation, in
    10 minutes, beside 5 GPUs of n1 free now; it waited 600 s for another preemptor's
    victim ("waits for ... 1 stopping job(s) (10) ... by +600 s") and job 12 was
    stopped for GPUs nobody used for 9.5 minutes. Now a target goes where the job
    fits without the GPUs of jobs already stopping, if it can
    (`preemption._target_gpus`): it starts at +30 s, when its own victim has stopped."""
    c = Cluster().node("n0", gpus=4).node("n1", gpus=8)
    c.team("a", nominal=3, cohort="c").team("d", nominal=5, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 1}, started=NOW - 10, runtime=LONG, grace=600.0)
    c.run(11, "b", on={"n0": 3}, started=NOW - 5000, runtime=LONG)
    c.run(12, "b", on={"n1": 2}, started=NOW - 20, runtime=LONG)
    c.run(13, "b", on={"n1": 1}, started=NOW - 5000, runtime=LONG)
    c.job(1, "a", gpus=2, runtime=LONG)
    c.job(2, "a", gpus=1, runtime=LONG)
    sim = Sim(c)
    first = sim.step(NOW)
    assert sorted((p.job_id, p.preemptor_id) for p in first.preemptions) == [(10, 1), (12, 2)]
    for t in (30, 60, 90, 600):
        sim.step(NOW + t)
    assert sim.started[1] == NOW + 600  # its own victim's grace period
    assert sim.started[2] == NOW + 30, (sim.started[2] - NOW, verdict(first, 2).message)

"""Small builders for scheduler scenarios: nodes, teams, jobs, a fixed clock.

    c = Cluster()
    c.node("n1", gpus=8)
    c.team("a", nominal=8)
    c.run(1, "a", on={"n1": 4})          # a running job holding 4 GPUs of n1
    c.job(2, "a", workers=1, gpus=4)     # a pending job
    plan = schedule(c.snapshot())

No Django: these build the scheduler's frozen dataclasses directly.
"""

from __future__ import annotations

import os
from dataclasses import replace

from scheduler import (
    Node,
    PendingJob,
    Plan,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    WorkerPlacement,
    requeue_backoff,
    schedule,
)
from scheduler.requeue import count_reclaims, reclaimed, team_reclaims

NOW = 1_000_000.0  # the fixed clock of every scenario
HOUR = 3600.0
FLAVOR = "h100"


def make_node(name, gpus=8, free=None, flavor=FLAVOR, rack="r1", block="b1") -> Node:
    """A node whose first `free` GPUs (all by default) are free; ids are 'name/i'."""
    free = gpus if free is None else free
    return Node(name, flavor, tuple(f"{name}/{i}" for i in range(free)), gpus, rack, block)


def make_team(
    name,
    nominal=0,
    cohort=None,
    weight=1.0,
    borrowing_limit=None,
    lending_limit=None,
    decayed=None,
    flavor=FLAVOR,
    reclaims=None,
) -> Team:
    """A team with one quota of `flavor` (nominal may also be a dict flavor -> Quota);
    `reclaims`: the reclaim backoff's state, flavor -> (reclaims in a row, the last's time)."""
    quotas = (
        nominal
        if isinstance(nominal, dict)
        else {flavor: Quota(nominal, borrowing_limit, lending_limit)}
    )
    return Team(name, weight, cohort, quotas, decayed or {}, reclaims or {})


def make_job(
    id,
    team="a",
    workers=1,
    gpus=1,
    priority=0,
    submitted=None,
    runtime=HOUR,
    queue="q",
    flavor=FLAVOR,
    preemptible=True,
    restarts=0,
    eligible_at=0.0,
    old_attempt=False,
) -> PendingJob:
    """A pending gang of `workers` x `gpus` GPUs, submitted `id` seconds before NOW by default."""
    submitted = NOW - 1000 + id if submitted is None else submitted
    return PendingJob(
        id,
        team,
        queue,
        flavor,
        workers,
        gpus,
        priority,
        submitted,
        runtime,
        preemptible,
        restarts,
        eligible_at,
        previous_attempt_stopping=old_attempt,
    )


class Cluster:
    """A mutable scenario that hands out GPU ids consistently, then freezes to a Snapshot."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.teams: list[Team] = []
        self.running: list[RunningJob] = []
        self.pending: list[PendingJob] = []

    def node(self, name, gpus=8, flavor=FLAVOR, rack="r1", block="b1", unhealthy=0) -> Cluster:
        ids = [f"{name}/{i}" for i in range(gpus - unhealthy)]
        self.nodes[name] = {
            "flavor": flavor,
            "gpus": gpus,
            "rack": rack,
            "block": block,
            "free": ids,
        }
        return self

    def nodes_(self, count, prefix="n", gpus=8, per_block=None, flavor=FLAVOR) -> Cluster:
        """Add `count` nodes n0..; `per_block` nodes share a block (and rack)."""
        for i in range(count):
            b = f"b{i // per_block}" if per_block else "b1"
            self.node(f"{prefix}{i}", gpus=gpus, flavor=flavor, rack=b.replace("b", "r"), block=b)
        return self

    def team(self, name, nominal=0, **kw) -> Cluster:
        self.teams.append(make_team(name, nominal, **kw))
        return self

    def job(self, id, team="a", **kw) -> PendingJob:
        job = make_job(id, team, **kw)
        self.pending.append(job)
        return job

    def run(
        self,
        id,
        team="a",
        on=None,
        priority=0,
        started=None,
        runtime=HOUR,
        queue="q",
        flavor=FLAVOR,
        preemptible=True,
        stopping=False,
        checkpointed=None,
        grace=30.0,
        submitted=None,
        per_worker=None,
        stop_requested=None,
    ) -> RunningJob:
        """A running job holding GPUs of the given nodes: on={"n1": 4, "n2": 4}."""
        placement = []
        for name, k in (on or {}).items():
            free = self.nodes[name]["free"]
            assert len(free) >= k, f"{name} has only {len(free)} free GPUs"
            step = per_worker or k
            for first in range(0, k, step):
                placement.append(
                    WorkerPlacement(len(placement), name, tuple(free[first : first + step]))
                )
            del free[:k]
        gpus = sum((on or {}).values())
        started = NOW - 600 if started is None else started
        submitted = started - 10 if submitted is None else submitted
        job = RunningJob(
            id,
            team,
            queue,
            flavor,
            gpus,
            priority,
            submitted,
            started,
            runtime,
            tuple(placement),
            preemptible,
            stopping,
            checkpointed,
            grace,
            stop_requested_at=stop_requested,
        )
        self.running.append(job)
        return job

    def snapshot(self, now=NOW, **config) -> Snapshot:
        nodes = tuple(
            Node(name, n["flavor"], tuple(n["free"]), n["gpus"], n["rack"], n["block"])
            for name, n in self.nodes.items()
        )
        return Snapshot(
            now,
            nodes,
            tuple(self.teams),
            tuple(self.running),
            tuple(self.pending),
            PolicyConfig(**config),
        )


def admitted(plan: Plan) -> list[int]:
    return [a.job_id for a in plan.admissions]


def preempted(plan: Plan) -> list[int]:
    return [p.job_id for p in plan.preemptions]


def verdict(plan: Plan, job_id: int):
    found = [v for v in plan.verdicts if v.job_id == job_id]
    assert len(found) == 1, f"job {job_id} has {len(found)} verdicts"
    return found[0]


def reasons(plan: Plan) -> dict[int, str]:
    return {v.job_id: v.reason_code for v in plan.verdicts}


def nodes_of(plan: Plan, job_id: int) -> list[str]:
    """Return the node of each worker of an admitted job, in rank order."""
    (adm,) = [a for a in plan.admissions if a.job_id == job_id]
    return [w.node for w in adm.placement]


class Sim:
    """Drive many passes with a fixed step: jobs run exactly their max runtime,
    preempted jobs stop after their grace period and go back to the queue, after a
    requeue backoff of `backoff` = (base, max) seconds (none by default). `early`:
    fractions of the grace period after which the victims stop, in turn (their workers
    exit sooner, as in the portal); none: the whole grace period. `runs`: job id -> how
    long it runs when it ends before its max runtime (most jobs do)."""

    def __init__(self, cluster: Cluster, backoff=(0.0, 0.0), early=(), **config) -> None:
        self.config = PolicyConfig(**config)
        self.backoff = backoff
        self.early = tuple(early)
        self._stops = 0
        self.requeues: dict[int, int] = {}
        self.nodes = {name: dict(n, free=list(n["free"])) for name, n in cluster.nodes.items()}
        self.teams = tuple(cluster.teams)
        self.pending: dict[int, PendingJob] = {j.id: j for j in cluster.pending}
        self.running: dict[int, RunningJob] = {}
        self.stop_at: dict[int, float] = {}
        self.started: dict[int, float] = {}  # job id -> first start time
        self.preempted: list[int] = []
        self.runs: dict[int, float] = {}
        self.array_limits: dict[int, int | None] = {}  # job -> its array's limit, kept on requeue
        # the reclaim backoff's state, kept as the simulator keeps it (scheduler.requeue)
        self.reclaims: dict[tuple[str, str], tuple[int, float]] = {}
        for r in cluster.running:
            self.running[r.id] = r

    def submit(self, job: PendingJob) -> None:
        self.pending[job.id] = job

    def start_of(self, job_id: int, every: float, passes: int) -> float | None:
        """Run passes `every` seconds apart from NOW; return when the job started, or None."""
        for step in range(passes):
            self.step(NOW + every * step)
            if job_id in self.started:
                return self.started[job_id]
        return None

    def step(self, now: float) -> Plan:
        self._finish(now)
        cooling = team_reclaims(self.reclaims, now)
        snapshot = Snapshot(
            now,
            self._nodes(),
            tuple(replace(t, reclaims=cooling.get(t.name, {})) for t in self.teams),
            tuple(self.running.values()),
            tuple(self.pending.values()),
            self.config,
        )
        return self.apply(schedule(snapshot), now)

    def apply(self, plan: Plan, now: float) -> Plan:
        """Stop the plan's victims (after their grace period), start its admissions."""
        if self.config.reclaim_backoff:  # as the portal and the simulator keep it: when on
            count_reclaims(self.reclaims, reclaimed(plan, self.running), now)
        for p in plan.preemptions:
            self.running[p.job_id] = replace(
                self.running[p.job_id],
                stopping=True,
                preempted_by=p.preemptor_id,
                stop_requested_at=now,
            )
            share = self.early[self._stops % len(self.early)] if self.early else 1.0
            self._stops += 1
            self.stop_at[p.job_id] = now + self.running[p.job_id].grace_period * share
            self.preempted.append(p.job_id)
        for a in plan.admissions:
            self._start(self.pending.pop(a.job_id), a, now)
        self._reserve(plan)
        return plan

    def _reserve(self, plan: Plan) -> None:
        # Where each waiting preemptor holds its GPUs, as the portal stores it
        # (PendingJob.reserved_on, reserved_until, reserved_ending); a job the plan does not
        # name holds nothing.
        held = {r.job_id: (r.nodes, r.until, r.ending) for r in plan.reservations}
        for job in list(self.pending.values()):
            nodes, until, ending = held.get(job.id, ((), None, ()))
            if (job.reserved_on, job.reserved_until, job.reserved_ending) != (nodes, until, ending):
                self.pending[job.id] = replace(
                    job, reserved_on=nodes, reserved_until=until, reserved_ending=ending
                )

    def _finish(self, now: float) -> None:
        for r in list(self.running.values()):
            stopped = r.id in self.stop_at and self.stop_at[r.id] <= now
            if (
                stopped
                or r.started_at + min(r.max_runtime, self.runs.get(r.id, r.max_runtime)) <= now
            ):
                del self.running[r.id]
                for w in r.placement:
                    self.nodes[w.node]["free"].extend(w.gpus)
            if stopped:
                del self.stop_at[r.id]
                n = self.requeues[r.id] = self.requeues.get(r.id, 0) + 1
                self.pending[r.id] = PendingJob(
                    r.id,
                    r.team,
                    r.queue,
                    r.flavor,
                    len(r.placement) or 1,
                    r.gpus // (len(r.placement) or 1),
                    r.priority,
                    r.submitted_at,
                    r.max_runtime,
                    r.preemptible,
                    n,
                    now + requeue_backoff(n, *self.backoff),
                    r.preempted_by,
                    array_id=r.array_id,
                    array_limit=self.array_limits.get(r.id),
                    grace_period=r.grace_period,
                )

    def _start(self, job: PendingJob, adm, now: float) -> None:
        # Its victims' links to it end, stopping or requeued (PendingJob.preempted_by).
        for other in self.running.values():
            if other.preempted_by == job.id:
                self.running[other.id] = replace(other, preempted_by=None)
        for other in self.pending.values():
            if other.preempted_by == job.id:
                self.pending[other.id] = replace(other, preempted_by=None)
        for w in adm.placement:
            free = self.nodes[w.node]["free"]
            for g in w.gpus:
                free.remove(g)  # raises if the GPU was not free
        self.started.setdefault(job.id, now)
        self.running[job.id] = RunningJob(
            job.id,
            job.team,
            job.queue,
            job.flavor,
            job.gpus,
            job.priority,
            job.submitted_at,
            now,
            job.max_runtime,
            adm.placement,
            job.preemptible,
            grace_period=job.grace_period,
            array_id=job.array_id,  # counted against its array's limit, as the portal does
        )
        self.array_limits[job.id] = job.array_limit

    def _nodes(self) -> tuple[Node, ...]:
        return tuple(
            Node(
                name,
                n["flavor"],
                tuple(sorted(n["free"], key=_gpu_order)),
                n["gpus"],
                n["rack"],
                n["block"],
            )
            for name, n in self.nodes.items()
        )


def _gpu_order(gpu: str):
    name, index = gpu.rsplit("/", 1)
    return (name, int(index))


# The property tests draw fresh random cases on every run; `make fuzz-scheduler` runs
# them with BERTH_PROPERTY_SCALE times as many (docs/scheduling.md, "Tests").
PROPERTY_SCALE = float(os.environ.get("BERTH_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    """`n` property-test examples, times BERTH_PROPERTY_SCALE."""
    return max(1, round(n * PROPERTY_SCALE))

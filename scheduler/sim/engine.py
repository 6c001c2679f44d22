"""The event loop: a trace replayed through scheduler.schedule() on a simulated clock.

Events, in time order (at one time: completions, stops, wakes, then arrivals):

- arrival: the job becomes pending (all arrivals of one timestamp in one batch);
- completion: a running job ends `duration` seconds after it was admitted and
  frees its GPUs;
- stop: a job preempted by a plan stops when its grace period ends, frees its
  GPUs, loses all work since its start (traces have no checkpoints) and is
  requeued with its original submit time, eligible again after its requeue
  backoff (scheduler.requeue, the portal's defaults). A job that would
  complete before its grace period ends completes instead;
- wake: a requeued job's backoff ends, so a pass runs even if nothing else
  happens then (Kueue requeues a backed-off workload the same way).

After the events of one timestamp, if anything changed and jobs are pending,
one pass runs: the simulator builds a Snapshot at that time and applies the
Plan (admissions start now, preemptions stop after their grace period).
Nothing else decides what runs: there is no simulation policy code.

For speed, frozen objects are reused between passes: a node's Node only
changes when its free GPUs do, a job's PendingJob and RunningJob are built
once per attempt, teams are rebuilt only for the fair-share policy (whose
order reads decayed usage). PolicyConfig(explain=False) skips estimates.

With SimConfig(estimates=True) every pass explains, as the portal's does, and each
job keeps the estimated start of the first verdict it gets (the one its submitter
first reads); results.estimate_figures compares it with the job's first start.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core import schedule
from scheduler.fairshare import accrue
from scheduler.model import (
    Node,
    PendingJob,
    Plan,
    PolicyConfig,
    RunningJob,
    Snapshot,
    Team,
)
from scheduler.ordering import queue_key
from scheduler.reasons import BUDGET_EXHAUSTED, NEVER_FITS, NO_NODES
from scheduler.requeue import (
    DEFAULT_BASE_S,
    DEFAULT_MAX_S,
    count_reclaims,
    reclaim_cooldown_end,
    reclaimed,
    requeue_backoff,
    team_reclaims,
)

from .budgets import BudgetLedger, BudgetSpec
from .cluster import NodeSpec, capacity
from .metrics import Recorder, fragmentation_share
from .trace import TraceJob

ESTIMATES = ("exact", "double", "queue-max", "declared")
QUEUE_MAX_S = 7 * 24 * 3600.0
# Event kinds, in the order they are handled at one timestamp.
END, STOP, WAKE, TICK = 0, 1, 2, 3  # TICK: a pass, for no job (a reclaim backoff ends)
# Call the progress callback after about this many arrivals.
PROGRESS_EVERY = 500
# Policies whose order reads Team.decayed_usage.
READS_USAGE = frozenset({"fairshare"})


class SimError(AssertionError):
    """An invariant of the simulation broke (checked with check=True): a bug."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    policy: PolicyConfig = field(default_factory=lambda: PolicyConfig(explain=False))
    runtime_estimate: str = "exact"
    queue_max_s: float = QUEUE_MAX_S
    grace_period_s: float = 30.0
    # Requeue backoff after a preemption (scheduler.requeue); a base of 0 turns it off.
    requeue_backoff_s: float = DEFAULT_BASE_S
    requeue_backoff_max_s: float = DEFAULT_MAX_S
    bin_s: float = 3600.0  # utilization time series resolution
    check: bool = False  # verify every plan against the simulated cluster (slow)
    # GPU-hour budgets per calendar month (scheduler.sim.budgets); none by default.
    budgets: tuple[BudgetSpec, ...] = ()
    # Explain every pass and keep each job's first estimated start (slower).
    estimates: bool = False


def max_runtime(job: TraceJob, how: str, queue_max: float) -> float:
    """Return what the scheduler is told the job's max runtime is.

    exact: its true duration; double: twice that; queue-max: a fixed queue
    limit; declared: what the trace says the user declared (else exact).
    The job really runs for its duration whatever it declared.
    """
    if how == "exact":
        return job.duration
    if how == "double":
        return 2.0 * job.duration
    if how == "queue-max":
        return queue_max
    if how == "declared":
        return job.max_runtime or job.duration
    raise ValueError(f"unknown runtime estimate {how!r}; known: {', '.join(ESTIMATES)}")


def entitlement_weights(teams: Sequence[Team]) -> dict[str, dict[str, float]]:
    """Return flavor -> team -> nominal quota: what each team is entitled to share by."""
    out: dict[str, dict[str, float]] = {}
    for t in teams:
        for flavor, q in t.quotas.items():
            out.setdefault(flavor, {})[t.name] = float(q.nominal)
    return out


def _clock_off(r: JobRec, now: float) -> None:
    """Stop a job's reclaim clock (Simulator._watch_reclaim), keeping the time it ran."""
    if r.reclaim_since is not None:
        r.reclaim_s += now - r.reclaim_since
        r.reclaim_since = None


class JobRec:
    """One job's life in the simulation."""

    __slots__ = (
        "job",
        "pending",
        "running",
        "attempt",
        "started",
        "pending_since",
        "waited",
        "first_start",
        "finished",
        "preempted",
        "lost_s",
        "stopping_at",
        "reclaim_since",
        "reclaim_s",
        "told",
        "estimate",
    )

    def __init__(self, job: TraceJob, pending: PendingJob) -> None:
        self.job = job
        self.pending = pending
        self.running: RunningJob | None = None
        self.attempt = 0
        self.started = 0.0
        self.pending_since = job.submitted_at
        self.waited = 0.0  # seconds pending, over all attempts
        self.first_start: float | None = None
        self.finished: float | None = None
        self.preempted = 0
        self.lost_s = 0.0  # GPU-seconds of work lost to preemption
        self.stopping_at: float | None = None
        # Reclaim latency: since when reclaim could place it now (None: not now), and
        # for how long it could before (None: never), while it waited for its first start.
        self.reclaim_since: float | None = None
        self.reclaim_s: float | None = None
        # The first verdict's estimated start (SimConfig.estimates; None: none given).
        self.told = False
        self.estimate: float | None = None


class Simulator:
    """Replay `jobs` on `nodes` with `teams` through the scheduling core."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        nodes: Sequence[NodeSpec],
        teams: Sequence[Team],
        config: SimConfig | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.policy = self.config.policy
        if self.policy.explain != self.config.estimates:
            self.policy = replace(self.policy, explain=self.config.estimates)
        self._nodes_init(nodes)
        self.teams = tuple(teams)
        self.recs: dict[int, JobRec] = {}
        for job in sorted(jobs, key=lambda j: (j.submitted_at, j.id)):
            if job.id in self.recs:
                raise ValueError(f"job id {job.id} appears twice in the trace")
            if job.flavor is None:
                raise ValueError(f"job {job.id} has no flavor (use cluster.assign_flavors)")
            self.recs[job.id] = JobRec(job, self._pending_job(job, 0))
        self.arrivals = list(self.recs.values())
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, job id, attempt)
        self.usage: dict[tuple[str, str], int] = {}  # (team, flavor) -> GPUs held
        self.decayed: dict[tuple[str, str], float] = {}
        self.decayed_at: float | None = None
        self.passes = 0
        self.preemptions = 0
        self.now = 0.0
        self.rec = Recorder(self.capacity, entitlement_weights(self.teams), self.config.bin_s)
        self.nominal = {(t.name, f): q.nominal for t in self.teams for f, q in t.quotas.items()}
        # Jobs within their team's nominal quota at submission, not started yet, whose
        # reclaim moment has not come: checked before each pass (_watch_reclaim).
        self.watch: dict[int, JobRec] = {}
        self.reclaim_latency: list[float] = []
        self.budgets = (
            BudgetLedger(self.config.budgets, self.teams, self.capacity)
            if self.config.budgets
            else None
        )
        self.reset_wake = -1.0  # the month end a wake is queued for (budgets)
        # (team, flavor) -> its pending jobs' (queue_key, id), sorted: who is ahead of whom.
        self.queues: dict[tuple[str, str], list[tuple]] = {}
        # preemptor id -> its victims, whose `preempted_by` names it until it is admitted.
        self.links: dict[int, list[int]] = {}
        # the pending jobs whose reserved_on names a reservation (Plan.reservations)
        self.reserved: set[int] = set()
        # (team, flavor) -> (reclaims in a row, the last one's time): the reclaim backoff's
        # state (PolicyConfig.reclaim_backoff, scheduler.requeue), as the caller keeps it
        self.reclaims: dict[tuple[str, str], tuple[int, float]] = {}

    # -- the cluster ----------------------------------------------------------

    def _nodes_init(self, nodes: Sequence[NodeSpec]) -> None:
        specs = sorted(nodes, key=lambda n: n.name)
        if len({n.name for n in specs}) != len(specs):
            raise ValueError("node names must be unique")
        self.specs = specs
        self.node_at = {n.name: i for i, n in enumerate(specs)}
        self.free: list[list[int]] = []
        gid = 0
        for n in specs:
            self.free.append(list(range(gid, gid + n.gpus)))
            gid += n.gpus
        self.node_objs = [self._node(i) for i in range(len(specs))]
        self.nodes_tuple: tuple[Node, ...] | None = None
        self.dirty: set[int] = set()
        self.capacity = capacity(specs)
        cap = max((n.gpus for n in specs), default=0)
        self.hist = {f: [0] * (cap + 1) for f in self.capacity}
        for n in specs:
            self.hist[n.flavor][n.gpus] += 1

    def _node(self, i: int) -> Node:
        s = self.specs[i]
        return Node(s.name, s.flavor, tuple(self.free[i]), s.gpus, s.rack, s.block)

    def _snapshot_nodes(self) -> tuple[Node, ...]:
        if self.dirty or self.nodes_tuple is None:
            for i in self.dirty:
                self.node_objs[i] = self._node(i)
            self.dirty.clear()
            self.nodes_tuple = tuple(self.node_objs)
        return self.nodes_tuple

    def _take(self, i: int, gpus: tuple) -> None:
        free = self.free[i]
        if self.config.check:
            missing = set(gpus) - set(free)
            if missing or len(set(gpus)) != len(gpus):
                raise SimError(f"GPUs {sorted(missing)} of node {self.specs[i].name} are not free")
        old = len(free)
        taken = set(gpus)
        free[:] = [g for g in free if g not in taken]
        self._moved(i, old, len(free))

    def _give(self, i: int, gpus: tuple) -> None:
        free = self.free[i]
        old = len(free)
        free.extend(gpus)
        free.sort()
        if self.config.check and len(set(free)) != len(free):
            raise SimError(f"node {self.specs[i].name} got back a GPU it had free")
        self._moved(i, old, len(free))

    def _moved(self, i: int, old: int, new: int) -> None:
        hist = self.hist[self.specs[i].flavor]
        hist[old] -= 1
        hist[new] += 1
        self.dirty.add(i)

    # -- jobs -----------------------------------------------------------------

    def _pending_job(self, job: TraceJob, restarts: int) -> PendingJob:
        cfg = self.config
        return PendingJob(
            id=job.id,
            team=job.team,
            queue=job.queue,
            flavor=job.flavor or "",
            workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            priority=job.priority,
            submitted_at=job.submitted_at,
            max_runtime=max_runtime(job, cfg.runtime_estimate, cfg.queue_max_s),
            preemptible=job.preemptible,
            restart_count=restarts,
            grace_period=cfg.grace_period_s,
        )

    def _charge(self, team: str, flavor: str, gpus: int) -> None:
        key = (team, flavor)
        self.usage[key] = self.usage.get(key, 0) + gpus
        self.rec.hold(team, gpus)

    def _enqueue(self, job: PendingJob) -> None:
        self.pending[job.id] = job
        insort(self.queues.setdefault((job.team, job.flavor), []), (queue_key(job), job.id))

    def _dequeue(self, job: PendingJob) -> None:
        del self.pending[job.id]
        queue = self.queues[(job.team, job.flavor)]
        del queue[bisect_left(queue, (queue_key(job), job.id))]

    def _arrive(self, r: JobRec) -> None:
        self._enqueue(r.pending)
        self.rec.demand_change(r.job.flavor, r.job.team, r.job.gpus)
        if self._within_nominal(r):
            self.watch[r.job.id] = r

    def _within_nominal(self, r: JobRec) -> bool:
        key = (r.job.team, r.pending.flavor)
        return self.usage.get(key, 0) + r.job.gpus <= self.nominal.get(key, 0)

    def _start(self, r: JobRec, admission) -> None:
        job, now = r.job, self.now
        self._dequeue(r.pending)
        gpus = 0
        for w in admission.placement:
            self._take(self.node_at[w.node], w.gpus)
            gpus += len(w.gpus)
        if self.config.check:
            self._check_admission(r, admission, gpus)
        r.waited += now - r.pending_since
        r.started = now
        self._unlink(job.id)
        if r.first_start is None:
            r.first_start = now
            self.watch.pop(job.id, None)
            if r.reclaim_s is not None:
                open_s = 0.0 if r.reclaim_since is None else now - r.reclaim_since
                self.reclaim_latency.append(r.reclaim_s + open_s)
        r.running = RunningJob(
            id=job.id,
            team=job.team,
            queue=job.queue,
            flavor=r.pending.flavor,
            gpus=gpus,
            priority=job.priority,
            submitted_at=job.submitted_at,
            started_at=now,
            max_runtime=r.pending.max_runtime,
            placement=admission.placement,
            preemptible=job.preemptible,
            grace_period=self.config.grace_period_s,
        )
        self.running[job.id] = r.running
        self._charge(job.team, r.pending.flavor, gpus)
        heapq.heappush(self.events, (now + job.duration, END, job.id, r.attempt))

    def _check_admission(self, r: JobRec, admission, gpus: int) -> None:
        job = r.job
        shape = [len(w.gpus) for w in admission.placement]
        if shape != [job.gpus_per_worker] * job.workers or gpus != job.gpus:
            raise SimError(
                f"job {job.id} admitted as {shape}, asked {job.workers}x{job.gpus_per_worker}"
            )
        for w in admission.placement:
            if self.specs[self.node_at[w.node]].flavor != job.flavor:
                raise SimError(f"job {job.id} placed on node {w.node} of another flavor")

    def _preempt(self, r: JobRec, by: int) -> None:
        """Mark the job stopping; it stops when its grace period ends (or completes first).

        `by`, its preemptor, keeps the GPUs it frees reserved (scheduler.preemption).
        """
        if r.running is None or r.running.stopping:
            raise SimError(f"job {r.job.id} preempted while not running")
        self.preemptions += 1
        r.preempted += 1
        r.running = replace(r.running, stopping=True, preempted_by=by, stop_requested_at=self.now)
        self.running[r.job.id] = r.running
        self.links.setdefault(by, []).append(r.job.id)
        r.stopping_at = self.now + self.config.grace_period_s
        heapq.heappush(self.events, (r.stopping_at, STOP, r.job.id, r.attempt))

    def _reserve(self, plan: Plan) -> None:
        """Store where each waiting preemptor holds its GPUs (PendingJob.reserved_on) and
        the jobs and horizon its claim counted on (reserved_until, reserved_ending), as
        the portal does; a job the plan no longer names holds nothing."""
        held = {r.job_id: (r.nodes, r.until, r.ending) for r in plan.reservations}
        for job_id in self.reserved | held.keys():
            job = self.pending.get(job_id)
            nodes, until, ending = held.get(job_id, ((), None, ()))
            if job is not None and (job.reserved_on, job.reserved_until, job.reserved_ending) != (
                nodes,
                until,
                ending,
            ):
                rec = self.recs[job_id]
                rec.pending = self.pending[job_id] = replace(
                    job, reserved_on=nodes, reserved_until=until, reserved_ending=ending
                )
        self.reserved = set(held)

    def _unlink(self, preemptor: int) -> None:
        """The preemptor is admitted: its victims' links to it end, stopping or requeued
        (scheduler.model.PendingJob.preempted_by), as the portal's admission clears them."""
        for v in self.links.pop(preemptor, ()):
            victim = self.recs[v]
            if victim.running is not None and victim.running.preempted_by == preemptor:
                victim.running = self.running[v] = replace(victim.running, preempted_by=None)
            if v in self.pending and victim.pending.preempted_by == preemptor:
                victim.pending = self.pending[v] = replace(victim.pending, preempted_by=None)

    def _release(self, r: JobRec) -> None:
        run = r.running
        for w in run.placement:
            self._give(self.node_at[w.node], w.gpus)
        del self.running[r.job.id]
        self._charge(run.team, run.flavor, -run.gpus)
        if self.budgets is not None:
            self.budgets.release(run, self.now)
        r.running = None
        r.stopping_at = None

    def _complete(self, r: JobRec) -> None:
        self._release(r)
        r.finished = self.now
        self.rec.demand_change(r.job.flavor, r.job.team, -r.job.gpus)

    def _stop(self, r: JobRec) -> None:
        """The grace period of a preempted job ended: free it and requeue it after its backoff."""
        r.lost_s += (self.now - r.started) * r.job.gpus
        by = r.running.preempted_by
        self._release(r)
        r.attempt += 1
        cfg = self.config
        delay = requeue_backoff(r.attempt, cfg.requeue_backoff_s, cfg.requeue_backoff_max_s)
        r.pending = replace(
            r.pending,
            restart_count=r.attempt,
            eligible_at=self.now + delay,
            preempted_by=by,
            reserved_on=(),
            reserved_until=None,
            reserved_ending=(),
        )
        r.pending_since = self.now
        self._enqueue(r.pending)
        if delay > 0:
            heapq.heappush(self.events, (self.now + delay, WAKE, r.job.id, r.attempt))

    # -- fair share -----------------------------------------------------------

    def _accrue(self, t: float) -> None:
        """Bring decayed usage up to time t with the GPUs held since the last call."""
        if self.decayed_at is not None and t > self.decayed_at:
            dt, hl = t - self.decayed_at, self.policy.half_life
            for key, gpus in self.usage.items():
                old = self.decayed.get(key, 0.0)
                if gpus or old:
                    self.decayed[key] = accrue(old, gpus, dt, hl)
        self.decayed_at = t

    def _snapshot_teams(self) -> tuple[Team, ...]:
        cooling = team_reclaims(self.reclaims, self.now) if self.reclaims else {}
        if self.policy.policy not in READS_USAGE and not cooling:
            return self.teams
        per_team: dict[str, dict[str, float]] = {}
        if self.policy.policy in READS_USAGE:
            for (team, flavor), v in self.decayed.items():
                per_team.setdefault(team, {})[flavor] = v
        return tuple(
            Team(
                t.name,
                t.weight,
                t.cohort,
                t.quotas,
                per_team.get(t.name, {}),
                cooling.get(t.name, {}),
            )
            for t in self.teams
        )

    # -- the loop -------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> Simulator:
        """Replay the whole trace; `progress(share of arrivals done)` is called now and then."""
        arrivals, n, i = self.arrivals, len(self.arrivals), 0
        events = self.events
        report_at = PROGRESS_EVERY
        while i < n or events:
            if progress is not None and i >= report_at:
                progress(i / n)
                report_at = i + PROGRESS_EVERY
            t = arrivals[i].job.submitted_at if i < n else math.inf
            if events and events[0][0] <= t:
                if events[0][1] == TICK and not self.pending and events[0][0] < t:
                    heapq.heappop(events)  # a cooldown ends with no job waiting: no pass,
                    continue  # and the clock (the run's end, its makespan) stays put
                t = events[0][0]
            self._tick(t)
            changed = False
            while events and events[0][0] == t:
                _, kind, job_id, attempt = heapq.heappop(events)
                changed |= kind == TICK or self._event(kind, self.recs[job_id], attempt)
            while i < n and arrivals[i].job.submitted_at == t:
                self._arrive(arrivals[i])
                i += 1
                changed = True
            if i == n and self.rec.alloc_s_at_last_arrival is None:
                self.rec.alloc_s_at_last_arrival = self.rec.alloc_s
            if changed and self.pending:
                self._pass()
            elif not self.pending:
                self.rec.frag = None
            self.rec.waiting = bool(self.pending)
        self.end = self.now
        if progress is not None:
            progress(1.0)
        return self

    def _tick(self, t: float) -> None:
        self._accrue(t)
        self.rec.advance(t)
        self.now = t

    def _event(self, kind: int, r: JobRec, attempt: int) -> bool:
        """Handle a completion, stop or wake; False if it is stale (the attempt moved on)."""
        if kind == WAKE:
            return attempt == r.attempt and r.job.id in self.pending
        if attempt != r.attempt or r.running is None:
            return False
        if kind == END:
            self._complete(r)
            return True
        if r.stopping_at == self.now:
            self._stop(r)
            return True
        return False

    def _watch_reclaim(self) -> None:
        """Run the reclaim clock of each watched job: on while reclaim could start it now.

        That is: its team fits it within its nominal quota together with the
        team's eligible pending jobs ahead of it in its queue (those get the
        quota first), the free GPUs of its flavor cannot hold the gang, but the
        free GPUs plus those of running, preemptible, not stopping jobs of
        teams above their nominal quota can (whole workers per node; topology
        is not considered). A job whose team's own jobs took its quota waits
        for them, not for a reclaim: its clock stops until it is entitled again.
        """
        now, short = self.now, []
        for r in self.watch.values():
            per_worker = r.job.gpus_per_worker
            hist = self.hist[r.pending.flavor]
            free = sum(k * (c // per_worker) for c, k in enumerate(hist) if k)
            if free < r.job.workers and self._within_nominal(r):
                short.append(r)
            else:
                _clock_off(r, now)
        if not short:
            return
        ahead = self._ahead({(r.job.team, r.pending.flavor) for r in short})
        borrowing = {k for k, used in self.usage.items() if used > self.nominal.get(k, 0)}
        extra: dict[int, int] = {}
        for run in self.running.values():
            if run.preemptible and not run.stopping and (run.team, run.flavor) in borrowing:
                for w in run.placement:
                    i = self.node_at[w.node]
                    extra[i] = extra.get(i, 0) + len(w.gpus)
        slots: dict[tuple[str, int], int] = {}
        for r in short:
            key = (r.job.team, r.pending.flavor)
            before = ahead.get(r.job.id)
            if before is None or (
                self.usage.get(key, 0) + before + r.job.gpus > self.nominal.get(key, 0)
            ):
                _clock_off(r, now)
                continue
            shape = (key[1], r.job.gpus_per_worker)
            if shape not in slots:
                slots[shape] = self._slots(*shape, extra)
            if slots[shape] >= r.job.workers:
                if r.reclaim_since is None:
                    r.reclaim_since = now
                    r.reclaim_s = r.reclaim_s or 0.0
            else:
                _clock_off(r, now)

    def _ahead(self, keys: set[tuple[str, str]]) -> dict[int, int]:
        """Return job id -> GPUs of its team's eligible pending jobs ahead of it in queue order.

        Only for the (team, flavor) pairs in `keys`, and only as far down each
        queue as the team's idle nominal quota reaches: a job not in the result
        cannot be entitled. Jobs larger than the nominal quota never take it
        and are not counted.
        """
        now, out = self.now, {}
        for key in keys:
            nominal = self.nominal.get(key, 0)
            room, total = nominal - self.usage.get(key, 0), 0
            for _, job_id in self.queues.get(key, ()):
                job = self.pending[job_id]
                if job.eligible_at > now:
                    continue
                out[job_id] = total
                if job.gpus <= nominal:
                    total += job.gpus
                    if total >= room:
                        break
        return out

    def _slots(self, flavor: str, per_worker: int, extra: dict[int, int]) -> int:
        """Return how many workers of `per_worker` GPUs fit on free GPUs plus `extra` per node."""
        return sum(
            (len(self.free[i]) + extra.get(i, 0)) // per_worker
            for i, spec in enumerate(self.specs)
            if spec.flavor == flavor
        )

    def _pass(self) -> None:
        if self.watch:
            self._watch_reclaim()
        snap = Snapshot(
            self.now,
            self._snapshot_nodes(),
            self._snapshot_teams(),
            tuple(self.running.values()),
            tuple(self.pending.values()),
            self.policy,
            self.budgets.budgets(self.now, self.running.values()) if self.budgets else (),
        )
        plan = schedule(snap)
        self.passes += 1
        if self.budgets is not None:
            self._budget_wake(plan)
        if self.policy.reclaim_backoff and plan.preemptions:
            self._count_reclaims(plan)
        for p in plan.preemptions:
            self._preempt(self.recs[p.job_id], p.preemptor_id)
        for a in plan.admissions:
            self._start(self.recs[a.job_id], a)
        self._reserve(plan)
        self._fragmentation(plan)
        if self.config.estimates:
            self._note_estimates(plan)
        if self.config.check:
            self._check_plan(plan, snap)

    def _count_reclaims(self, plan: Plan) -> None:
        """Count the plan's reclaims for the reclaim backoff, and make sure a pass runs
        when each cooldown it starts ends (the team may borrow again)."""
        for pair in count_reclaims(self.reclaims, reclaimed(plan, self.running), self.now):
            ends = reclaim_cooldown_end(*self.reclaims[pair])
            heapq.heappush(self.events, (ends, TICK, -1, 0))

    def _note_estimates(self, plan: Plan) -> None:
        """Keep the estimated start of each job's first verdict (before any preemption)."""
        for v in plan.verdicts:
            r = self.recs[v.job_id]
            if not r.told and r.first_start is None:
                r.told = True
                r.estimate = v.estimated_start

    def _budget_wake(self, plan: Plan) -> None:
        """Note the jobs over budget, and make sure a pass runs when the month resets
        (unless every such job is bigger than its whole budget: it never starts, as a
        never_fits job, and the replay ends without it)."""
        self.budgets.note(plan.verdicts)
        reset = self.budgets.next_reset()
        if self.reset_wake == reset:
            return
        for v in plan.verdicts:
            if v.reason_code == BUDGET_EXHAUSTED and self.budgets.fits(self.recs[v.job_id].pending):
                r = self.recs[v.job_id]
                heapq.heappush(self.events, (reset, WAKE, r.job.id, r.attempt))
                self.reset_wake = reset
                return

    def _fragmentation(self, plan: Plan) -> None:
        """Record the share of free GPUs the first waiting gang in pass order cannot use."""
        self.rec.frag = None
        for v in plan.verdicts:
            if v.reason_code in (NEVER_FITS, NO_NODES):
                continue
            job = self.recs[v.job_id].job
            self.rec.frag = fragmentation_share(self.hist[job.flavor], job.gpus_per_worker)
            return

    def _check_plan(self, plan: Plan, snap: Snapshot) -> None:
        ids = [a.job_id for a in plan.admissions] + [v.job_id for v in plan.verdicts]
        if sorted(ids) != sorted(j.id for j in snap.pending):
            raise SimError("a pending job got no admission or verdict, or two")
        for i, spec in enumerate(self.specs):
            held = sum(
                len(w.gpus)
                for r in self.running.values()
                for w in r.placement
                if w.node == spec.name
            )
            if held + len(self.free[i]) != spec.gpus:
                raise SimError(
                    f"node {spec.name}: {held} held + {len(self.free[i])} free != {spec.gpus}"
                )

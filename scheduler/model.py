"""The scheduler's vocabulary: a frozen snapshot goes in, a plan comes out.

Everything here is plain data. Times are seconds since the epoch (floats)
passed in by the caller; the core never reads a clock. Identifiers are opaque
to the core: the portal uses database primary keys, the simulator its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Job identifiers are ints; GPU identifiers are any hashable the caller picks
# (the portal uses Gpu primary keys, the simulator "node/index" strings).
JobId = int
GpuId = object

# Defaults of PolicyConfig.age_weight and .max_age (docs/scheduling.md, "Fair share").
AGE_WEIGHT = 0.0
MAX_AGE_S = 7 * 24 * 3600.0  # Slurm's PriorityMaxAge default
BACKFILL_RESERVATIONS = 1
RECLAIM_BACKOFF = False
# Default of PolicyConfig.max_wait (0: off; docs/scheduling.md, "Starvation bound").
MAX_WAIT_S = 0.0


@dataclass(frozen=True, slots=True)
class Quota:
    """A team's quota for one GPU flavor (Kueue's ClusterQueue resource quota).

    `borrowing_limit` None: may borrow any idle quota of its cohort.
    `lending_limit` None: lends all of its unused nominal quota.
    """

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    weight: float = 1.0
    cohort: str | None = None
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    # flavor -> GPU-seconds of past usage, already decayed to `Snapshot.now`.
    decayed_usage: Mapping[str, float] = field(default_factory=dict)
    # The reclaim backoff's state (PolicyConfig.reclaim_backoff, scheduler.requeue):
    # flavor -> (how many times in a row the team's borrowing of it was reclaimed, when
    # the last reclaim was), kept by the caller with requeue.count_reclaims.
    reclaims: Mapping[str, tuple[int, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Node:
    """A schedulable node: Ready, not cordoned or draining.

    `free_gpus` are its healthy GPUs not held by any running or stopping job.
    """

    name: str
    flavor: str
    free_gpus: tuple[GpuId, ...]
    total_gpus: int
    rack: str = ""
    block: str = ""


@dataclass(frozen=True, slots=True)
class WorkerPlacement:
    """One worker of a gang: its rank, its node and the GPUs it gets."""

    rank: int
    node: str
    gpus: tuple[GpuId, ...]


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A gang waiting for admission.

    `eligible_at`: a requeued job may not be admitted before this time (its
    requeue backoff, scheduler.requeue); for a job held for its dependencies, when they
    were met (it has waited in the queue since: Pass.passed); 0 for a job eligible
    since it was submitted.
    `preempted_by`: the job whose preemption requeued it, until either of the two
    is admitted; it keeps that job's reservation alive after the victims stopped
    (scheduler.preemption, "reservations"). Once the preemptor is admitted the
    link is spent and the writer clears it: left in place, it would make the
    preemptor, were it requeued later, look like one whose victims have stopped,
    honoured first (it took the GPUs freed for the job that preempted it).
    `reserved_on`: for a preemptor waiting for its victims, where the last pass put
    its reservation, as (node, GPUs there) pairs (Plan.reservations, which the writer
    stores); the next pass keeps it there while it still holds the gang, so a
    target is chosen once (scheduler.preemption, "reservations"). Empty otherwise.
    `reserved_until`, `reserved_ending`: with `reserved_on`, the running jobs that reach
    their max runtime that its claim counted on, and the horizon they end by
    (Reservation.until, ending); None and () if it counted none.
    `previous_attempt_stopping`: a requeued job whose previous attempt still has
    workers that have not stopped; the pass sets it aside (reason
    `previous_attempt`) until they have. The portal sets it from its workers'
    states; the simulator releases a job's GPUs when it requeues it, so its
    jobs never have it.
    `array_id`, `array_limit`: a task of a job array and how many of the array's
    tasks may hold GPUs at once (Slurm's `--array=…%N`; None: no limit); the pass
    sets aside the tasks beyond it (scheduler.arrays, reason `array_limit`).
    `grace_period`: how long it has to stop once preempted, as for a running job; a
    requeued victim's counts towards the horizon of jobs that end by themselves while
    its preemptor's claim stands (state.mark_ending).
    """

    id: JobId
    team: str
    queue: str
    flavor: str
    workers: int
    gpus_per_worker: int
    priority: int
    submitted_at: float
    max_runtime: float
    preemptible: bool = True
    restart_count: int = 0
    eligible_at: float = 0.0
    preempted_by: JobId | None = None
    reserved_on: tuple[tuple[str, int], ...] = ()
    reserved_until: float | None = None
    reserved_ending: tuple[JobId, ...] = ()
    previous_attempt_stopping: bool = False
    array_id: int | None = None
    array_limit: int | None = None
    grace_period: float = 30.0
    gpus: int = field(init=False, repr=False, compare=False)  # workers x GPUs per worker

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", self.workers * self.gpus_per_worker)  # asked often


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs: admitted, running, or stopping after a preemption.

    `stopping` jobs still hold their GPUs until their grace period ends; they
    are never chosen as victims again. `started_at` is when it was admitted;
    `checkpointed_at` (if known) bounds the work a preemption would lose.
    `preempted_by`: for a stopping job, the pending job that preempted it; the
    GPUs it frees are reserved for that job across passes, until it is admitted
    (then the writer clears the link, as for a requeued victim's).
    `array_id`: the job array it is a task of (counted against the array's limit).
    `stop_requested_at`: for a stopping job, when it was told to stop; it is taken
    to stop a grace period after that (None: a grace period from now).
    """

    id: JobId
    team: str
    queue: str
    flavor: str
    gpus: int
    priority: int
    submitted_at: float
    started_at: float
    max_runtime: float
    placement: tuple[WorkerPlacement, ...] = ()
    preemptible: bool = True
    stopping: bool = False
    checkpointed_at: float | None = None
    grace_period: float = 30.0
    preempted_by: JobId | None = None
    array_id: int | None = None
    stop_requested_at: float | None = None

    def ends_by(self, now: float) -> float:
        """Return when it is expected to free its GPUs, not before `now`: a stopping job
        when its grace period ends (stops_by; told to stop at an unknown time: a grace
        period from now), any other at the end of its max run time. The pass's view of
        its end (scheduler.state.Running) and what its team's GPU-hour budget commits
        for it (scheduler.budgets) alike."""
        if self.stopping:
            asked = now if self.stop_requested_at is None else self.stop_requested_at
            return max(now, stops_by(asked, self.grace_period))
        return max(now, self.started_at + self.max_runtime)


def stops_by(stop_requested_at: float, grace_period: float) -> float:
    """Return when a job told to stop at `stop_requested_at` is expected to have stopped:
    its agent signals it when it hears of the stop and kills what still runs a grace
    period later (later, then, if it hears late). The core reads a stopping job's end
    from it, the portal shows it (Job.stops_by)."""
    return stop_requested_at + grace_period


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Policy as data. The portal builds it from settings; the core never
    reads Django settings or the environment."""

    policy: str = "fairshare"  # a name registered in scheduler.policies
    half_life: float = 7 * 24 * 3600.0  # Slurm's PriorityDecayHalfLife default
    backfill: bool = True
    preemption: bool = True
    # How much of a pass may be spent on explanations and estimates; the
    # simulator turns them off.
    explain: bool = True
    # Topology level that a multi-node gang must stay inside: "block" or "rack".
    topology_key: str = "block"
    # Bound the work of one pass, as Slurm's bf_max_job_test does.
    max_backfill_candidates: int = 100_000
    # Fair-share order (scheduler.fairshare.priority): the age factor's weight relative
    # to the fair-share factor (Slurm's PriorityWeightAge / PriorityWeightFairshare) and
    # the wait at which it is full (PriorityMaxAge). age_weight 0 turns it off.
    age_weight: float = AGE_WEIGHT
    max_age: float = MAX_AGE_S
    # Backfill: how many blocked jobs per flavor get a reservation, each planned after
    # the ones before it (scheduler.backfill; Slurm plans every job it tests).
    backfill_reservations: int = BACKFILL_RESERVATIONS
    # Reclaim backoff per team and flavor (Kueue KEP-14468): after the team's borrowing of
    # a flavor was reclaimed, its jobs that would borrow that flavor wait for a cooldown
    # that doubles with each reclaim in a row (Team.reclaims, scheduler.requeue).
    reclaim_backoff: bool = RECLAIM_BACKOFF
    # Starvation bound (Volcano's sla plugin, sla-waiting-time): in the fair-share order a
    # job that has waited max_wait seconds or more comes before the jobs of its class
    # (within nominal / would borrow) that have not, oldest first, so it gets the flavor's
    # reservation or cohort hold ahead of share order. 0 turns it off.
    max_wait: float = MAX_WAIT_S


@dataclass(frozen=True, slots=True)
class Budget:
    """A team's GPU-hour budget of one flavor for a period (scheduler.budgets).

    `used`: GPU-hours the team's jobs of the flavor used in the period so far,
    running jobs included up to the snapshot. `limit`: the hard limit in
    GPU-hours. `period` "month" (a calendar month, UTC, ending at `resets_at`)
    or "rolling" (the last `window_days` days; `resets_at` None).
    """

    team: str
    flavor: str
    limit: float
    used: float
    period: str = "month"
    resets_at: float | None = None
    window_days: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    config: PolicyConfig = field(default_factory=PolicyConfig)
    # GPU-hour budgets by (team, flavor); a pair without one is not limited.
    budgets: tuple[Budget, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: JobId
    placement: tuple[WorkerPlacement, ...]
    # GPUs of this job beyond the team's nominal quota at admission.
    borrowed: int = 0


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: JobId
    reason_code: str  # "reclaim" | "priority"
    message: str
    preemptor_id: JobId


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where a preemptor waiting for its victims holds its GPUs at the end of a pass:
    (node, GPUs there) pairs, sorted. The writer stores them in the job
    (PendingJob.reserved_on) and clears what a pass no longer names.

    `until`, `ending`: where the preemptor waits for running jobs that reach their max
    runtime (preemption rule 2) on its target's nodes, those jobs and the horizon they
    end by: the next passes count them as ending while it keeps its stored target and
    the horizon is ahead (state.mark_ending), whatever shorter grace period a job started
    since brings. None and () when it counted none. The writer stores them with the
    nodes (PendingJob.reserved_until, reserved_ending)."""

    job_id: JobId
    nodes: tuple[tuple[str, int], ...]
    until: float | None = None
    ending: tuple[JobId, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a pending job still waits, where it stands, and when it should start."""

    job_id: JobId
    reason_code: str
    message: str
    position: int  # 1-based, among pending jobs of its queue
    estimated_start: float | None  # None: cannot be estimated (e.g. never fits)


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    stats: Mapping[str, float] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()

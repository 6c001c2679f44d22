"""Jobs (gangs), their timeline, their workers and the GPUs they hold."""

from datetime import UTC, datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.dependency import PARENT_TYPES
from scheduler.model import stops_by

from ._base import non_negative, positive, valid_choice
from .cluster import Gpu, Node
from .tenancy import GpuFlavor, Queue, Team


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    ADMITTED = "admitted", "Admitted"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class JobArray(models.Model):
    """Tasks made from one job spec over a set of indices (Slurm's `--array`): each task
    is a Job with `array` and `array_index`; `task_limit` caps how many of them hold GPUs
    at once (Slurm's `%N`, enforced by the scheduling pass: reason `array_limit`).
    Created all or none by actions.arrays.submit_array."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="arrays")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="job_arrays",
    )
    name = models.CharField(max_length=200, help_text="The name template; {index} per task.")
    spec = models.CharField(max_length=2000, help_text="The index spec as given, e.g. 0-99:4%8.")
    size = models.PositiveIntegerField(help_text="Number of tasks.")
    task_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many tasks hold GPUs at once (%N)."
    )
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True, editable=False)
    submitted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["team", "-submitted_at"], name="jobarray_team_recent")]
        constraints = [
            positive("size"),
            models.UniqueConstraint(
                fields=["team", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="one_array_per_team_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"array {self.pk} {self.name}"


class Job(models.Model):
    """A gang of `workers × gpus_per_worker` GPUs of one flavor, started all together or not at all.

    Every state change is a conditional update (see actions.transitions) that
    writes a JobEvent.
    """

    State = JobState

    # The one definition of what each group of states means; use these, not lists.
    # Active: holds GPUs (admitted, running, or being stopped for preemption).
    ACTIVE_STATES = (State.ADMITTED, State.RUNNING, State.PREEMPTING)
    # Meant to run: active and not being stopped.
    RUNNING_STATES = (State.ADMITTED, State.RUNNING)
    # Not ended yet: waiting or active.
    OPEN_STATES = (State.PENDING, *ACTIVE_STATES)
    TERMINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    # No index of their own: job_team_state / job_team_recent and job_queue_order lead
    # with these columns and serve the same lookups; each index is paid on every insert.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
    )
    name = models.CharField(max_length=200)
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list, help_text="argv list")
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=1)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="jobs")
    priority = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=True)
    max_runtime_seconds = models.PositiveIntegerField()
    checkpoint_signal = models.CharField(max_length=16, default="SIGTERM")
    grace_period_seconds = models.PositiveIntegerField(default=30)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True, editable=False)

    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason_code = models.CharField(max_length=32, blank=True)
    reason = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveIntegerField(
        default=0, help_text="Admissions so far; workers are named per attempt."
    )
    restart_count = models.PositiveIntegerField(default=0)
    max_restarts = models.PositiveIntegerField(default=3)
    eligible_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "When the job may be admitted from: the end of a requeued job's backoff, or "
            "when its dependencies were met; null when eligible since it was submitted."
        ),
    )
    exit_code = models.IntegerField(null=True, blank=True)
    # A job id, not a foreign key: a reservation names its job only while both are live.
    preempted_by = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Id of the job whose preemption stopped this one, until either is admitted: "
        "the GPUs it frees stay reserved for that job (docs/scheduling.md).",
    )
    reserved_on = models.JSONField(
        default=list,
        blank=True,
        help_text="While this job waits for the jobs it preempted: the [node, GPUs] pairs "
        "its reservation holds, kept there by the next passes (docs/scheduling.md).",
    )
    # The two below are left to the database on insert (db_default), so the submit
    # statement stays within the parameters psycopg caches (statements.submit_statement).
    reserved_until = models.DateTimeField(
        null=True,
        blank=True,
        default=None,
        db_default=None,
        help_text="With reserved_on, where it waits for jobs that reach their max runtime: "
        "the horizon its claim decided with, kept by the next passes (docs/scheduling.md).",
    )
    reserved_ending = models.JSONField(
        default=list,
        db_default=models.Value([], output_field=models.JSONField()),
        blank=True,
        help_text="With reserved_until: the ids of the running jobs reaching their max "
        "runtime that its claim counted on (docs/scheduling.md).",
    )

    # A task of a job array (JobArray), with its index; both null for a plain job.
    array = models.ForeignKey(
        JobArray,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        db_index=False,
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)
    # Dependencies (Slurm's --dependency; actions/dependencies.py, scheduler/dependency.py):
    # the spec as submitted, normalized, e.g. "afterok:12:13,singleton"; its parents are
    # also JobDependency rows. A job held for them stays pending outside the snapshot.
    # Database defaults: the single-submission statement leaves them to the database
    # (statements.submit_statement), within psycopg's 50 parameters of a cached statement.
    dependency = models.CharField(max_length=1000, blank=True, default="", db_default="")
    awaiting_dependency = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Held for its dependencies: not scheduled until they are met (reason dependency).",
    )

    submitted_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "flavor"], name="job_state_flavor"),
            models.Index(fields=["team", "state"], name="job_team_state"),
            models.Index(
                fields=["queue", "state", "-priority", "submitted_at"], name="job_queue_order"
            ),
            models.Index(fields=["team", "-submitted_at"], name="job_team_recent"),
            # Only the held jobs: the singleton release and the safety sweep read these;
            # a job without dependencies never enters it (nothing paid on its insert).
            models.Index(
                fields=["team", "submitted_by", "name"],
                condition=Q(awaiting_dependency=True, state="pending"),
                name="job_awaiting_dependency",
            ),
        ]
        constraints = [
            valid_choice("state", JobState),
            positive("workers"),
            positive("gpus_per_worker"),
            positive("max_runtime_seconds"),
            models.UniqueConstraint(
                fields=["team", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="one_job_per_team_idempotency_key",
            ),
            # Also the index that finds an array's tasks (no index of `array` alone).
            models.UniqueConstraint(
                fields=["array", "array_index"],
                condition=Q(array__isnull=False),
                name="one_task_per_array_index",
            ),
            models.CheckConstraint(
                condition=Q(array__isnull=True, array_index__isnull=True)
                | Q(array__isnull=False, array_index__isnull=False),
                name="array_task_has_index",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

    def stops_by(self, workers) -> datetime | None:
        """When the job's workers still running, told to stop (preempted, cancelled,
        timed out, its gang failed or requeued), are expected to have stopped: the
        stop's time plus its grace period (scheduler.model.stops_by, what the
        scheduler expects their GPUs back by). Each gets its checkpoint signal when its
        agent hears of the stop and a kill a grace period later, so an agent that hears
        late stops it later. None if it was not told to stop or none of `workers` (its
        latest attempt's) is still live."""
        if self.stop_requested_at is None or not any(w.is_live for w in workers):
            return None
        at = stops_by(self.stop_requested_at.timestamp(), self.grace_period_seconds)
        return datetime.fromtimestamp(at, UTC)


class JobDependency(models.Model):
    """One `type:parent` condition of a dependent job: the edges of the pipeline graph,
    written with the job in the same transaction. `singleton` has no edge (it names
    no job); it is in the job's `dependency` text."""

    TYPES = PARENT_TYPES

    # Indexed by one_dependency_edge, which leads with the child.
    child = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependency_edges", db_index=False
    )
    parent = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependent_edges")
    type = models.CharField(max_length=16)

    class Meta:
        ordering = ["child_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["child", "parent", "type"], name="one_dependency_edge"),
            models.CheckConstraint(
                condition=Q(type__in=list(PARENT_TYPES)),
                name="jobdependency_type_valid",
            ),
            models.CheckConstraint(
                condition=~Q(child=models.F("parent")), name="jobdependency_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.child_id} {self.type}:{self.parent_id}"


class JobEvent(models.Model):
    """Append-only timeline of a job: state changes, preemptions (who, why), node loss."""

    # Indexed by jobevent_job_at, which leads with the job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=32)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="jobevent_job_at")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("JobEvent is append-only")
        super().save(*args, **kwargs)


class WorkerState(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    EXITED = "exited", "Exited"
    LOST = "lost", "Lost"


class Worker(models.Model):
    """One worker of one attempt of a gang, on one node. Its key names it to the agent."""

    State = WorkerState

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="worker_set")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="workers")
    state = models.CharField(max_length=16, choices=State.choices, default=State.ASSIGNED)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    log_tail = models.TextField(blank=True)

    class Meta:
        ordering = ["job_id", "attempt", "rank"]
        indexes = [models.Index(fields=["node", "state"], name="worker_node_state")]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "rank"], name="one_worker_per_rank"),
            valid_choice("state", WorkerState),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.job_id}.{self.attempt}.{self.rank}"

    @property
    def is_live(self) -> bool:
        return self.state not in (self.State.EXITED, self.State.LOST)


class Allocation(models.Model):
    """One GPU held by one worker. `active` while the worker may be using it.

    `job` and `node` repeat what the worker knows so that the partial unique
    index and the scheduler's snapshot query need no joins.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="allocations")
    worker_rank = models.PositiveIntegerField()
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "worker_rank", "gpu_id"]
        indexes = [models.Index(fields=["node", "active"], name="allocation_node_active")]
        constraints = [
            # The backstop against double booking, even if two passes raced.
            models.UniqueConstraint(
                fields=["gpu"], condition=Q(active=True), name="one_active_allocation_per_gpu"
            ),
            models.CheckConstraint(
                condition=Q(active=True, released_at__isnull=True) | Q(active=False),
                name="active_allocation_not_released",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} rank {self.worker_rank} on gpu {self.gpu_id}"


class Usage(models.Model):
    """GPU-seconds a team used of a flavor in one hour: showback and fair share."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="usage")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField(help_text="Start of the hour (UTC)")
    gpu_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-hour"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "flavor", "hour"], name="one_usage_row_per_hour"
            ),
            non_negative("gpu_seconds"),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor} {self.hour:%Y-%m-%d %H}h: {self.gpu_seconds:.0f}"


class DecayedUsage(models.Model):
    """Running half-life-decayed GPU-seconds per team and flavor (Slurm's decayed usage).

    Updated by every scheduling pass: value = value·2^(−Δt/half-life) + used in Δt.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="decayed_usage")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    gpu_seconds = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "flavor"], name="one_decayed_usage_per_team_flavor"
            ),
            non_negative("gpu_seconds"),
        ]


class ReclaimBackoff(models.Model):
    """The reclaim backoff's state per team and flavor (`BERTH_RECLAIM_BACKOFF`, Kueue
    KEP-14468, scheduler.requeue): how many times in a row the team's borrowing of the
    flavor was reclaimed, and when the last reclaim was. Written by the passes that
    reclaim (scheduling.apply.record_reclaims), read by the next ones (Team.reclaims)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reclaim_backoffs")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    reclaims = models.PositiveIntegerField(help_text="Reclaims in a row")
    last_reclaim_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "flavor"], name="one_reclaim_backoff_per_team_flavor"
            ),
            positive("reclaims"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.team}/{self.flavor}: {self.reclaims} in a row, the last {self.last_reclaim_at}"
        )

"""A what-if run: who asked, which change over which period, and what the replay found."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from portal.core.models import GpuFlavor, Team


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class WhatIfChange(models.TextChoices):
    NOMINAL = "nominal", "Nominal quota (GPUs)"
    BORROWING_LIMIT = "borrowing_limit", "Borrowing limit (GPUs, blank: unlimited)"
    WEIGHT = "weight", "Fair-share weight"


# (progress below which, what the run does): the replay writes its progress in these bands.
RUN_STAGES = (
    (0.05, "Reading the job history"),
    (0.5, "Replaying the history as configured"),
    (0.95, "Replaying the history with the change"),
    (float("inf"), "Comparing the teams"),
)


class WhatIfRun(models.Model):
    """The job history of [period_start, period_end) replayed twice through the
    scheduler core (scheduler.sim): as configured, and with `change` of `team`
    set to `value`. `results` holds both summaries and the per-team comparison."""

    Status = WhatIfStatus
    Change = WhatIfChange
    ACTIVE = (Status.QUEUED, Status.RUNNING)

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="whatif_runs")
    flavor = models.ForeignKey(
        GpuFlavor,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The quota's GPU flavor (not used for a weight change).",
    )
    change = models.CharField(max_length=32, choices=Change.choices)
    value = models.FloatField(
        null=True, blank=True, help_text="The new value; blank borrowing limit: unlimited."
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0, help_text="0 to 1")
    results = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "what-if run"
        indexes = [models.Index(fields=["team", "-created_at"], name="whatif_team_recent")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=WhatIfStatus.values), name="whatif_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(change__in=WhatIfChange.values), name="whatif_change_valid"
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0) & Q(progress__lte=1), name="whatif_progress_0_1"
            ),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="whatif_period_ordered"
            ),
            models.CheckConstraint(
                condition=Q(change="weight") | Q(flavor__isnull=False),
                name="whatif_quota_change_has_flavor",
            ),
        ]

    def __str__(self) -> str:
        return f"what-if #{self.pk}: {self.describe()}"

    def describe(self) -> str:
        """Return 'alpha h100-80gb nominal → 24' in words."""
        if self.change == self.Change.WEIGHT:
            return f"{self.team} weight → {self.value:g}"
        value = "unlimited" if self.value is None else f"{self.value:g}"
        what = "nominal quota" if self.change == self.Change.NOMINAL else "borrowing limit"
        return f"{self.team} {self.flavor} {what} → {value}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def stage(self) -> str:
        """What an active run is doing, from its progress (portal.whatif.replay.STAGES)."""
        if self.status == WhatIfStatus.QUEUED:
            return "Waiting for a worker to pick it up"
        return next(label for upto, label in RUN_STAGES if self.progress < upto)

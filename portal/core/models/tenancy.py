"""Tenants and what they own: teams, memberships, cohorts, GPU flavors, quotas, queues."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from portal.core.validators import reject_bidi_controls

from ._base import non_negative, positive, valid_choice


class Cohort(models.Model):
    """Teams that lend idle quota to and borrow from each other (Kueue's Cohort)."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Team(models.Model):
    """The tenant and quota holder, with a fair-share weight."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=120, validators=[reject_bidi_controls])
    weight = models.FloatField(
        default=1.0,
        help_text="Fair-share weight; a team with weight 2 is entitled to twice the share.",
    )
    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.PROTECT, related_name="teams"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [positive("weight")]

    def __str__(self) -> str:
        return self.slug


class MembershipRole(models.TextChoices):
    LEAD = "lead", "Lead"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    Role = MembershipRole

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_user_team"),
            valid_choice("role", MembershipRole),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class GpuFlavor(models.Model):
    """A GPU type. Nodes have one flavor each; NVML product names map to it."""

    name = models.SlugField(max_length=64, unique=True, help_text="e.g. h100-80gb")
    display_name = models.CharField(max_length=120, blank=True, validators=[reject_bidi_controls])
    product_names = models.JSONField(
        default=list,
        blank=True,
        help_text='NVML product names of this flavor, e.g. ["NVIDIA H100 80GB HBM3"]',
    )
    memory_mib = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """A team's GPUs of one flavor (Kueue's ClusterQueue resource group).

    `nominal` GPUs are guaranteed; the team may borrow up to `borrowing_limit`
    more from idle cohort quota (blank: no limit) and lends at most
    `lending_limit` of its unused nominal quota (blank: all of it).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="quotas")
    nominal = models.IntegerField(default=0)
    borrowing_limit = models.IntegerField(
        null=True, blank=True, help_text="Blank: may borrow any idle cohort quota."
    )
    lending_limit = models.IntegerField(
        null=True, blank=True, help_text="Blank: lends all unused nominal quota."
    )

    class Meta:
        ordering = ["team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="one_quota_per_team_flavor"),
            non_negative("nominal"),
            models.CheckConstraint(
                condition=Q(borrowing_limit__isnull=True) | Q(borrowing_limit__gte=0),
                name="quota_borrowing_limit_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True)
                | (Q(lending_limit__gte=0) & Q(lending_limit__lte=F("nominal"))),
                name="quota_lending_limit_within_nominal",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor}: {self.nominal}"


class Queue(models.Model):
    """A team's submission point with its own defaults and limits (Kueue's LocalQueue)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="queues")
    name = models.SlugField(max_length=64)
    description = models.CharField(max_length=200, blank=True)
    default_priority = models.IntegerField(default=0)
    default_runtime_seconds = models.PositiveIntegerField(default=3600)
    max_runtime_seconds = models.PositiveIntegerField(default=7 * 24 * 3600)
    max_pending_jobs = models.PositiveIntegerField(
        default=1000,
        help_text="Backpressure: submissions beyond this many pending jobs get HTTP 429.",
    )
    preemptible_default = models.BooleanField(default=True)
    max_restarts = models.PositiveIntegerField(
        default=3, help_text="Requeues (preemption, node loss) before a job fails."
    )

    class Meta:
        ordering = ["team__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_queue_name_per_team"),
            positive("default_runtime_seconds"),
            models.CheckConstraint(
                condition=Q(max_runtime_seconds__gte=F("default_runtime_seconds")),
                name="queue_default_runtime_within_max",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.name}"


class BudgetPeriod(models.TextChoices):
    MONTH = "month", "Calendar month (UTC)"
    ROLLING = "rolling", "Rolling window"


class Budget(models.Model):
    """A team's GPU-hours of one flavor per calendar month or rolling window.

    At `limit_gpu_hours` the team's new jobs of the flavor wait (reason
    `budget_exhausted`, scheduler.budgets); running jobs continue. Crossing
    `soft_gpu_hours` warns once per period (actions.budgets.warn_budget_threshold).
    """

    Period = BudgetPeriod

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="budgets")
    period = models.CharField(max_length=16, choices=Period.choices, default=Period.MONTH)
    window_days = models.PositiveIntegerField(
        default=30, help_text="Length of a rolling window in days (ignored for a calendar month)."
    )
    limit_gpu_hours = models.FloatField(
        help_text="Hard limit: new jobs of this team and flavor wait once it would be crossed."
    )
    soft_gpu_hours = models.FloatField(
        null=True, blank=True, help_text="Soft threshold: warn once per period (blank: no warning)."
    )
    # The period (budgets.BudgetStatus.period_key) whose soft-threshold crossing was
    # recorded; written only by actions.budgets.warn_budget_threshold.
    warned_period = models.CharField(max_length=16, blank=True, default="", editable=False)

    class Meta:
        ordering = ["team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="one_budget_per_team_flavor"),
            valid_choice("period", BudgetPeriod),
            positive("limit_gpu_hours"),
            positive("window_days"),
            models.CheckConstraint(
                condition=Q(soft_gpu_hours__isnull=True)
                | (Q(soft_gpu_hours__gte=0) & Q(soft_gpu_hours__lte=F("limit_gpu_hours"))),
                name="budget_soft_within_limit",
            ),
        ]

    def __str__(self) -> str:
        per = "month" if self.period == BudgetPeriod.MONTH else f"{self.window_days} days"
        return f"{self.team}/{self.flavor}: {self.limit_gpu_hours:g} GPU-hours per {per}"

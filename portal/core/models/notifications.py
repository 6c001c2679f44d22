"""Notifications: a team's webhooks and signing secret, and the outbox of deliveries.

A Delivery row is written in the transaction of the state change it reports, so a
notification is never lost when the broker is down; a Celery task sends it and a
periodic sweep sends what is still due (portal/core/actions/notifications.py).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ._base import non_negative, valid_choice
from .jobs import Job
from .tenancy import Team


class TeamWebhook(models.Model):
    """An endpoint a team lead configured: it receives the chosen job events of every
    job of the team and, when `team_events`, team-level events (budget thresholds, …)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(max_length=2000)
    events = models.JSONField(default=list, blank=True, help_text="Job events: started, ended, …")
    team_events = models.BooleanField(
        default=True, help_text="Also team-level events such as budget thresholds."
    )
    description = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team_id", "id"]

    def __str__(self) -> str:
        return f"{self.team.slug} webhook {self.url}"


class JobNotify(models.Model):
    """A job's own `notify` (docs/api.md): a URL and whether to e-mail the submitter, on
    the events chosen. A row of its own, written with the job only when asked for: a
    column would cost every submission a parameter in its hot insert statement."""

    job = models.OneToOneField(
        Job, primary_key=True, on_delete=models.CASCADE, related_name="notify"
    )
    url = models.CharField(max_length=2000, blank=True)
    on = models.JSONField(default=list)
    email = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"job {self.job_id} notify {self.url or 'e-mail'} on {', '.join(self.on)}"

    def as_dict(self) -> dict:
        return {"url": self.url or None, "on": list(self.on), "email": self.email}


class WebhookSecret(models.Model):
    """The team's signing secret: every webhook body of the team is signed with it
    (HMAC-SHA256). Kept in plain text because signing needs it; shown to leads only."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="webhook_secret")
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.team.slug} webhook secret"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class DeliveryChannel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    EMAIL = "email", "E-mail"


class Delivery(models.Model):
    """One notification to one target (a URL or an e-mail address): the outbox row,
    then the record of its attempts that the lead sees."""

    State = DeliveryState
    Channel = DeliveryChannel

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="deliveries")
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    webhook = models.ForeignKey(
        TeamWebhook, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices, default=Channel.WEBHOOK)
    event = models.CharField(max_length=64)
    target = models.CharField(max_length=2000, help_text="The URL or the e-mail address.")
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(
        null=True, blank=True, help_text="A sender holds it until then (no double sends)."
    )
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["team", "-created_at"], name="delivery_team_recent"),
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="delivery_due",
            ),
        ]
        constraints = [
            valid_choice("state", DeliveryState),
            valid_choice("channel", DeliveryChannel),
            non_negative("attempts"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.target} ({self.state})"

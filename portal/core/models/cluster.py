"""The hardware: nodes, their GPUs, and the tokens agents register with."""

import fnmatch
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from ._base import non_negative, positive, valid_choice
from .tenancy import GpuFlavor


class NodeCondition(models.TextChoices):
    UNKNOWN = "unknown", "Unknown (never heard from)"
    READY = "ready", "Ready"
    NOT_READY = "not_ready", "Not ready"


class NodeCordon(models.TextChoices):
    NONE = "none", "Schedulable"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"


# Where new work may be placed: ready and uncordoned (Node.schedulable, and the queries of
# the pass's snapshot and of its lock: portal.core.statements).
SCHEDULABLE = {"condition": NodeCondition.READY, "cordon": NodeCordon.NONE}


class Node(models.Model):
    """A GPU node running the Berth agent.

    Health (`condition`, from heartbeats) and admin intent (`cordon`) are kept
    apart, as Kubernetes keeps the Ready condition apart from `unschedulable`,
    so uncordoning a node that went away does not make it look ready.
    """

    Condition = NodeCondition

    Cordon = NodeCordon

    hostname = models.CharField(max_length=253, unique=True)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="nodes")
    rack = models.CharField(max_length=64, blank=True)
    block = models.CharField(max_length=64, blank=True, help_text="NVLink / network block")
    condition = models.CharField(
        max_length=16, choices=Condition.choices, default=Condition.UNKNOWN
    )
    cordon = models.CharField(max_length=16, choices=Cordon.choices, default=Cordon.NONE)
    cordon_reason = models.CharField(max_length=200, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    not_ready_since = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    agent_version = models.CharField(max_length=40, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    # The token the current one replaced, and when: it keeps authenticating until the node
    # first uses the current one or BERTH_NODE_TOKEN_OVERLAP_S passes, so a rotation whose
    # reply was lost does not lock the node out (docs/protocol.md, "Rotation"). NULL when
    # none, and indexed only where set: with '' in nearly every row PostgreSQL's generic
    # plan of the heartbeat's lookup took "= $1" to match half the table and scanned it all.
    previous_token_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)
    previous_token_replaced_at = models.DateTimeField(null=True, blank=True, editable=False)
    # What the last written heartbeat said of the GPUs (a digest of their identity and
    # health) and when their telemetry was written: a heartbeat that reports the same
    # before the telemetry is due touches no GPU row (portal.core.actions.heartbeat).
    inventory_digest = models.CharField(max_length=40, blank=True, editable=False)
    telemetry_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["rack", "hostname"]
        constraints = [valid_choice("condition", NodeCondition), valid_choice("cordon", NodeCordon)]
        indexes = [
            models.Index(
                fields=["previous_token_hash"],
                condition=Q(previous_token_hash__isnull=False),
                name="node_previous_token_hash",
            )
        ]

    def __str__(self) -> str:
        return self.hostname

    @property
    def state(self) -> str:
        """One word for people: not_ready wins over the admin's cordon/drain."""
        if self.condition != self.Condition.READY:
            return self.condition
        if self.cordon != self.Cordon.NONE:
            return self.cordon
        return "ready"

    @property
    def schedulable(self) -> bool:
        return all(getattr(self, name) == value for name, value in SCHEDULABLE.items())

    @staticmethod
    def authenticated_by(token_digest: str, now: datetime) -> Q:
        """The node a token digest authenticates now: the one whose current token it is, or
        whose previous token it is while the overlap lasts (previous_token_since).
        statements.node_by_token says the same in SQL; a digest is never empty, and the
        callers refuse an empty one, so the empty hash of a reset node never matches."""
        previous = Q(
            previous_token_hash=token_digest,
            previous_token_replaced_at__gt=Node.previous_token_since(now),
        )
        return Q(token_hash=token_digest) | previous

    @staticmethod
    def previous_token_since(now: datetime) -> datetime:
        """A previous token replaced after this moment still authenticates (the overlap)."""
        return now - timedelta(seconds=settings.BERTH["NODE_TOKEN_OVERLAP_S"])


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy (XID / ECC)"
    LOST = "lost", "Lost"


class Gpu(models.Model):
    Health = GpuHealth

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    product_name = models.CharField(max_length=120, blank=True)
    memory_mib = models.PositiveIntegerField(default=0)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.HEALTHY)
    health_reason = models.CharField(max_length=200, blank=True)
    # Telemetry from the last heartbeat (dcgm-exporter's fields).
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node__hostname", "index"]
        constraints = [
            # A lost GPU keeps its index for the record; its replacement takes the slot.
            models.UniqueConstraint(
                fields=["node", "index"], condition=~Q(health="lost"), name="one_gpu_per_node_index"
            ),
            valid_choice("health", GpuHealth),
        ]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index}"


class NodeBootstrapToken(models.Model):
    """An admin-issued secret an agent trades for its own node token at registration.

    Single-use, or bound to a hostname pattern and a number of uses (a rack's worth of
    nodes): a leaked token cannot register nodes without end, nor under any name
    (docs/protocol.md, "Threat model").
    """

    description = models.CharField(max_length=120, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    hostname_pattern = models.CharField(
        max_length=253,
        blank=True,
        help_text="Hostnames it may register, as a shell pattern (gpu-r7-*); "
        "required when it may be used more than once.",
    )
    max_uses = models.PositiveIntegerField(
        default=1, help_text="How many registrations it allows in all."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            non_negative("uses"),
            positive("max_uses"),
            models.CheckConstraint(
                condition=Q(max_uses=1) | ~Q(hostname_pattern=""),
                name="bootstrap_token_reusable_only_with_a_pattern",
                violation_error_message="A token used more than once must name a hostname pattern.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… {self.description}".strip()

    def allows(self, hostname: str) -> bool:
        """Whether the pattern admits `hostname` (any hostname when there is none)."""
        return not self.hostname_pattern or fnmatch.fnmatchcase(hostname, self.hostname_pattern)

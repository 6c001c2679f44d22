"""Berth's data model. Every invariant is also a database constraint."""

from .audit import AuditEntry
from .cluster import Gpu, Node, NodeBootstrapToken
from .jobs import (
    Allocation,
    DecayedUsage,
    Job,
    JobArray,
    JobDependency,
    JobEvent,
    ReclaimBackoff,
    Usage,
    Worker,
)
from .notifications import Delivery, JobNotify, TeamWebhook, WebhookSecret
from .ops import SchedulingPass
from .tenancy import Budget, Cohort, GpuFlavor, Membership, Queue, Quota, Team
from .tokens import ApiToken

__all__ = [
    "Allocation",
    "ApiToken",
    "AuditEntry",
    "Budget",
    "Cohort",
    "DecayedUsage",
    "Delivery",
    "Gpu",
    "GpuFlavor",
    "Job",
    "JobArray",
    "JobDependency",
    "JobEvent",
    "JobNotify",
    "Membership",
    "Node",
    "NodeBootstrapToken",
    "Queue",
    "Quota",
    "ReclaimBackoff",
    "SchedulingPass",
    "Team",
    "TeamWebhook",
    "Usage",
    "WebhookSecret",
    "Worker",
]

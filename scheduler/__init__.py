"""Berth's scheduling core: pure Python, frozen snapshot in, plan out.

    from scheduler import schedule, Snapshot, PolicyConfig
    plan = schedule(snapshot)

No Django, no clock, no I/O, no randomness (tests/scheduler enforce it).
See docs/scheduling.md for the rules and their sources.
"""

from .core import schedule
from .fairshare import accrue, decay
from .model import (
    Admission,
    Budget,
    Node,
    PendingJob,
    Plan,
    PolicyConfig,
    Preemption,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    Verdict,
    WorkerPlacement,
)
from .policies import POLICIES, Policy, get_policy, register_policy
from .reasons import REASONS
from .requeue import requeue_backoff

__all__ = [
    "POLICIES",
    "REASONS",
    "Admission",
    "Budget",
    "Node",
    "PendingJob",
    "Plan",
    "Policy",
    "PolicyConfig",
    "Preemption",
    "Quota",
    "RunningJob",
    "Snapshot",
    "Team",
    "Verdict",
    "WorkerPlacement",
    "accrue",
    "decay",
    "get_policy",
    "register_policy",
    "requeue_backoff",
    "schedule",
]

"""GPU-hour budget changes, each with an audit entry, and the soft-threshold warning.

An admin sets a budget per team and flavor (`set_budget`, `remove_budget`; the
Django admin calls them). The scheduling pass records each soft-threshold
crossing once per period (`warn_budget_thresholds` → `warn_budget_threshold`).
"""

from __future__ import annotations

from django.db import transaction

from portal.core.actions.audit import record_changes, record_event, snapshot
from portal.core.actions.jobs import request_scheduling_pass
from portal.core.actions.notifications import notify_team
from portal.core.budgets import BudgetStatus
from portal.core.models import AuditEntry, Budget, GpuFlavor, Team

BUDGET_FIELDS = ["period", "window_days", "limit_gpu_hours", "soft_gpu_hours"]
# The audit action and notification event of a soft-threshold crossing.
THRESHOLD_EVENT = "budget_threshold"


def set_budget(
    team: Team,
    flavor: GpuFlavor,
    *,
    acting_user,
    limit_gpu_hours: float,
    soft_gpu_hours: float | None = None,
    period: str = Budget.Period.MONTH,
    window_days: int = 30,
    note: str = "",
) -> Budget:
    """Create or change a team's GPU-hour budget of a flavor; raises ValidationError on
    bad values (the model's constraints, checked by full_clean)."""
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(team=team, flavor=flavor).first()
        created = budget is None
        budget = budget or Budget(team=team, flavor=flavor)
        before = snapshot(budget, BUDGET_FIELDS)
        budget.period, budget.window_days = period, window_days
        budget.limit_gpu_hours, budget.soft_gpu_hours = limit_gpu_hours, soft_gpu_hours
        budget.full_clean()
        budget.save()
        record_changes(
            actor=acting_user,
            instance=budget,
            before=before,
            fields=BUDGET_FIELDS,
            action="create" if created else "update",
            note=note,
        )
        transaction.on_commit(request_scheduling_pass)
    return budget


def remove_budget(budget: Budget, *, acting_user, note: str = "") -> None:
    """Delete a budget: the team's jobs of that flavor are no longer limited in GPU-hours."""
    with transaction.atomic():
        record_event(actor=acting_user, instance=budget, action="delete", note=note)
        budget.delete()
        transaction.on_commit(request_scheduling_pass)


def warn_budget_thresholds(statuses: list[BudgetStatus]) -> list[AuditEntry]:
    """Record every soft-threshold crossing not recorded yet in its period; called by the
    scheduling pass with the figures of its snapshot. Writes nothing when none crossed."""
    entries = []
    for status in statuses:
        crossed = status.soft is not None and status.used >= status.soft
        if crossed and status.warned_period != status.period_key:
            entry = warn_budget_threshold(status)
            if entry is not None:
                entries.append(entry)
        elif not crossed and status.warned_period == "rolling":
            # a rolling window fell back below its threshold: the next crossing warns again
            Budget.objects.filter(pk=status.budget_id, warned_period="rolling").update(
                warned_period=""
            )
    return entries


def warn_budget_threshold(status: BudgetStatus) -> AuditEntry | None:
    """Record that a budget crossed its soft threshold, exactly once per period.

    The conditional update claims the period (`UPDATE … WHERE warned_period <> key`):
    of two passes or processes that see the crossing, one writes the audit entry and
    sends the notification, the other gets None.
    """
    key = status.period_key
    with transaction.atomic():
        claimed = (
            Budget.objects.filter(pk=status.budget_id)
            .exclude(warned_period=key)
            .update(warned_period=key)
        )
        if not claimed:
            return None
        budget = Budget.objects.select_related("team", "flavor").get(pk=status.budget_id)
        entry = record_event(
            actor=None, instance=budget, action=THRESHOLD_EVENT, note=status.sentence
        )
        # the team's webhooks that take team events; the deliveries commit with the entry
        notify_team(budget.team, THRESHOLD_EVENT, threshold_payload(status))
    return entry


def threshold_payload(status: BudgetStatus) -> dict:
    """The notification's body: what crossed, how far, and when the period resets."""
    return {
        "team": status.team,
        "flavor": status.flavor,
        "period": status.period,
        "period_key": status.period_key,
        "used_gpu_hours": round(status.used, 1),
        "soft_gpu_hours": status.soft,
        "limit_gpu_hours": status.limit,
        "forecast_gpu_hours": status.forecast,
        "resets_at": status.resets_at.isoformat() if status.resets_at else None,
        "message": status.sentence,
    }

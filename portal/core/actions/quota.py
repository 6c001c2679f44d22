"""Quota, weight and limit changes, each with an audit entry (who, when, old → new)."""

from __future__ import annotations

from django.db import transaction

from portal.core.actions.audit import record_changes, snapshot
from portal.core.models import GpuFlavor, Quota, Team

QUOTA_FIELDS = ["nominal", "borrowing_limit", "lending_limit"]
_UNSET = object()


def set_quota(
    team: Team,
    flavor: GpuFlavor,
    *,
    acting_user,
    nominal: int,
    borrowing_limit: int | None | object = _UNSET,
    lending_limit: int | None | object = _UNSET,
    note: str = "",
) -> Quota:
    """Create or change a team's quota of a flavor; raises ValidationError on bad values."""
    with transaction.atomic():
        quota = Quota.objects.select_for_update().filter(team=team, flavor=flavor).first()
        created = quota is None
        quota = quota or Quota(team=team, flavor=flavor)
        before = snapshot(quota, QUOTA_FIELDS)
        quota.nominal = nominal
        if borrowing_limit is not _UNSET:
            quota.borrowing_limit = borrowing_limit
        if lending_limit is not _UNSET:
            quota.lending_limit = lending_limit
        quota.full_clean()
        quota.save()
        action = "create" if created else "update"
        record_changes(
            actor=acting_user,
            instance=quota,
            before=before,
            fields=QUOTA_FIELDS,
            action=action,
            note=note,
        )
    return quota


def set_team_weight(team: Team, weight: float, *, acting_user, note: str = "") -> Team:
    with transaction.atomic():
        locked = Team.objects.select_for_update().get(pk=team.pk)
        before = snapshot(locked, ["weight"])
        locked.weight = weight
        locked.full_clean()
        locked.save(update_fields=["weight"])
        record_changes(
            actor=acting_user, instance=locked, before=before, fields=["weight"], note=note
        )
    team.weight = locked.weight
    return team

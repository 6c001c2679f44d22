"""Writing the audit trail."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models

from portal.core.models import AuditEntry


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, models.Model):
        return str(value)
    return str(value)


def record_changes(
    *,
    actor,
    instance: models.Model,
    before: Mapping[str, Any],
    fields: Iterable[str],
    action: str = "update",
    note: str = "",
) -> list[AuditEntry]:
    """Write one entry per field whose value differs between `before` and `instance` now."""
    entries = []
    for name in fields:
        old, new = before.get(name), getattr(instance, name)
        if action == "update" and old == new:
            continue
        entries.append(_entry(actor, instance, action, name, old, new, note))
    return AuditEntry.objects.bulk_create(entries)


def record_event(*, actor, instance: models.Model, action: str, note: str = "") -> AuditEntry:
    """Write one entry for something that is not a field change (create, delete, cordon…)."""
    entry = _entry(actor, instance, action, "", None, None, note)
    entry.save()
    return entry


def snapshot(instance: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    """The current values of `fields`, to pass later as `before`."""
    return {name: getattr(instance, name) for name in fields}


def _entry(actor, instance, action, field, old, new, note) -> AuditEntry:
    return AuditEntry(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        target_type=instance._meta.model_name,
        target_id=str(instance.pk),
        target_repr=str(instance)[:200],
        field=field,
        old_value="" if action == "create" else _text(old),
        new_value="" if action == "delete" else _text(new),
        note=note[:200],
    )

"""Admin intent on nodes: cordon (no new work), drain (no new work, running jobs
finish, as Slurm's DRAIN), uncordon."""

from __future__ import annotations

from django.db import transaction

from portal.core.actions.audit import record_changes, snapshot
from portal.core.models import Node

Cordon = Node.Cordon


def set_cordon(node: Node, state: str, *, acting_user, reason: str = "") -> bool:
    """Set the node's cordon state; return False when it already was so."""
    if state not in Cordon.values:
        raise ValueError(f"unknown cordon state {state!r}")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.cordon == state and locked.cordon_reason == reason:
            return False
        before = snapshot(locked, ["cordon", "cordon_reason"])
        locked.cordon = state
        locked.cordon_reason = reason if state != Cordon.NONE else ""
        locked.save(update_fields=["cordon", "cordon_reason"])
        record_changes(
            actor=acting_user, instance=locked, before=before, fields=["cordon"], note=reason
        )
    node.cordon, node.cordon_reason = locked.cordon, locked.cordon_reason
    return True


def cordon_node(node: Node, *, acting_user, reason: str = "") -> bool:
    return set_cordon(node, Cordon.CORDONED, acting_user=acting_user, reason=reason)


def drain_node(node: Node, *, acting_user, reason: str = "") -> bool:
    return set_cordon(node, Cordon.DRAINING, acting_user=acting_user, reason=reason)


def uncordon_node(node: Node, *, acting_user) -> bool:
    return set_cordon(node, Cordon.NONE, acting_user=acting_user)

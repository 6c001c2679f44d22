"""Writes about nodes: registration and token rotation (docs/protocol.md, section 1 and
"Threat model"), bootstrap tokens, and the admin's intent: cordon (no new work), drain
(no new work, running jobs finish, as Slurm's DRAIN), uncordon, edits, identity reset.

Every one writes an audit row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.core.actions.audit import record_changes, record_event, snapshot
from portal.core.actions.heartbeat import GpuReport, ProtocolError, sync_inventory
from portal.core.actions.workers import LIVE, lose_workers
from portal.core.models import GpuFlavor, Node, NodeBootstrapToken, Worker
from portal.core.secrets import digest, new_secret

Cordon = Node.Cordon
# A node's tokens: both stop working at an identity reset.
TOKEN_FIELDS = ("token_hash", "previous_token_hash", "previous_token_replaced_at")
# No previous token: NULL, which the partial index leaves out (migration 0011).
NO_PREVIOUS_TOKEN = {"previous_token_hash": None, "previous_token_replaced_at": None}


class NodeIdentityTaken(Exception):
    """The hostname belongs to a node that is ready or holds work: only its current
    token (rotation) or an admin's identity reset lets it register again (409)."""


@dataclass(frozen=True)
class Registration:
    """What an agent says of its node when it registers (checked by the agent API's schema)."""

    hostname: str
    rack: str
    block: str
    agent_version: str
    gpus: list[GpuReport]


# --- registration and rotation --------------------------------------------------------


def register_node(
    registration: Registration, *, bootstrap_token: str, source: str = ""
) -> tuple[Node, str]:
    """Trade a usable bootstrap token for a node token (returned once, stored hashed).

    A known hostname keeps its row and history and gets a new identity, but only while
    its node is neither ready nor holding work; otherwise NodeIdentityTaken. The token
    is checked first, so a caller without one learns nothing about which nodes are busy.
    """
    now = timezone.now()
    with transaction.atomic():
        bootstrap = _usable_bootstrap(bootstrap_token, registration.hostname, now)
        node = Node.objects.select_for_update().filter(hostname=registration.hostname).first()
        if node is not None and holds_identity(node):
            raise NodeIdentityTaken(
                f"Node {node.hostname} is {node.state} or runs work: it registers again with "
                "its current node token, or after an admin resets its identity."
            )
        if not _spend(bootstrap):
            raise PermissionError("unknown, expired, used up or revoked bootstrap token")
        if node is not None:  # a new identity: no token of the old one works any more
            _forget_previous_token(node)
        node, secret = _save_registration(node, registration, now)
        record_event(
            actor=None,
            instance=node,
            action="register",
            note=f"with bootstrap token {bootstrap.prefix}… from {source or 'unknown'}",
        )
    return node, secret


def rotate_node_token(
    node: Node, registration: Registration, *, token_digest: str, source: str = ""
) -> tuple[Node, str]:
    """The node's token (its digest: `token_digest`) trades itself for a new one; its work
    stays its own.

    The current token becomes the node's previous token, which keeps authenticating until
    the new one is first used (retire_previous_token) or the overlap passes: a reply lost
    on its way, or an agent that died before it saved the new token, does not lock the node
    out. A rotation by the previous token (the agent never got the last reply) replaces
    only the unproven current token: the previous one and its deadline stay as they are,
    so it never outlives its overlap nor moves past a token the node has not used."""
    if node.hostname != registration.hostname:
        raise NodeIdentityTaken("This node token belongs to another node.")
    now = timezone.now()
    with transaction.atomic():
        locked = (
            Node.objects.select_for_update()
            .filter(Node.authenticated_by(token_digest, now), pk=node.pk)
            .first()
        )
        if locked is None:
            raise PermissionError("the node token was replaced meanwhile")
        by = "current" if locked.token_hash == token_digest else "previous"
        if by == "current":
            locked.previous_token_hash, locked.previous_token_replaced_at = token_digest, now
        # Only the token (and the agent's version) changes: agents rotate on their own every
        # few weeks, and an admin's edit of the node's labels must not revert with it.
        secret = new_secret("bnt")
        locked.token_hash, locked.agent_version = secret.digest, registration.agent_version
        locked.save(update_fields=[*TOKEN_FIELDS, "agent_version"])
        node = locked
        note = f"by its {by} token from {source or 'unknown'}"
        record_event(actor=None, instance=node, action="rotate_token", note=note)
    return node, secret.plaintext


def retire_previous_token(node: Node) -> bool:
    """The node used its current token: the token that one replaced stops working. Return
    whether this call retired it (a conditional update: of beats at once, one does)."""
    with transaction.atomic():
        retired = (
            Node.objects.filter(
                pk=node.pk,
                token_hash=node.token_hash,
                previous_token_hash=node.previous_token_hash,
            )
            .exclude(previous_token_hash__isnull=True)
            .update(**NO_PREVIOUS_TOKEN)
        )
        if retired:
            note = "the node used its new token"
            record_event(actor=None, instance=node, action="retire_token", note=note)
    _forget_previous_token(node)
    return bool(retired)


def _forget_previous_token(node: Node) -> None:
    for field, value in NO_PREVIOUS_TOKEN.items():
        setattr(node, field, value)


def holds_identity(node: Node) -> bool:
    """A node that is ready or has live workers: its identity is not up for grabs."""
    if node.condition == Node.Condition.READY:
        return True
    return Worker.objects.filter(node=node, state__in=LIVE).exists()


def _usable_bootstrap(token: str, hostname: str, now: datetime) -> NodeBootstrapToken:
    found = (
        NodeBootstrapToken.objects.filter(token_hash=digest(token), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), uses__lt=F("max_uses"))
        .first()
    )
    if found is None or not token or not found.allows(hostname):
        raise PermissionError("unknown, expired, used up or revoked bootstrap token")
    return found


def _spend(bootstrap: NodeBootstrapToken) -> bool:
    """One use, counted by a conditional update so two registrations cannot share the last."""
    spent = NodeBootstrapToken.objects.filter(pk=bootstrap.pk, uses__lt=F("max_uses"))
    return spent.update(uses=F("uses") + 1) == 1


def _save_registration(node: Node | None, r: Registration, now: datetime) -> tuple[Node, str]:
    flavor = _flavor_of(r.gpus)
    if node is None:
        node = Node(hostname=r.hostname, flavor=flavor)
    elif node.flavor_id != flavor.pk and node.allocations.filter(active=True).exists():
        raise ProtocolError(f"Node {node.hostname} changed GPU flavor while it still runs jobs.")
    secret = new_secret("bnt")
    node.flavor, node.rack, node.block = flavor, r.rack, r.block
    node.agent_version, node.token_hash = r.agent_version, secret.digest
    try:
        with transaction.atomic():
            node.save()
    except IntegrityError:  # two first registrations of one hostname at once
        raise NodeIdentityTaken(f"Node {r.hostname} was registered meanwhile.") from None
    if inventory := sync_inventory(node, r.gpus, now):
        Node.objects.filter(pk=node.pk).update(**inventory)
    return node, secret.plaintext


def _flavor_of(gpus: list[GpuReport]) -> GpuFlavor:
    if not gpus:
        raise ProtocolError(
            "A node must report at least one GPU.", {"gpus": ["This list may not be empty."]}
        )
    names = {g.name for g in gpus}
    if len(names) > 1:
        raise ProtocolError(f"A node has one GPU flavor; it reported {sorted(names)}.")
    (name,) = names
    for flavor in GpuFlavor.objects.all():
        if name in flavor.product_names or name == flavor.name:
            return flavor
    raise ProtocolError(
        f"No GPU flavor lists the product name {name!r}; an admin must add it to a flavor's product names.",
        {"gpus": [f"Unknown GPU product {name!r}."]},
    )


# --- bootstrap tokens ------------------------------------------------------------------


def issue_bootstrap_token(
    *,
    acting_user,
    description: str = "",
    hostname_pattern: str = "",
    max_uses: int = 1,
    expires_at: datetime | None = None,
) -> tuple[NodeBootstrapToken, str]:
    """A new bootstrap token; its secret is returned once, only its digest is stored."""
    secret = new_secret("bbt")
    token = NodeBootstrapToken(
        description=description,
        prefix=secret.prefix,
        token_hash=secret.digest,
        hostname_pattern=hostname_pattern,
        max_uses=max_uses,
        expires_at=expires_at,
        created_by=acting_user if getattr(acting_user, "is_authenticated", False) else None,
    )
    token.full_clean(exclude=["prefix", "token_hash"])
    with transaction.atomic():
        token.save()
        note = f"for {hostname_pattern or 'any hostname'}, {max_uses} use(s)"
        record_event(actor=acting_user, instance=token, action="create", note=note)
    return token, secret.plaintext


def revoke_bootstrap_tokens(tokens, *, acting_user) -> int:
    """Revoke the tokens not revoked yet; return how many."""
    with transaction.atomic():
        live = list(
            NodeBootstrapToken.objects.select_for_update().filter(
                pk__in=[t.pk for t in tokens], revoked_at__isnull=True
            )
        )
        NodeBootstrapToken.objects.filter(pk__in=[t.pk for t in live]).update(
            revoked_at=timezone.now()
        )
        for token in live:
            record_event(actor=acting_user, instance=token, action="revoke")
    return len(live)


# --- the admin's intent ------------------------------------------------------------------


def set_cordon(node: Node, state: str, *, acting_user, reason: str = "") -> bool:
    """Set the node's cordon state; return False when it already was so."""
    if state not in Cordon.values:
        raise ValueError(f"unknown cordon state {state!r}")
    if state != Cordon.NONE and not reason.strip():
        raise ValueError("a cordon or drain needs a reason")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.cordon == state and locked.cordon_reason == reason:
            return False
        before = snapshot(locked, ["cordon", "cordon_reason"])
        locked.cordon = state
        locked.cordon_reason = reason if state != Cordon.NONE else ""
        locked.save(update_fields=["cordon", "cordon_reason"])
        record_changes(
            actor=acting_user,
            instance=locked,
            before=before,
            fields=["cordon", "cordon_reason"],
            note=reason,
        )
    node.cordon, node.cordon_reason = locked.cordon, locked.cordon_reason
    return True


def cordon_node(node: Node, *, acting_user, reason: str) -> bool:
    return set_cordon(node, Cordon.CORDONED, acting_user=acting_user, reason=reason)


def drain_node(node: Node, *, acting_user, reason: str) -> bool:
    return set_cordon(node, Cordon.DRAINING, acting_user=acting_user, reason=reason)


def uncordon_node(node: Node, *, acting_user, reason: str = "") -> bool:
    return set_cordon(node, Cordon.NONE, acting_user=acting_user, reason=reason)


EDITABLE = ("rack", "block", "cordon_reason")


def edit_node(node: Node, *, acting_user, **changes) -> list[str]:
    """The admin's edits of a node's labels and cordon reason; return the fields changed."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        before = snapshot(locked, EDITABLE)
        for name, value in changes.items():
            setattr(locked, name, value)
        changed = [name for name in EDITABLE if getattr(locked, name) != before[name]]
        if changed:
            locked.save(update_fields=changed)
            record_changes(actor=acting_user, instance=locked, before=before, fields=changed)
    for name in changed:
        setattr(node, name, getattr(locked, name))
    return changed


def reset_node_identity(node: Node, *, acting_user, reason: str) -> int:
    """An admin lets a hostname register anew (a reinstalled or replaced machine): the
    node's tokens (current and previous) stop working, it is not ready, and its workers
    are lost (their gangs requeued), so a new identity never receives the old one's work.
    Return the workers lost."""
    if not reason.strip():
        raise ValueError("an identity reset needs a reason")
    now = timezone.now()
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        locked.token_hash, locked.condition = "", Node.Condition.NOT_READY
        _forget_previous_token(locked)
        locked.not_ready_since = locked.not_ready_since or now
        locked.save(update_fields=[*TOKEN_FIELDS, "condition", "not_ready_since"])
        workers = list(Worker.objects.select_for_update().filter(node=locked, state__in=LIVE))
        if workers:
            message = f"An admin reset node {locked.hostname}'s identity: {reason}"
            lose_workers(workers, now=now, kind="node_lost", message=message[:200])
        record_event(actor=acting_user, instance=locked, action="reset_identity", note=reason)
    node.token_hash, node.condition = locked.token_hash, locked.condition
    _forget_previous_token(node)
    return len(workers)

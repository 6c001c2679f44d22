"""Single sign-on writes: group mappings (admin), the sign-in sync, deactivation.

Every change writes an AuditEntry. The sync's entries have no actor (the system
made them) and a note naming the provider and the groups behind the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.core.actions.audit import record_changes, record_event, snapshot
from portal.core.models import Membership
from portal.core.models.tenancy import MembershipRole
from portal.sso.models import GroupMapping, MappedMembership, SsoIdentity

MAPPING_FIELDS = ["pattern", "team", "role", "note"]
# When several mappings give one team, the strongest role wins.
ROLE_RANK = {MembershipRole.VIEWER: 0, MembershipRole.MEMBER: 1, MembershipRole.LEAD: 2}


class SsoRefused(Exception):
    """The provider vouched for someone Berth will not sign in; the message says why."""


@dataclass(frozen=True)
class Assertion:
    """What a provider said about the person signing in."""

    provider: str
    subject: str
    username: str
    issuer: str = ""
    email: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)


# --- the mapping rows (admin) ------------------------------------------------------


def save_group_mapping(mapping: GroupMapping, *, acting_user, note: str = "") -> GroupMapping:
    """Create or change a mapping row; raises ValidationError on bad values."""
    with transaction.atomic():
        created = mapping.pk is None
        stored = None if created else GroupMapping.objects.select_for_update().get(pk=mapping.pk)
        before = snapshot(stored, MAPPING_FIELDS) if stored else {}
        mapping.full_clean()
        mapping.save()
        record_changes(
            actor=acting_user,
            instance=mapping,
            before=before,
            fields=MAPPING_FIELDS,
            action="create" if created else "update",
            note=note,
        )
    return mapping


def delete_group_mapping(mapping: GroupMapping, *, acting_user, note: str = "") -> None:
    """Delete the row. Memberships it gave stay until each user's next sign-in."""
    with transaction.atomic():
        record_event(actor=acting_user, instance=mapping, action="delete", note=note)
        mapping.delete()


# --- the sign-in sync ------------------------------------------------------------------


def desired_memberships(groups: Iterable[str]) -> dict[int, str]:
    """Team id → role that the mapping rows give someone in these groups."""
    wanted: dict[int, str] = {}
    groups = list(groups)
    for mapping in GroupMapping.objects.all():
        if not any(mapping.matches(group) for group in groups):
            continue
        held = wanted.get(mapping.team_id)
        if held is None or ROLE_RANK[mapping.role] > ROLE_RANK[held]:
            wanted[mapping.team_id] = mapping.role
    return wanted


def sync_memberships(user, groups: Iterable[str], *, source: str = "sso") -> int:
    """Bring the user's mapped memberships in line with the groups asserted now.

    Adds a membership for each mapped team the user is not in, changes the role of a
    mapped membership whose role differs, removes mapped memberships no group gives
    any more. Memberships made by hand are left alone (also when a mapping names
    their team). One audit entry per change; returns how many changes were made.
    """
    groups = sorted(set(groups))
    note = f"{source} sync; groups: {', '.join(groups) or 'none'}"[:200]
    wanted = desired_memberships(groups)
    with transaction.atomic():
        current = {m.team_id: m for m in Membership.objects.select_for_update().filter(user=user)}
        mapped = set(
            MappedMembership.objects.filter(membership__user=user).values_list(
                "membership__team_id", flat=True
            )
        )
        changes = 0
        for team_id, membership in current.items():
            if team_id not in mapped:
                continue
            if team_id not in wanted:
                record_event(actor=None, instance=membership, action="delete", note=note)
                membership.delete()
                changes += 1
            elif membership.role != wanted[team_id]:
                before = snapshot(membership, ["role"])
                membership.role = wanted[team_id]
                membership.save(update_fields=["role"])
                record_changes(
                    actor=None, instance=membership, before=before, fields=["role"], note=note
                )
                changes += 1
        for team_id, role in wanted.items():
            if team_id in current:
                continue
            membership = Membership.objects.create(user=user, team_id=team_id, role=role)
            MappedMembership.objects.create(membership=membership)
            record_changes(
                actor=None,
                instance=membership,
                before={},
                fields=["role"],
                action="create",
                note=note,
            )
            changes += 1
    return changes


def sign_in_sso_user(assertion: Assertion, *, user=None):
    """The user behind a provider's assertion, created on first sign-in, reactivated if
    suspended, with the asserted groups stored and the memberships synced.

    `user`: the account a backend already found or made (django-auth-ldap does). A
    local account with the asserted username and no SSO identity is never taken over:
    SsoRefused (an admin links them by hand, docs/auth.md).
    """
    User = get_user_model()
    with transaction.atomic():
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(provider=assertion.provider, issuer=assertion.issuer, subject=assertion.subject)
            .first()
        )
        if identity is None:
            user = user or _new_user(User, assertion)
            identity = SsoIdentity(
                user=user,
                provider=assertion.provider,
                issuer=assertion.issuer,
                subject=assertion.subject,
            )
        user = identity.user
        if not user.is_active:
            if identity.deactivated_at is None:
                raise SsoRefused("This account is disabled in Berth; ask an admin.")
            User.objects.filter(pk=user.pk).update(is_active=True)
            user.is_active = True
            record_event(actor=None, instance=user, action="reactivate", note=assertion.provider)
        identity.deactivated_at = None
        identity.groups = sorted(set(assertion.groups))
        identity.synced_at = timezone.now()
        identity.save()
        sync_memberships(user, assertion.groups, source=assertion.provider)
    return user


def _new_user(User, assertion: Assertion):
    if not assertion.username:
        raise SsoRefused("The provider did not say who you are (no username claim).")
    existing = User.objects.filter(username=assertion.username).first()
    if existing is not None:
        if SsoIdentity.objects.filter(user=existing).exists():
            raise SsoRefused(
                f"The account {assertion.username!r} belongs to another sign-in; ask an admin."
            )
        raise SsoRefused(
            f"A local account named {assertion.username!r} exists; an admin must link it first."
        )
    user = User.objects.create_user(username=assertion.username, email=assertion.email or "")
    user.set_unusable_password()
    user.save(update_fields=["password"])
    record_event(actor=None, instance=user, action="create", note=f"{assertion.provider} sign-in")
    return user


# --- leaving: deactivation -------------------------------------------------------------


def deactivate_sso_user(user, *, reason: str) -> bool:
    """Deactivate an SSO user: sessions and API tokens stop working (both check
    is_active), mapped memberships go. A later successful sign-in reactivates the
    account. False when it was already inactive."""
    with transaction.atomic():
        changed = (
            get_user_model().objects.filter(pk=user.pk, is_active=True).update(is_active=False)
        )
        if changed:
            user.is_active = False
            SsoIdentity.objects.filter(user=user).update(deactivated_at=timezone.now())
            record_event(actor=None, instance=user, action="deactivate", note=reason)
            sync_memberships(user, [], source=reason)
    return bool(changed)


def deactivate_stale_sso_users(*, max_age: timedelta, now=None) -> int:
    """Deactivate SSO users whose last sign-in sync is older than `max_age`; how many."""
    cutoff = (now or timezone.now()) - max_age
    stale = SsoIdentity.objects.filter(user__is_active=True, synced_at__lt=cutoff).select_related(
        "user"
    )
    return sum(
        deactivate_sso_user(identity.user, reason="no sign-in within the maximum age")
        for identity in stale
    )

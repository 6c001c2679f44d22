"""API tokens: created (shown once), listed, revoked — from the dashboard, the admin or `berth login`."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.core.access import visible_teams
from portal.core.actions.audit import record_event
from portal.core.db import columns, server_binding_cursor, split_row
from portal.core.models import ApiToken, Team
from portal.core.secrets import digest, new_secret


def create_api_token(
    user, *, name: str, teams: list[Team] | None = None, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Return the token row and its plaintext, which is never stored or shown again.

    `teams` narrows the token to some of the user's teams; None means all of them.
    """
    allowed = set(visible_teams(user).values_list("pk", flat=True))
    if teams and any(t.pk not in allowed for t in teams):
        raise PermissionError("A token can only be scoped to teams the user belongs to.")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("The expiry must be in the future.")
    secret = new_secret("bat")
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name[:100] or "token",
            prefix=secret.prefix,
            token_hash=secret.digest,
            expires_at=expires_at,
        )
        if teams:
            token.teams.set(teams)
        record_event(actor=user, instance=token, action="create")
    return token, secret.plaintext


def revoke_api_token(token: ApiToken, *, acting_user) -> bool:
    """Revoke the token; False when it was already revoked."""
    with transaction.atomic():
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if changed:
            record_event(actor=acting_user, instance=token, action="revoke")
    return bool(changed)


def authenticate_token(plaintext: str) -> ApiToken | None:
    """The usable token with this plaintext, its user attached and whether it is scoped
    known, its last-used time refreshed (at most once a minute).

    One hand-written query: this runs on every API request, and building the same
    query through the ORM costs about 1 ms of Python each time.
    """
    User = get_user_model()
    sql = (
        f"SELECT {columns(ApiToken, 't')}, {columns(User, 'u')}, "
        f"EXISTS (SELECT 1 FROM {ApiToken.teams.through._meta.db_table} s WHERE s.apitoken_id = t.id) "
        f"FROM {ApiToken._meta.db_table} t JOIN {User._meta.db_table} u ON u.id = t.user_id "
        "WHERE t.token_hash = %s"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [digest(plaintext)])
        row = cursor.fetchone()
    if row is None:
        return None
    (token, user), (scoped,) = split_row(row, ApiToken, User)
    token.user, token.scoped = user, bool(scoped)
    if not token.is_usable or not user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_scope(token: ApiToken) -> set[int] | None:
    """Team ids the token may reach, or None for every team of its user."""
    if getattr(token, "scoped", True) is False:
        return None  # unscoped: known from authenticate_token's query, no second one
    ids = set(token.teams.values_list("pk", flat=True))
    return ids or None

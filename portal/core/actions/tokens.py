"""API tokens: created (shown once), listed, revoked — from the dashboard, the admin or `berth login`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone

from portal.core import statements
from portal.core.access import submit_target_from, token_usable, visible_teams
from portal.core.actions.audit import record_event
from portal.core.db import split_row
from portal.core.models import ApiToken, Queue, Team
from portal.core.secrets import digest, new_secret


def create_api_token(
    user, *, name: str, teams: list[Team] | None = None, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Return the token row and its plaintext, which is never stored or shown again.

    `teams` narrows the token to some of the user's teams; None means all of them.
    """
    check_token_scope(user, teams)
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
            scoped=bool(teams),
        )
        if teams:
            token.teams.set(teams)
        record_event(actor=user, instance=token, action="create")
    return token, secret.plaintext


def check_token_scope(user, teams) -> None:
    """PermissionError unless every team (of a token's scope) is one the user belongs to
    (the dashboard, the API and the admin create tokens under this rule)."""
    allowed = set(visible_teams(user).values_list("pk", flat=True))
    if teams and any(t.pk not in allowed for t in teams):
        raise PermissionError("A token can only be scoped to teams the user belongs to.")


def rescope_api_token(token: ApiToken, *, acting_user) -> bool:
    """Make the token's `scoped` say whether teams narrow it, once the admin has set its
    teams (blank: every team of its user, as the field says); True if that changed.
    Deleting a team does not come here: a scoped token whose teams are all gone stays
    scoped and reaches no team."""
    scoped = token.teams.exists()
    if token.scoped == scoped:
        return False
    ApiToken.objects.filter(pk=token.pk).update(scoped=scoped)
    token.scoped = scoped
    record_event(actor=acting_user, instance=token, action="scope" if scoped else "unscope")
    return True


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
    rows = statements.token_by_digest(digest(plaintext))
    return _usable(rows[0])[0] if rows else None


@dataclass(frozen=True)
class SubmitGrant:
    """Who submits where (authenticate_for_submit), and `guard`: what the statement
    that stores the job compares with the rows as they are then (submit_job's
    `only_if`, statements.guard_sql), so the grant may be remembered briefly."""

    token: ApiToken
    team: Team
    queue: Queue
    guard: statements.SubmitGuard


def authenticate_for_submit(
    token_digest: str, slug: str | None, queue_name: str
) -> SubmitGrant | None:
    """authenticate_token and access.get_submit_target in one query, for the common
    single submission (portal/core/grants.py): the token, the team and the queue
    when the token is usable, its user a member (not a viewer, not staff) of exactly
    one team that fits, with that queue. None in every other case, for the full
    path to tell which error it is. PostgreSQL only (None elsewhere)."""
    if connection.vendor != "postgresql":
        return None
    rows = statements.token_and_submit_target(token_digest, slug, queue_name)
    if not rows:
        return None
    token, (user_version, *target_columns) = _usable(rows[0])
    if token is None or token.user.is_staff or target_columns[0] is None:
        return None
    try:
        width = len(target_columns)
        found = submit_target_from([row[-width:] for row in rows], slug)
    except PermissionDenied:
        return None
    if found is None:
        return None
    team, queue = found
    token.user.row_version = user_version
    guard = statements.submit_guard(token, team, queue, bool(slug))
    return SubmitGrant(token, team, queue, guard)


def _usable(row) -> tuple[ApiToken | None, Sequence]:
    """The token of a statements.token_sql row if it may be used (its last use refreshed),
    and the rest of the row after the scope."""
    (token, user), (teams, *rest) = split_row(row, ApiToken, get_user_model())
    token.user = user
    token.scope_ids = set(teams) if isinstance(teams, list) else None
    if not token_usable(token, user):
        return None, rest
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token, rest


def token_scope(token: ApiToken) -> set[int] | None:
    """Team ids the token may reach (none once its teams are all deleted: it fails
    closed), or None for every team of its user."""
    if not token.scoped:
        return None
    ids = getattr(token, "scope_ids", None)
    return ids if ids is not None else set(token.teams.values_list("pk", flat=True))

"""API tokens: created (shown once), listed, revoked — from the dashboard, the admin or `berth login`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone

from portal.core.access import (
    SUBMIT_ROLES,
    row_version,
    submit_target_from,
    submit_target_sql,
    token_usable,
    visible_teams,
)
from portal.core.actions.audit import record_event
from portal.core.db import columns, server_binding_cursor, split_row
from portal.core.models import ApiToken, Membership, Queue, Team
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
    with server_binding_cursor() as cursor:
        cursor.execute(_token_sql(), {"digest": digest(plaintext)})
        row = cursor.fetchone()
    return None if row is None else _usable(row)[0]


@dataclass(frozen=True)
class SubmitGrant:
    """Who submits where (authenticate_for_submit), and `guard`: SQL and parameters
    that find a row only while that still holds (submit_job's `only_if`), so the
    grant may be remembered briefly and re-checked by the statement that uses it."""

    token: ApiToken
    team: Team
    queue: Queue
    guard: tuple[str, list]


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
    target = submit_target_sql("u.id", "s.teams", bool(slug), versions=True)
    sql = _token_sql(
        select=f", {row_version('u')}, x.*",
        join=f" LEFT JOIN LATERAL ({target}) x ON true",
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, {"digest": token_digest, "queue": queue_name, "slug": slug})
        rows = cursor.fetchall()
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
    return SubmitGrant(token, team, queue, _submit_guard(token, team, queue, bool(slug)))


def _submit_guard(token: ApiToken, team: Team, queue: Queue, slug: bool) -> tuple[str, list]:
    """SQL that finds a row while authenticate_for_submit would still grant the same:
    the token usable and still its user's, the user unchanged (active, not staff, the
    same name for the receipt), a member but not a viewer of the team, the team in
    the token's scope (and, with no team named, the user's only one there), the team
    and the queue unchanged (row_version)."""
    User = get_user_model()
    mine = Membership._meta.db_table
    # The roles are constants written into the text, not parameters: the whole insert
    # must stay within psycopg's 50 parameters, or it is parsed again on every
    # submission (tests/api/test_submit_route.py), and an array costs a dumper each time.
    roles = ", ".join(f"'{role}'" for role in SUBMIT_ROLES)
    scope = f"SELECT st.team_id FROM {ApiToken.teams.through._meta.db_table} st WHERE st.apitoken_id = tk.id"

    def in_scope(column: str) -> str:
        return f"(NOT EXISTS ({scope}) OR {column} IN ({scope}))"

    only_team = (
        ""
        if slug
        else f" AND (SELECT count(*) FROM {mine} m2 WHERE m2.user_id = u.id AND {in_scope('m2.team_id')}) = 1"
    )
    sql = (
        f"SELECT 1 FROM {ApiToken._meta.db_table} tk JOIN {User._meta.db_table} u ON u.id = tk.user_id "
        f"JOIN {mine} m ON m.user_id = u.id AND m.team_id = %s "
        f"JOIN {Team._meta.db_table} t ON t.id = m.team_id "
        f"JOIN {Queue._meta.db_table} q ON q.team_id = t.id AND q.id = %s "
        "WHERE tk.id = %s AND tk.revoked_at IS NULL "
        "AND (tk.expires_at IS NULL OR tk.expires_at > statement_timestamp()) "
        f"AND u.is_active AND NOT u.is_staff AND m.role IN ({roles}) AND {in_scope('m.team_id')} "
        f"AND {row_version('u')} = %s AND {row_version('q')} = %s AND {row_version('t')} = %s"
        f"{only_team}"
    )
    params = [team.pk, queue.pk, token.pk]
    return sql, params + [token.user.row_version, queue.row_version, team.row_version]


def _token_sql(select: str = "", join: str = "") -> str:
    """A token by its digest (`%(digest)s`) with its user, the team ids it is scoped
    to (NULL when it is not; on SQLite only 1 when it is), and what `select` adds
    from `join`."""
    User = get_user_model()
    through = ApiToken.teams.through._meta.db_table
    if connection.vendor == "postgresql":
        scope = (
            f" CROSS JOIN LATERAL (SELECT array_agg(st.team_id) AS teams FROM {through} st "
            "WHERE st.apitoken_id = tk.id) s"
        )
        teams = "s.teams"
    else:
        scope, teams = "", f"(SELECT 1 FROM {through} st WHERE st.apitoken_id = tk.id LIMIT 1)"
    return (
        f"SELECT {columns(ApiToken, 'tk')}, {columns(User, 'u')}, {teams}{select} "
        f"FROM {ApiToken._meta.db_table} tk JOIN {User._meta.db_table} u ON u.id = tk.user_id"
        f"{scope}{join} WHERE tk.token_hash = %(digest)s"
    )


def _usable(row) -> tuple[ApiToken | None, Sequence]:
    """The token of a _token_sql row if it may be used (its last use refreshed),
    and the rest of the row after the scope."""
    (token, user), (teams, *rest) = split_row(row, ApiToken, get_user_model())
    token.user, token.scoped = user, teams is not None
    token.scope_ids = set(teams) if isinstance(teams, list) else None
    if not token_usable(token, user):
        return None, rest
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token, rest


def token_scope(token: ApiToken) -> set[int] | None:
    """Team ids the token may reach, or None for every team of its user."""
    if getattr(token, "scoped", True) is False:
        return None  # unscoped: known from authenticate_token's query, no second one
    ids = getattr(token, "scope_ids", None) or set(token.teams.values_list("pk", flat=True))
    return ids or None

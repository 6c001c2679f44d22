"""Parity of the hand-written statements with the ORM queries they replace, on the
backend the suite runs on (make test: PostgreSQL, then SQLite): the same answer for
every persona, token and target, so a rule changed in one is caught in the other."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.utils import timezone

from portal.core import access
from portal.core.actions.tokens import authenticate_token, create_api_token, token_scope
from portal.core.models import ApiToken, Membership, Queue


def _by_orm(plaintext: str):
    """authenticate_token's answer through the ORM: the usable token, its user, its scope."""
    from portal.core.secrets import digest

    token = ApiToken.objects.select_related("user").filter(token_hash=digest(plaintext)).first()
    if token is None or not access.token_usable(token, token.user):
        return None
    scope = set(token.teams.values_list("pk", flat=True)) or None
    return token.pk, token.user.pk, scope


def test_token_statement_answers_as_the_orm(cluster, personas):
    now = timezone.now()
    made = {
        "plain": create_api_token(personas.member_a, name="a")[1],
        "scoped": create_api_token(personas.lead_a, name="b", teams=[cluster.team_a])[1],
        "expiring": create_api_token(personas.lead_b, name="c", expires_at=now + timedelta(1))[1],
        "revoked": create_api_token(personas.lead_a, name="d")[1],
        "expired": create_api_token(personas.viewer_a, name="e", expires_at=now + timedelta(1))[1],
        "inactive user": create_api_token(personas.lead_b, name="f")[1],
    }
    ApiToken.objects.filter(name="d").update(revoked_at=now)
    ApiToken.objects.filter(name="e").update(expires_at=now - timedelta(seconds=1))
    ApiToken.objects.filter(name="f").update(user=personas.admin)
    personas.admin.is_active = False
    personas.admin.save()

    for name, plaintext in [*made.items(), ("unknown", "bat_nope")]:
        token = authenticate_token(plaintext)
        by_sql = None
        if token is not None:
            by_sql = (token.pk, token.user.pk, token_scope(token))
        assert by_sql == _by_orm(plaintext), name
    assert _by_orm(made["plain"]) is not None and _by_orm(made["revoked"]) is None


def _answer(find, *args):
    try:
        team, queue = find(*args) or (None, None)
    except access.NotFound as exc:
        return ("not found", exc.what)
    except access.MultipleTeams as exc:
        return ("which team", tuple(exc.slugs))
    except PermissionDenied:
        return ("denied",)
    if team is None:
        return (None,)
    return (team.pk, queue.pk if queue else None, queue.team_id if queue else None)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statement is PostgreSQL's")
def test_submit_target_statement_answers_as_the_orm(cluster, personas):
    Membership.objects.create(user=personas.lead_b, team=cluster.team_a, role="viewer")
    Queue.objects.create(team=cluster.team_a, name="night", max_runtime_seconds=3600)
    users = [personas.lead_a, personas.member_a, personas.viewer_a, personas.lead_b]
    slugs = [None, "alpha", "beta", "nope"]
    queues = ["default", "night", "nope"]
    scopes = [
        None,
        {cluster.team_a.pk},
        {cluster.team_b.pk},
        {cluster.team_a.pk, cluster.team_b.pk},
    ]
    compared = 0
    for user, slug, queue, scope in itertools.product(users, slugs, queues, scopes):
        fast = _answer(access._member_queue, user, slug, queue, scope)
        slow = _answer(access._slow_submit_target, user, slug, queue, scope)
        if fast[0] is None:  # the statement leaves this one to the ORM path
            continue
        assert fast == slow, (user.username, slug, queue, scope)
        compared += 1
    assert compared >= 20

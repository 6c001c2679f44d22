"""Database helpers of the hot paths: server-side binding with prepared statements,
and inserting rows from arrays."""

from __future__ import annotations

import select

import pytest
from django.db import connection, connections

from portal.core.db import IfNull, insert_rows, server_binding_cursor, update_rows
from portal.core.models import Team
from tests.factories import other_connection

pytestmark = pytest.mark.django_db


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_a_hot_statement_is_prepared_after_five_runs_and_django_queries_never_are():
    sql = "SELECT count(*) FROM core_team WHERE slug = %s"
    for runs in range(1, 8):
        with server_binding_cursor() as cursor:
            cursor.execute(sql, ["nope"])
            assert cursor.fetchone() == (0,)
        hot = [s for s in _prepared() if "core_team WHERE slug = $1" in s]
        assert len(hot) == (1 if runs > 5 else 0), runs  # prepared once run 5 times
    for _ in range(6):
        assert not Team.objects.filter(slug="nope").exists()
    assert not [s for s in _prepared() if '"core_team"."slug"' in s]


def test_insert_rows_fills_defaults_and_refuses_rows_of_different_shapes():
    ids = insert_rows(Team, [{"slug": "a", "name": "A"}, {"slug": "b", "name": "B"}])

    teams = {t.pk: t for t in Team.objects.filter(pk__in=ids)}
    assert [teams[pk].slug for pk in ids] == ["a", "b"]
    default = Team._meta.get_field("weight").get_default()
    assert {t.weight for t in teams.values()} == {default}
    assert all(t.created_at is not None for t in teams.values())
    with pytest.raises(ValueError, match="same fields"):
        insert_rows(Team, [{"slug": "c", "name": "C"}, {"slug": "d"}])
    assert not Team.objects.filter(slug__in=["c", "d"]).exists()


def test_update_rows_writes_plain_values_and_if_null_as_the_orm_would(cluster):
    from datetime import timedelta

    from django.db.models import F
    from django.utils import timezone

    from portal.core.models import Job
    from tests.portal.agent_helpers import make_job

    now = timezone.now()
    seen, unseen, other = (make_job(cluster) for _ in range(3))
    Job.objects.filter(pk=seen.pk).update(started_at=now - timedelta(1))
    fields = {"state": Job.State.RUNNING, "reason": "x", "started_at": IfNull(now)}
    assert (
        update_rows(
            Job, [seen.pk, unseen.pk, 10**9], fields | {"submitted_by": cluster.personas.lead_a}
        )
        == 2
    )
    rows = {j.pk: j for j in Job.objects.all()}
    assert rows[seen.pk].started_at == now - timedelta(1) and rows[unseen.pk].started_at == now
    assert {rows[pk].state for pk in (seen.pk, unseen.pk)} == {Job.State.RUNNING}
    assert rows[seen.pk].submitted_by_id == cluster.personas.lead_a.pk  # a model, by its key
    assert rows[other.pk].state == Job.State.PENDING
    # an expression takes the ORM, IfNull with it
    assert (
        update_rows(Job, [other.pk], {"attempt": F("attempt") + 1, "started_at": IfNull(now)}) == 1
    )
    other.refresh_from_db()
    assert (other.attempt, other.started_at) == (rows[other.pk].attempt + 1, now)


@pytest.mark.django_db(transaction=True)
def test_the_health_check_asks_the_socket_and_replaces_a_connection_the_server_ended(
    monkeypatch,
):
    wrapper = connections["default"]
    asked_server = []
    monkeypatch.setattr(type(wrapper), "is_usable", lambda self: asked_server.append(1) or True)

    def next_request() -> int:
        wrapper.close_if_unusable_or_obsolete()  # what Django does between requests
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    first = next_request()
    assert next_request() == first and not asked_server  # kept, and no SELECT 1 sent

    with other_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [first])
    socket = wrapper.connection.pgconn.socket
    assert select.select([socket], [], [], 5)[0]  # the server's goodbye arrived

    assert next_request() != first  # replaced before the query, no error
    assert not asked_server

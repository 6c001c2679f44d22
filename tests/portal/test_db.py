"""Database helpers of the hot paths: server-side binding with prepared statements,
and inserting rows from arrays."""

from __future__ import annotations

import json
import select

import pytest
from django.db import connection, connections
from django.utils import timezone

from portal.core.db import IfNull, insert_rows, server_binding_cursor, update_rows
from portal.core.models import Job, JobEvent, Team
from tests.factories import make_cluster, other_connection

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


def _stored_events(ids: list[int]) -> list[tuple]:
    """The events' columns as stored, in the order of `ids`; the JSON as its text, so
    that true and 1 differ."""
    rows = JobEvent.objects.filter(pk__in=ids).values_list(
        "pk", "job_id", "at", "kind", "from_state", "to_state", "actor_id", "message", "data"
    )
    by_id = {pk: (*row, json.dumps(data, sort_keys=True)) for pk, *row, data in rows}
    return [by_id[pk] for pk in ids]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            [{"n": 1}, {"n": True}, {"n": 1.0}, {"n": 1}], id="equal-values-of-other-types"
        ),
        pytest.param([{"a": ["x"]}, {"a": ["x"]}, {"a": ["x"]}, {"a": ["x"]}], id="equal-values"),
        pytest.param([["x", None], ["x", None], ["y"], {}], id="some-equal"),
    ],
)
def test_insert_rows_stores_what_bulk_create_stores_whichever_columns_are_the_same(data):
    """A column the same in every row is bound once: the rows stored are bulk_create's,
    with JSON values equal in Python but not as JSON (1, true, 1.0), relations given by
    object or by key, and rows that are the same in every column."""
    cluster = make_cluster()
    job = Job.objects.create(
        team=cluster.team_a, queue=cluster.queue_a, flavor=cluster.h100, name="j", image="i",
        max_runtime_seconds=60,
    )  # fmt: skip
    user, at = cluster.personas.member_a, timezone.now()
    rows = [
        {"job": job, "at": at, "kind": "k", "actor": user if i % 2 else None,
         "message": f"m{i % 2}", "data": value}
        for i, value in enumerate(data)
    ]  # fmt: skip
    created = JobEvent.objects.bulk_create(JobEvent(**row) for row in rows)

    ids = insert_rows(JobEvent, rows)

    assert [row[1:] for row in _stored_events(ids)] == [
        row[1:] for row in _stored_events([e.pk for e in created])
    ]
    same = [{"job_id": job.pk, "kind": "k", "at": at, "data": {"a": [1]}}] * 3
    created = JobEvent.objects.bulk_create(JobEvent(**row) for row in same)
    ids = insert_rows(JobEvent, same)
    assert len(set(ids)) == 3 and ids == sorted(ids)
    assert [row[1:] for row in _stored_events(ids)] == [
        row[1:] for row in _stored_events([e.pk for e in created])
    ]


def test_update_rows_writes_plain_values_and_if_null_as_the_orm_would(cluster):
    from datetime import timedelta

    from django.db.models import F

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


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the writers are PostgreSQL's")
def test_the_writers_refuse_an_overlong_text_as_the_orm_does(cluster):
    """A text longer than its column is refused ("value too long"), not cut short, by
    insert_rows / insert_columns and bulk_set_values as by the ORM: their casts carry no
    length (db.column_cast)."""
    from django.db import DataError, transaction

    from portal.core.db import bulk_set_values
    from tests.portal.agent_helpers import make_job

    job = make_job(cluster)
    kind = "k" * 40  # JobEvent.kind is max_length=32
    with pytest.raises(DataError), transaction.atomic():
        JobEvent.objects.bulk_create([JobEvent(job=job, kind=kind)])
    with pytest.raises(DataError), transaction.atomic():
        insert_rows(JobEvent, [{"job_id": job.pk, "kind": kind}])
    with pytest.raises(DataError), transaction.atomic():
        bulk_set_values(Job, [job.pk], {"reason_code": ["r" * 40]})
    assert insert_rows(JobEvent, [{"job_id": job.pk, "kind": "k" * 32}])  # the limit itself

"""Database helpers of the hot paths: server-side binding with prepared statements,
and inserting rows from arrays."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.core.db import insert_rows, server_binding_cursor
from portal.core.models import Team

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

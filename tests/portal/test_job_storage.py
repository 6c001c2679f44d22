"""core_job leaves room on its pages for the pass's verdicts (migration 0010)."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.core.models import Job

pytestmark = pytest.mark.django_db


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL storage setting")
def test_the_job_table_keeps_half_of_each_page_free():
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [Job._meta.db_table])
        (options,) = cur.fetchone()
    assert "fillfactor=50" in (options or [])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL storage setting")
def test_no_verdict_column_is_indexed_so_its_update_can_stay_on_the_page():
    """An update stays on its page (heap-only) only if no changed column is in an index:
    the verdict columns every pass writes (scheduling/apply.py) must stay unindexed."""
    verdict = ["reason", "reason_code", "queue_position", "estimated_start_at", "preempted_by"]
    columns = {Job._meta.get_field(name).column for name in verdict}
    with connection.cursor() as cur:
        constraints = connection.introspection.get_constraints(cur, Job._meta.db_table)
    indexed = {c for info in constraints.values() if info["index"] for c in info["columns"]}
    assert indexed and not columns & indexed

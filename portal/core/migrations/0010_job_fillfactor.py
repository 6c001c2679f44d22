"""core_job keeps half of each page free on PostgreSQL (fillfactor 50).

Every scheduling pass rewrites the verdict of each pending job it looks at (reason,
reason code, queue position, estimated start; scheduling/apply.py). None of those
columns is indexed, so PostgreSQL can update such a row in place on its page (a
heap-only tuple) and touch none of the table's ten indexes, but only when the page
has room for the new version: with the default fillfactor (100) it seldom has, and
each verdict became a new row version elsewhere plus an entry in every index. With
half of each page free, a pass over 10,000 pending jobs writes its verdicts in about
a seventh of the time and WAL (docs/benchmarks.md, "Full scheduling pass", issue 14).
The price is the table's size on disk, about twice as many pages. Rows stored before
this migration move to roomier pages as they are updated; `VACUUM FULL core_job`
rewrites them at once. SQLite has no such setting: nothing to do there.
"""

from django.db import migrations

FILLFACTOR = 50


def set_fillfactor(apps, schema_editor, value=FILLFACTOR):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE core_job SET (fillfactor = {int(value)})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE core_job RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("core", "0009_merge_20261201_1235")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor, elidable=False)]

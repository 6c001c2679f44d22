"""A node keeps the token its current one replaced, and when, so that token keeps
authenticating for an overlap after a rotation (docs/protocol.md, "Rotation"): a rotation
whose reply was lost, or an agent that died before it saved the new token, no longer locks
the node out. The heartbeat finds its node by either hash in one query. No previous token
is NULL, and only set ones are indexed (a partial index): with '' in nearly every row,
PostgreSQL's generic plan of that query estimated "= $1" to match half the table and
scanned every node on every beat."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0010_job_fillfactor"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="previous_token_hash",
            field=models.CharField(blank=True, editable=False, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="previous_token_replaced_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="node",
            index=models.Index(
                condition=models.Q(("previous_token_hash__isnull", False)),
                fields=["previous_token_hash"],
                name="node_previous_token_hash",
            ),
        ),
    ]

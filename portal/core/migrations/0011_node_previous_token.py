"""A node keeps the token its current one replaced, and when, so that token keeps
authenticating for an overlap after a rotation (docs/protocol.md, "Rotation"): a rotation
whose reply was lost, or an agent that died before it saved the new token, no longer locks
the node out. Both hashes are indexed: the heartbeat finds its node by either in one query.
Existing nodes have no previous token (empty, which no token's digest equals)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0010_job_fillfactor"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="previous_token_hash",
            field=models.CharField(blank=True, db_index=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="node",
            name="previous_token_replaced_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]

"""Drop the single-column indexes Django made for Job.team, Job.queue and
JobEvent.job: composite indexes that lead with the same column (job_team_state,
job_team_recent, job_queue_order, jobevent_job_at) serve every lookup they did,
and each index costs on every insert.

Only the indexes go; the foreign keys stay as they are. (Django's own AlterField
would drop and re-add each foreign key, which checks every row of the table under
an exclusive lock.)
"""

import django.db.models.deletion
from django.db import migrations, models

DROPPED = [
    ("core_job", "queue_id", "core_job_queue_id_c48a7645"),
    ("core_job", "team_id", "core_job_team_id_3b334233"),
    ("core_jobevent", "job_id", "core_jobevent_job_id_c232aab5"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_node_inventory_digest"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX "{index}" ON "{table}" ("{column}")',
                )
                for table, column, index in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name=model,
                    name=name,
                    field=models.ForeignKey(
                        db_index=False, on_delete=on_delete, related_name=related, to=to
                    ),
                )
                for model, name, on_delete, related, to in [
                    ("job", "queue", django.db.models.deletion.PROTECT, "jobs", "core.queue"),
                    ("job", "team", django.db.models.deletion.PROTECT, "jobs", "core.team"),
                    ("jobevent", "job", django.db.models.deletion.CASCADE, "events", "core.job"),
                ]
            ],
        ),
    ]

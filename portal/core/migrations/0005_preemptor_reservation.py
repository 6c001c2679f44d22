from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_drop_indexes_covered_by_composites"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="preempted_by",
            field=models.BigIntegerField(
                blank=True,
                help_text="Id of the job whose preemption stopped this one, until it is admitted "
                "again: the GPUs it frees stay reserved for that job (docs/scheduling.md).",
                null=True,
            ),
        ),
    ]

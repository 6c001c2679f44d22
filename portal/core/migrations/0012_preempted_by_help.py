"""A victim's link to its preemptor ends when either is admitted (issue 13; the pass
clears the victims' links when it admits their preemptor): the field's help says so."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0011_node_previous_token"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="preempted_by",
            field=models.BigIntegerField(
                blank=True,
                help_text="Id of the job whose preemption stopped this one, until either is "
                "admitted: the GPUs it frees stay reserved for that job (docs/scheduling.md).",
                null=True,
            ),
        ),
    ]

"""A preemptor that waits for jobs reaching their max runtime keeps the horizon it decided
with (issue 13): the pass stores it beside the job's reservation
(scheduler.model.PendingJob.reserved_until). No index, as for reserved_on."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0013_preemptor_target'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='reserved_until',
            field=models.DateTimeField(blank=True, help_text='With reserved_on, where it waits for jobs that reach their max runtime: the horizon its claim decided with, kept by the next passes (docs/scheduling.md).', null=True),
        ),
    ]

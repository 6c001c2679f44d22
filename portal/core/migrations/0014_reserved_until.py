"""A preemptor that waits for jobs reaching their max runtime keeps those jobs and the
horizon it decided with (issue 13): the pass stores them beside the job's reservation
(scheduler.model.PendingJob.reserved_until, reserved_ending). No index, as for
reserved_on."""

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
        migrations.AddField(
            model_name='job',
            name='reserved_ending',
            field=models.JSONField(blank=True, default=list, help_text='With reserved_until: the ids of the running jobs reaching their max runtime that its claim counted on (docs/scheduling.md).'),
        ),
    ]

"""A preemptor that waits for jobs reaching their max runtime keeps those on its target
and the horizon they end by (issue 13): the pass stores them beside the job's reservation
(scheduler.model.PendingJob.reserved_until, reserved_ending). Database defaults, so the
submit statement does not grow (statements.submit_statement); no index, as for
reserved_on."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0013_preemptor_target'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='reserved_ending',
            field=models.JSONField(blank=True, db_default=models.Value([], output_field=models.JSONField()), default=list, help_text='With reserved_until: the ids of the running jobs reaching their max runtime that its claim counted on (docs/scheduling.md).'),
        ),
        migrations.AddField(
            model_name='job',
            name='reserved_until',
            field=models.DateTimeField(blank=True, db_default=None, default=None, help_text='With reserved_on, where it waits for jobs that reach their max runtime: the horizon its claim decided with, kept by the next passes (docs/scheduling.md).', null=True),
        ),
    ]

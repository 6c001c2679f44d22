"""A preemptor's reservation is kept where it was first made (issue 13): the pass stores
its nodes in the job's row (scheduler.model.PendingJob.reserved_on). No index: the
verdict updates of every pass stay heap-only."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0012_preempted_by_help'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='reserved_on',
            field=models.JSONField(blank=True, default=list, help_text='While this job waits for the jobs it preempted: the [node, GPUs] pairs its reservation holds, kept there by the next passes (docs/scheduling.md).'),
        ),
    ]

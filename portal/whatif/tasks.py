"""Celery task for what-if runs; the work is in portal.whatif.replay."""

from celery import shared_task


@shared_task(name="portal.whatif.tasks.run_whatif", ignore_result=True)
def run_whatif(run_id: int) -> None:
    from portal.whatif.replay import execute

    execute(run_id)

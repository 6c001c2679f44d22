"""Celery tasks. They stay thin: the work lives in portal.core.scheduling and
portal.core.actions.node_monitor and portal.core.actions.notifications, which tests
call directly."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache

from portal.core.actions.dependencies import SETTLE_TASK, settle_in_batches, sweep_held_jobs
from portal.core.actions.jobs import PASS_REQUESTED_KEY, PASS_TASK, request_scheduling_pass
from portal.core.actions.node_monitor import monitor_nodes
from portal.core.actions.notifications import DELIVER_TASK, deliver, sweep
from portal.core.scheduling import run_pass


@shared_task(name=PASS_TASK, ignore_result=True)
def scheduling_pass() -> dict | None:
    """One scheduling pass; returns None when another pass holds the lock.

    Then this one asks for the next (a moment from now): what was committed after the
    running pass took its snapshot, and made this request, is not lost until the
    periodic pass."""
    cache.delete(PASS_REQUESTED_KEY)
    result = run_pass()
    if result is None:
        request_scheduling_pass()
        return None
    return result.summary()


@shared_task(name="portal.core.tasks.node_monitor", ignore_result=True)
def node_monitor() -> dict:
    """Mark silent nodes not ready, evict long-silent ones, stop over-time jobs."""
    return monitor_nodes()


@shared_task(name="portal.core.tasks.dependency_sweep", ignore_result=True)
def dependency_sweep() -> dict:
    """Judge every job held for its dependencies (the safety net behind the release
    on each parent's state change; actions.dependencies)."""
    return sweep_held_jobs()


@shared_task(name=SETTLE_TASK, ignore_result=True)
def dependency_settle(job_ids: list[int]) -> dict:
    """Judge the many held dependents one transition concerned (actions.dependencies)."""
    return settle_in_batches(job_ids)


@shared_task(name=DELIVER_TASK, bind=True, ignore_result=True)
def deliver_notifications(self, ids: list[int]) -> dict:
    """Attempt these deliveries once; each that failed is retried by a task of its own
    after its backoff (the sweep sends it should that message be lost)."""
    retry = deliver(ids)
    for pk, delay in retry.items():
        self.apply_async(([pk],), countdown=delay)
    return {"retry": len(retry)}


@shared_task(name="portal.core.tasks.sweep_notifications", ignore_result=True)
def sweep_notifications() -> int:
    """Send every delivery that is due and held by no sender."""
    return len(sweep())

"""Celery tasks. They stay thin: the work lives in portal.core.scheduling and
portal.core.actions.node_monitor, which tests call directly."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache

from portal.core.actions.dependencies import SETTLE_TASK, settle_in_batches, sweep_held_jobs
from portal.core.actions.jobs import PASS_REQUESTED_KEY, PASS_TASK
from portal.core.actions.node_monitor import monitor_nodes
from portal.core.scheduling import run_pass


@shared_task(name=PASS_TASK, ignore_result=True)
def scheduling_pass() -> dict | None:
    """One scheduling pass; returns None when another pass holds the lock."""
    cache.delete(PASS_REQUESTED_KEY)
    result = run_pass()
    return result.summary() if result else None


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

"""Celery tasks. They stay thin: the work lives in portal.core.scheduling and
portal.core.actions.node_monitor, which tests call directly."""

from __future__ import annotations

import contextlib
import logging
import time

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

_REQUESTED_KEY = "berth:pass-requested"
_last_request = float("-inf")


@shared_task(name="portal.core.tasks.scheduling_pass", ignore_result=True)
def scheduling_pass() -> dict | None:
    """One scheduling pass; returns None when another pass holds the lock."""
    from portal.core.scheduling import run_pass

    cache.delete(_REQUESTED_KEY)
    result = run_pass()
    return result.summary() if result else None


@shared_task(name="portal.core.tasks.node_monitor", ignore_result=True)
def node_monitor() -> dict:
    """Mark silent nodes not ready, evict long-silent ones, stop over-time jobs."""
    from portal.core.actions.node_monitor import monitor_nodes

    return monitor_nodes()


def request_pass() -> None:
    """Queue one pass a moment from now, unless one is already queued.

    A burst of submits or job ends thus costs one extra pass, not one each.
    Failure to reach the broker is logged, never raised: the job is already
    committed and the periodic pass will pick it up.
    """
    global _last_request
    delay = settings.BERTH["SCHEDULE_DEBOUNCE_S"]
    now = time.monotonic()
    if now - _last_request < delay:
        return  # this process asked moments ago; spare the shared cache a round trip
    _last_request = now
    try:
        if not cache.add(_REQUESTED_KEY, 1, timeout=max(delay * 2, 1)):
            return
        scheduling_pass.apply_async(countdown=delay, expires=delay + 30, retry=False)
    except Exception:  # noqa: BLE001 — the broker being down must not fail a submit
        log.warning(
            "could not queue an early scheduling pass; the periodic one will run", exc_info=True
        )
        with contextlib.suppress(Exception):
            cache.delete(_REQUESTED_KEY)

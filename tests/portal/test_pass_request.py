"""Asking for a scheduling pass (actions.jobs.request_scheduling_pass): a burst of
submits or job ends, in one web process or several, queues one pass a short moment
from now; once that pass has begun, the next request queues the next one. Counted on
the real broker's queue (Redis), which no worker consumes here."""

from __future__ import annotations

import json
import os
import time

import pytest
import redis
from django.core.cache import cache

from portal.core.actions import jobs
from portal.core.actions.jobs import PASS_REQUESTED_KEY, PASS_TASK, request_scheduling_pass

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="the broker and the shared debounce mark are Redis"
)
QUEUE = "celery"  # Celery's default queue: a Redis list


@pytest.fixture
def broker(settings, monkeypatch):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(QUEUE)
    cache.delete(PASS_REQUESTED_KEY)
    monkeypatch.setattr(jobs, "_last_pass_request", float("-inf"))
    yield client
    client.delete(QUEUE)
    cache.delete(PASS_REQUESTED_KEY)


def another_process(monkeypatch):
    """What a request from another web process looks like: it has no local memory."""
    monkeypatch.setattr(jobs, "_last_pass_request", float("-inf"))


def test_a_burst_queues_one_short_pass_then_the_next_after_it_began(broker, monkeypatch, settings):
    for _ in range(50):
        request_scheduling_pass()
    another_process(monkeypatch)
    request_scheduling_pass()
    assert broker.llen(QUEUE) == 1
    message = json.loads(broker.lindex(QUEUE, 0))
    assert message["headers"]["task"] == PASS_TASK
    assert message["headers"]["eta"] is not None  # a short countdown, not at once

    cache.delete(PASS_REQUESTED_KEY)  # the queued pass begins (tasks.scheduling_pass)
    time.sleep(settings.BERTH["SCHEDULE_DEBOUNCE_S"])
    request_scheduling_pass()
    assert broker.llen(QUEUE) == 2


def test_a_pass_that_finds_another_running_asks_for_the_next(broker, monkeypatch):
    """Its request must not be lost until the periodic pass: the running pass's
    snapshot may predate what made it."""
    from portal.core import tasks

    monkeypatch.setattr(tasks, "run_pass", lambda: None)  # the lock is held elsewhere
    assert tasks.scheduling_pass() is None
    assert broker.llen(QUEUE) == 1
    assert json.loads(broker.lindex(QUEUE, 0))["headers"]["task"] == PASS_TASK

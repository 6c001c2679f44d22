"""The agent reports news at once, not at its next beat: a started worker, an ended one,
and a desired state the portal's watch says has changed (docs/protocol.md section 2a).

The beat is set to 30 s, so anything seen within a few seconds came from the news."""

from __future__ import annotations

import time

from agents.gpu import fake_uuid
from tests.agents.conftest import wait_until
from tests.agents.fake_portal import run_entry

GPU0 = fake_uuid("gpu-node-07", 0)
SLOW_BEAT = 30.0


def first_report(portal, key, state):
    """When an accepted heartbeat first reported `key` in `state` (None if none did)."""
    for request in portal.accepted_heartbeats():
        if any(w["key"] == key and w["state"] == state for w in request.body["workers"]):
            return request.at
    return None


def test_a_started_worker_is_reported_without_waiting_for_the_beat(portal, start_agent):
    portal.heartbeat_interval_s = SLOW_BEAT
    portal.run["42.0.0"] = run_entry("42.0.0", ["sleep", "30"], gpus=[GPU0])
    start_agent(heartbeat_interval_s=SLOW_BEAT)

    at = wait_until(lambda: first_report(portal, "42.0.0", "running"), 10, "the start reported")
    assert at - portal.heartbeats()[0].at < 5
    assert len(portal.heartbeats()) == 2  # the first beat, then the start's own


def test_an_ended_worker_is_reported_at_once(portal, start_agent):
    portal.heartbeat_interval_s = SLOW_BEAT
    portal.run["43.0.0"] = run_entry("43.0.0", ["sh", "-c", "sleep 1; exit 4"], gpus=[GPU0])
    start_agent(heartbeat_interval_s=SLOW_BEAT)

    running = wait_until(lambda: first_report(portal, "43.0.0", "running"), 10, "running")
    exited = wait_until(lambda: first_report(portal, "43.0.0", "exited"), 10, "the exit reported")
    assert 0.9 < exited - running < 5
    assert portal.last_report("43.0.0")["exit_code"] == 4


def test_a_change_the_watch_reports_is_fetched_at_once(portal, start_agent):
    portal.heartbeat_interval_s = SLOW_BEAT
    portal.watch_version = 0
    start_agent(heartbeat_interval_s=SLOW_BEAT)
    wait_until(lambda: portal.watches(), 10, "the agent to watch")
    assert portal.watches()[0].body["since"] == 0
    assert portal.watches()[0].headers["Authorization"] == "Bearer wt_good"

    portal.run["44.0.0"] = run_entry("44.0.0", ["sleep", "30"], gpus=[GPU0])
    changed_at = time.monotonic()
    portal.bump_watch()

    at = wait_until(lambda: first_report(portal, "44.0.0", "running"), 10, "the new worker run")
    assert at - changed_at < 5
    # It watches again from the version the woken beat brought back.
    wait_until(lambda: any(w.body["since"] == 1 for w in portal.watches()), 10, "watch from 1")


def test_the_watch_timing_out_changes_nothing(portal, start_agent):
    portal.heartbeat_interval_s = SLOW_BEAT
    portal.watch_version = 5
    portal.watch_timeout_s = 0.2
    start_agent(heartbeat_interval_s=SLOW_BEAT)

    wait_until(lambda: len(portal.watches()) >= 4, 10, "a few timed-out watches")
    assert len(portal.heartbeats()) == 1
    assert {w.body["since"] for w in portal.watches()} == {5}


def test_a_failing_watch_leaves_the_beat_alone(portal, start_agent):
    portal.watch_version = 0
    portal.watch_timeout_s = 0.1
    start_agent()  # beats every 0.1 s
    wait_until(lambda: portal.watches(), 10, "the agent to watch")
    portal.watch_version = None  # the portal's answers no longer offer a watch
    seen = len(portal.accepted_heartbeats())
    wait_until(lambda: len(portal.accepted_heartbeats()) >= seen + 5, 10, "beats go on")

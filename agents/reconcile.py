"""Desired state vs. actual workers: what to start and what to stop. Pure, so it is easy to test."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from agents.workers import RUNNING, STARTING, StopOrder, WorkerSpec, WorkerStatus, key_order


@dataclass(frozen=True)
class ReconcilePlan:
    start: tuple[WorkerSpec, ...] = ()
    stop: tuple[StopOrder, ...] = ()


def plan_reconcile(
    run: Mapping[str, WorkerSpec],
    stop: Mapping[str, StopOrder],
    local: Mapping[str, WorkerStatus],
    *,
    finished: Collection[str] = (),
    max_starts: int,
) -> ReconcilePlan:
    """Return the starts and stops that move this node towards the portal's desired state.

    Rules, from docs/protocol.md section 2:

    1. A running worker named in ``stop`` gets that entry's signal and grace
       period, even if ``run`` still lists it (stop wins).
    2. A running worker in neither ``run`` nor ``stop`` gets SIGTERM and 30 s.
    3. A worker in ``run`` that this node does not have (not running, not
       starting, not exited awaiting ack, not finished and acknowledged) is
       started, in (job, attempt, rank) order, while fewer than ``max_starts``
       starts are in flight. Nothing is ever started twice.

    Workers already stopping are left alone, so a checkpoint signal is sent
    once; starting workers are stopped once they run.
    """
    stops = [
        stop.get(key) or StopOrder(key, reason="not in the desired state")
        for key, status in local.items()
        if status.state == RUNNING and (key in stop or key not in run)
    ]
    in_flight = sum(1 for status in local.values() if status.state == STARTING)
    wanted = [
        spec
        for key, spec in run.items()
        if key not in local and key not in finished and key not in stop
    ]
    wanted.sort(key=lambda spec: key_order(spec.key))
    room = max(0, max_starts - in_flight)
    return ReconcilePlan(
        start=tuple(wanted[:room]), stop=tuple(sorted(stops, key=lambda s: key_order(s.key)))
    )

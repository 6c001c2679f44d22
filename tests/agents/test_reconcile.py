"""The reconcile rules of docs/protocol.md, as a table of small scenarios."""

from __future__ import annotations

import signal

from agents.reconcile import plan_reconcile
from agents.workers import EXITED, RUNNING, STARTING, STOPPING, StopOrder, WorkerStatus
from tests.agents.conftest import make_spec


def desired(*keys):
    return {key: make_spec(key) for key in keys}


def local(**states):
    return {
        key.replace("_", "."): WorkerStatus(key.replace("_", "."), state)
        for key, state in states.items()
    }


def plan(run=(), stop=None, have=None, finished=(), max_starts=4):
    return plan_reconcile(
        desired(*run), stop or {}, have or {}, finished=finished, max_starts=max_starts
    )


def test_missing_workers_start_in_rank_order():
    result = plan(run=("7.0.10", "7.0.2", "7.0.0"))
    assert [s.key for s in result.start] == ["7.0.0", "7.0.2", "7.0.10"]
    assert result.stop == ()


def test_workers_it_has_are_left_alone():
    result = plan(run=("7.0.0",), have=local(**{"7_0_0": RUNNING}))
    assert result.start == () and result.stop == ()


def test_exited_or_acknowledged_workers_are_never_started_again():
    result = plan(run=("7.0.0", "7.0.1"), have=local(**{"7_0_0": EXITED}), finished={"7.0.1"})
    assert result.start == ()


def test_starts_are_capped_by_those_in_flight():
    result = plan(
        run=("1.0.0", "1.0.1", "1.0.2", "1.0.3"), have=local(**{"1_0_0": STARTING}), max_starts=2
    )
    assert [s.key for s in result.start] == ["1.0.1"]


def test_stop_entry_uses_its_signal_and_wins_over_run():
    order = StopOrder("7.0.0", signal.SIGUSR1, 90, "preempted")
    result = plan(run=("7.0.0",), stop={"7.0.0": order}, have=local(**{"7_0_0": RUNNING}))
    assert result.stop == (order,)
    assert result.start == ()


def test_unwanted_worker_gets_sigterm_and_30_s():
    (order,) = plan(have=local(**{"9_0_0": RUNNING})).stop
    assert (order.key, order.signal, order.grace_s) == ("9.0.0", signal.SIGTERM, 30.0)


def test_stopping_starting_and_exited_workers_are_not_signalled_again():
    have = local(**{"1_0_0": STOPPING, "2_0_0": STARTING, "3_0_0": EXITED})
    stop = {k: StopOrder(k) for k in ("1.0.0", "2.0.0", "3.0.0")}
    assert plan(stop=stop, have=have).stop == ()


def test_stop_entry_for_a_worker_it_never_had_starts_nothing():
    result = plan(run=("5.0.0",), stop={"5.0.0": StopOrder("5.0.0")})
    assert result.start == () and result.stop == ()

"""Worker specs, stop orders and helpers: what the portal sends is validated before it is trusted."""

from __future__ import annotations

import signal

import pytest

from agents.workers import StopOrder, WorkerSpec, exit_code_of, parse_signal, tail_text
from tests.agents.fake_portal import run_entry


def test_run_entry_becomes_a_spec_with_the_gang_env():
    spec = WorkerSpec.from_json(
        run_entry("42.1.3", ["python", "train.py"], world_size=4, env={"EPOCHS": 3})
    )
    assert (spec.job_id, spec.attempt, spec.rank, spec.world_size) == (42, 1, 3, 4)
    assert spec.command == ("python", "train.py")
    assert spec.env == {"EPOCHS": "3"}
    assert spec.gang_env() == {
        "BERTH_JOB_ID": "42",
        "BERTH_ATTEMPT": "1",
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "gpu-node-05",
        "MASTER_PORT": "29500",
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"key": "../../etc"}, "malformed worker key"),
        ({"key": "42.0.3; rm -rf /"}, "malformed worker key"),
        ({"job_id": "42"}, "job_id"),
        ({"rank": 1}, "does not match"),
        ({"world_size": 0, "rank": 0, "key": "42.0.0"}, "outside world_size"),
        ({"command": "python train.py"}, "command"),
        ({"gpu_uuids": [1, 2]}, "gpu_uuids"),
        ({"master_port": "29500"}, "master_port"),
    ],
)
def test_malformed_run_entries_are_rejected(change, message):
    entry = run_entry("42.0.0", ["true"]) | change
    with pytest.raises(ValueError, match=message):
        WorkerSpec.from_json(entry)


def test_stop_entry_carries_signal_and_grace():
    order = StopOrder.from_json(
        {"key": "41.1.0", "signal": "SIGUSR1", "grace_period_s": 120, "reason": "preempted"}
    )
    assert order == StopOrder("41.1.0", signal.SIGUSR1, 120.0, "preempted")


@pytest.mark.parametrize("value", ["SIGSTOP", "SIGBOGUS", None, True, {"x": 1}])
def test_unusable_stop_signals_are_rejected(value):
    with pytest.raises(ValueError):
        parse_signal(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("SIGTERM", signal.SIGTERM), ("usr1", signal.SIGUSR1), (9, signal.SIGKILL)],
)
def test_signal_spellings(value, expected):
    assert parse_signal(value) == expected


def test_exit_codes_of_signals_are_128_plus_n():
    assert exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGTERM) == 143


def test_log_tail_is_bounded_and_starts_at_a_line():
    data = b"".join(b"line %05d\n" % i for i in range(5000))
    tail = tail_text(data, 8192)
    assert len(tail.encode()) <= 8192
    assert tail.startswith("line ") and tail.endswith("line 04999\n")


def test_log_tail_stays_bounded_with_invalid_utf8():
    tail = tail_text(b"\xff" * 20000, 8192)
    assert len(tail.encode()) <= 8192


def test_log_tail_never_carries_a_nul_the_portal_would_refuse():
    """A job that prints NUL must not get its node's heartbeats refused (400)."""
    tail = tail_text(b"ok\x00" * 4000, 8192)
    assert "\x00" not in tail and tail.endswith("ok\ufffd")
    assert len(tail.encode()) <= 8192


def test_stop_entry_with_an_unusable_signal_still_stops_with_sigterm():
    order = StopOrder.from_json(
        {"key": "41.1.0", "signal": "SIGSTOP", "grace_period_s": -1, "reason": "cancelled"}
    )
    assert (order.signal, order.grace_s) == (signal.SIGTERM, 30.0)
    assert order.reason.startswith("cancelled; signal SIGSTOP cannot be used")


def test_rejected_worker_keys_are_read_from_the_error_fields():
    from agents.agent import rejected_worker_keys

    error = {
        "fields": {
            "workers": ["Not this node's worker: 42.0.3", "7.1.0", "Malformed worker key 'x.1'."]
        }
    }
    assert rejected_worker_keys(error) == {"42.0.3", "7.1.0"}
    assert rejected_worker_keys({"fields": {"gpus": ["GPU-1.2.3"]}}) == set()
    assert rejected_worker_keys({}) == set()

"""The batcher of a web process (portal/core/batcher.py), with threads and a flush
that records its batches; no database (tests/api/test_submit_batches.py stores
real submissions through it)."""

from __future__ import annotations

import threading
import time

import pytest

from portal.core.batcher import Batcher, Busy, Interrupted

WAIT = 30  # seconds a step may take at most on a loaded machine; never a measurement


class Recorder:
    """A flush that records each batch; the first one waits until `release` is set,
    so that the test can queue items behind it."""

    def __init__(self, outcome=lambda item: item * 10):
        self.batches, self.outcome = [], outcome
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, items):
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(WAIT)
        return [self.outcome(item) for item in items]


def in_thread(batcher: Batcher, item, results: dict) -> threading.Thread:
    def run():
        try:
            results[item] = batcher.run(item)
        except BaseException as exc:  # noqa: BLE001 — the test looks at what each got
            results[item] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def until(condition) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.001)


def plugged(batcher: Batcher, flush: Recorder, items, results) -> list[threading.Thread]:
    """Item 0 alone in the first batch, held there; then `items` queued behind it."""
    threads = [in_thread(batcher, 0, results)]
    assert flush.entered.wait(WAIT)
    threads += [in_thread(batcher, item, results) for item in items]
    until(lambda: len(batcher._queue) == len(items))
    return threads


def test_items_queued_during_a_flush_are_stored_together_each_with_its_outcome():
    flush = Recorder()
    batcher = Batcher(flush, max_batch=64, max_wait_s=0)
    results = {}
    threads = plugged(batcher, flush, [1, 2, 3, 4], results)
    flush.release.set()
    for t in threads:
        t.join(WAIT)
    assert flush.batches[0] == [0]
    assert sorted(flush.batches[1]) == [1, 2, 3, 4] and len(flush.batches) == 2
    assert results == {0: 0, 1: 10, 2: 20, 3: 30, 4: 40}


def test_a_batch_holds_at_most_max_batch_items():
    flush = Recorder()
    batcher = Batcher(flush, max_batch=2, max_wait_s=0)
    results = {}
    threads = plugged(batcher, flush, [1, 2, 3, 4, 5], results)
    flush.release.set()
    for t in threads:
        t.join(WAIT)
    assert [len(b) for b in flush.batches] == [1, 2, 2, 1]
    assert results == {i: i * 10 for i in range(6)}


def test_one_items_exception_is_raised_by_its_caller_only():
    def outcome(item):
        return ValueError(f"bad {item}") if item == 2 else item

    flush = Recorder(outcome)
    batcher = Batcher(flush, max_wait_s=0)
    results = {}
    threads = plugged(batcher, flush, [1, 2, 3], results)
    flush.release.set()
    for t in threads:
        t.join(WAIT)
    assert isinstance(results.pop(2), ValueError)
    assert results == {0: 0, 1: 1, 3: 3}


def test_a_full_queue_refuses_at_once_with_busy():
    flush = Recorder()
    batcher = Batcher(flush, max_queue=2, max_wait_s=0)
    results = {}
    threads = plugged(batcher, flush, [1, 2], results)
    with pytest.raises(Busy) as refused:
        batcher.run(3)
    assert refused.value.retry_after >= 1
    flush.release.set()
    for t in threads:
        t.join(WAIT)
    assert results == {0: 0, 1: 10, 2: 20}  # the refused item was never flushed
    assert 3 not in [i for b in flush.batches for i in b]


def test_a_leader_stopped_before_its_batch_is_stored_answers_nobody_with_a_result():
    """SystemExit in the flush (a worker being stopped): the leader's thread gets it,
    every other caller in the batch gets Interrupted, none a result."""
    stored = []

    def flush(items):
        if 9 in items:
            raise SystemExit(1)
        stored.extend(items)
        return list(items)

    gate = Recorder(lambda item: item)
    batcher = Batcher(lambda items: gate(items) if not gate.batches else flush(items), max_wait_s=0)
    results = {}
    threads = plugged(batcher, gate, [9, 8, 7], results)
    gate.release.set()
    for t in threads:
        t.join(WAIT)
    assert stored == []
    outcomes = [results[i] for i in (9, 8, 7)]
    assert sum(isinstance(o, SystemExit) for o in outcomes) == 1  # the leader's own
    assert sum(isinstance(o, Interrupted) for o in outcomes) == 2


def test_a_leader_waits_for_a_request_on_its_way():
    """A thread inside coming() is waited for (up to max_wait_s): its item joins the
    leader's batch instead of starting the next one."""
    flush = Recorder(lambda item: item)
    flush.entered.set()
    flush.release.set()
    batcher = Batcher(flush, max_wait_s=WAIT)
    on_its_way, go = threading.Event(), threading.Event()
    results = {}

    def later():
        with batcher.coming():
            on_its_way.set()
            assert go.wait(WAIT)
            results["later"] = batcher.run("later")

    other = threading.Thread(target=later)
    other.start()
    assert on_its_way.wait(WAIT)
    first = in_thread(batcher, "first", results)
    until(lambda: len(batcher._queue) == 1)
    go.set()
    for t in (first, other):
        t.join(WAIT)
    assert flush.batches == [["first", "later"]]
    assert results == {"first": "first", "later": "later"}


def test_nobody_is_waited_for_once_they_leave_without_an_item():
    flush = Recorder(lambda item: item)
    flush.entered.set()
    flush.release.set()
    batcher = Batcher(flush, max_wait_s=WAIT)
    with batcher.coming():
        pass  # a request refused before it stored anything
    assert batcher.run("alone") == "alone"
    assert flush.batches == [["alone"]]

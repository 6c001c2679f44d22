"""Gather concurrent requests of one web process into batches: a maximum batch size,
a maximum wait, a bounded queue and backpressure.

The threads of a web process (gunicorn's gthread worker) that store a submission at
about the same time hand their rows to one Batcher; one of them, the leader, stores
the batch with one statement and one commit (`flush`) and hands every thread its own
outcome, and only then does each answer its client. So an answer still means "stored
and committed": if the process dies before the commit, no thread has answered.

The leader is a caller's thread, not a thread of the batcher's own: a batch of one,
when nobody else is storing, costs what storing alone did (no hand-over between
threads), and the leader's database connection is the one Django gave its request.
How it works (flat combining, as in Hendler et al., "Flat combining and the
synchronization-parallelism tradeoff", SPAA 2010; PostgreSQL's group commit does the
same with WAL flushes):

1. A caller appends its item to the queue; if no thread leads, it leads.
2. The leader waits at most `max_wait_s`, and only while more callers have said they
   are coming (`coming()`) and the batch is not full, then takes up to `max_batch`
   items off the queue.
3. It runs `flush(items)` (no lock held: others keep queueing), which returns one
   outcome per item (a value, or an exception that item's caller raises).
4. It hands each thread its outcome; if items are left, the first of them leads next
   (its thread wakes up as the leader), else nobody leads.

While one batch is stored, the next one gathers: under load the batches grow by
themselves, without any wait. When `max_queue` items already wait, a new one is
refused with Busy (the API answers 429 with Retry-After).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any


class Busy(Exception):
    """The batcher's queue is full: retry after `retry_after` seconds."""

    retry_after = 1

    def __init__(self):
        super().__init__("The server is storing as many submissions as it can; retry in a second.")


class Interrupted(Exception):
    """The batch this item was in was interrupted before it was committed (the leader
    was stopped: SystemExit, KeyboardInterrupt): nothing of it was stored."""


class _Ticket:
    __slots__ = ("item", "outcome", "lead", "ready")

    def __init__(self, item):
        self.item, self.outcome, self.lead = item, None, False
        self.ready = threading.Event()

    def result(self):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class _Arrival:
    __slots__ = ("arrived",)

    def __init__(self):
        self.arrived = False


class Batcher:
    """Run `flush` on batches of the items callers pass to `run` (see the module)."""

    def __init__(
        self,
        flush: Callable[[list], list[Any]],
        *,
        max_batch: int = 64,
        max_wait_s: float = 0.002,
        max_queue: int = 1024,
    ):
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0:
            raise ValueError("Batcher: max_batch and max_queue ≥ 1, max_wait_s ≥ 0")
        self.flush, self.max_batch, self.max_wait_s = flush, max_batch, max_wait_s
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[_Ticket] = deque()
        self._leading = False
        self._coming = 0
        self._local = threading.local()
        self.batches = 0  # how many flushes ran, and their items: for tests and benchmarks
        self.items = 0

    @contextlib.contextmanager
    def coming(self) -> Iterator[_Arrival]:
        """Say that this thread will probably `run` an item soon (a request being read
        and validated): a leader waits for it, up to max_wait_s, until it runs its
        item or leaves the block."""
        arrival = self._local.arrival = _Arrival()
        with self._lock:
            self._coming += 1
        try:
            yield arrival
        finally:
            self._local.arrival = None
            if not arrival.arrived:
                with self._lock:
                    self._coming -= 1
                    self._changed.notify_all()

    def run(self, item):
        """Store `item` with whatever else is queued; return its outcome or raise its
        exception. Busy when the queue is full. Inside `coming()`, this thread stops
        counting as coming."""
        ticket = _Ticket(item)
        arrival = getattr(self._local, "arrival", None)
        with self._lock:
            if arrival is not None and not arrival.arrived:
                arrival.arrived = True
                self._coming -= 1
            if len(self._queue) >= self.max_queue:
                raise Busy()
            self._queue.append(ticket)
            lead = not self._leading
            self._leading = True
            if len(self._queue) >= self.max_batch or self._coming == 0:
                self._changed.notify_all()
        if not lead:
            ticket.ready.wait()
        if lead or ticket.lead:
            self._lead()
        return ticket.result()

    def _lead(self) -> None:
        batch = self._gather()
        try:
            outcomes = self.flush([t.item for t in batch])
        except Exception as exc:  # noqa: BLE001 — a bug in flush: every item raises it
            outcomes = [exc] * len(batch)
        except BaseException:
            self._hand_out(batch, [Interrupted()] * len(batch))
            raise
        self._hand_out(batch, outcomes)

    def _gather(self) -> list[_Ticket]:
        """Wait for the batch to fill while callers are coming, at most max_wait_s;
        take it off the queue."""
        deadline = time.monotonic() + self.max_wait_s
        with self._lock:
            while len(self._queue) < self.max_batch and self._coming > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            n = min(self.max_batch, len(self._queue))
            return [self._queue.popleft() for _ in range(n)]

    def _hand_out(self, batch: list[_Ticket], outcomes: list) -> None:
        if len(outcomes) != len(batch):
            outcomes = [RuntimeError("flush returned the wrong number of outcomes")] * len(batch)
        with self._lock:
            self.batches += 1
            self.items += len(batch)
            if self._queue:
                nxt = self._queue[0]
                nxt.lead = True
                nxt.ready.set()
            else:
                self._leading = False
        for ticket, outcome in zip(batch, outcomes, strict=True):
            ticket.outcome = outcome
            ticket.ready.set()

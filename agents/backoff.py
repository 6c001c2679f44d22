"""Retry delays for talking to the portal."""

from __future__ import annotations

import random
from collections.abc import Callable

# Never wait longer than this for a Retry-After, whatever the server says.
MAX_RETRY_AFTER_S = 300.0


class Backoff:
    """Exponential backoff with "equal jitter": half the delay fixed, half random.

    The random half keeps a fleet of agents that lost the portal together from
    retrying in lockstep; the fixed half keeps every retry from being immediate.
    A server's Retry-After is a floor, never shortened.
    """

    def __init__(
        self, base_s: float = 1.0, cap_s: float = 30.0, rng: Callable[[], float] = random.random
    ):
        self.base_s = base_s
        self.cap_s = cap_s
        self._rng = rng
        self.failures = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        delay = ceiling / 2 + self._rng() * ceiling / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S))
        return delay

    def reset(self) -> None:
        self.failures = 0

"""Requeue backoff: when a job put back in the queue may be admitted again.

A preempted borrower that is requeued with its original submit time is
admitted again at once into the same briefly idle quota, and reclaimed again
by the next job of the lender: in trace replays one job was preempted
thousands of times (docs/simulation.md). So the n-th requeue of a job (after a
preemption or a lost node) holds it back for

    delay(n) = min(base * 2^(n-1), max)

seconds: Kueue's `waitForPodsReady.requeuingStrategy`, whose
`backoffBaseSeconds` (default 60) and `backoffMaxSeconds` (default 3600) give
60 s, 120 s, 240 s, ... Kueue adds a small random jitter; Berth does not, so
replays stay deterministic. The caller that requeues the job (the portal's
requeue action, the simulator) sets `PendingJob.eligible_at = requeued at +
delay(n)`; the pass does not consider the job before then (reason `backoff`).
"""

from __future__ import annotations

DEFAULT_BASE_S = 60.0  # Kueue's backoffBaseSeconds default
DEFAULT_MAX_S = 3600.0  # Kueue's backoffMaxSeconds default
# 2^62 s is beyond any max; capping the exponent keeps the float finite.
_MAX_EXPONENT = 62


def requeue_backoff(
    requeues: int, base: float = DEFAULT_BASE_S, most: float = DEFAULT_MAX_S
) -> float:
    """Return how many seconds a job requeued for the `requeues`-th time waits.

    0 before any requeue or with a base of 0 (backoff off).
    """
    if requeues < 1 or base <= 0:
        return 0.0
    return min(base * 2.0 ** min(requeues - 1, _MAX_EXPONENT), most)

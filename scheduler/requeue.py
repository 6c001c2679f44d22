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

The reclaim backoff (Kueue KEP-14468, `PolicyConfig.reclaim_backoff`, off by default)
applies the same delay to a team and flavor instead of a job: after the team's
borrowing of a flavor was reclaimed for the n-th time in a row, its jobs that would
borrow that flavor wait `delay(n)` from that reclaim (reason `backoff`); its jobs
within its nominal quota never wait. A reclaim counts as the next one in a row if it
comes within `RECLAIM_RESET_S` (KEP-14468's `backoffResetSeconds`, 600 s) after the
previous cooldown ended, else the count starts again at 1; a reclaim during the
cooldown (of jobs that borrowed before it began) changes nothing. The KEP says only
that the count restarts if the pair is not reclaimed again within the reset time;
counting it from the cooldown's end (so that cooldowns longer than 600 s can still
grow) and ignoring reclaims during a cooldown are Berth's reading. The callers that
apply plans (the portal's pass with `BERTH_RECLAIM_BACKOFF`, the simulator, the tests'
multi-pass driver) keep the count with `count_reclaims` over `reclaim_victims` and hand
it to the pass in `Team.reclaims`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import JobId, Plan, RunningJob

RECLAIM = "reclaim"  # Preemption.reason_code of a reclaim (scheduler.preemption)

DEFAULT_BASE_S = 60.0  # Kueue's backoffBaseSeconds default
DEFAULT_MAX_S = 3600.0  # Kueue's backoffMaxSeconds default
RECLAIM_RESET_S = 600.0  # KEP-14468's backoffResetSeconds default
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


def reclaim_cooldown_end(reclaims: int, at: float) -> float:
    """Return when a team's borrowing of a flavor, reclaimed `reclaims` times in a row,
    the last at `at`, may borrow that flavor again."""
    return at + requeue_backoff(reclaims)


def reclaim_count_end(reclaims: int, at: float) -> float:
    """Return until when a reclaim of that team and flavor counts as the next one in a
    row (RECLAIM_RESET_S after the cooldown's end); after it the count starts again at 1."""
    return reclaim_cooldown_end(reclaims, at) + RECLAIM_RESET_S


def reclaim_victims(plan: Plan) -> list[JobId]:
    """Return the jobs the plan stops to reclaim borrowed quota: its preemptions of
    reason `reclaim` (a priority preemption within a queue is not a reclaim). The caller
    counts one reclaim per team and flavor of theirs (count_reclaims)."""
    return [p.job_id for p in plan.preemptions if p.reason_code == RECLAIM]


def reclaimed(plan: Plan, running: Mapping[JobId, RunningJob]) -> list[tuple[str, str]]:
    """Return the (team, flavor) of each of the plan's reclaim victims, `running` by id
    (the simulator's and the tests' driver's view; the portal asks its rows)."""
    return [(running[v].team, running[v].flavor) for v in reclaim_victims(plan)]


def count_reclaims(
    state: dict[tuple[str, str], tuple[int, float]],
    pairs: Iterable[tuple[str, str]],
    now: float,
) -> list[tuple[str, str]]:
    """Count a reclaim at `now` of each (team, flavor) of `pairs` in `state` ((team,
    flavor) -> (reclaims in a row, when the last was)), in place; return the pairs whose
    cooldown it started (when it ends: reclaim_cooldown_end)."""
    started = []
    for pair in sorted(set(pairs)):
        before = state.get(pair)
        if before is not None:
            ends = reclaim_cooldown_end(*before)
            if now < ends:
                continue  # jobs that borrowed before the cooldown began: not a new reclaim
            count = before[0] + 1 if now <= reclaim_count_end(*before) else 1
        else:
            count = 1
        state[pair] = (count, now)
        started.append(pair)
    return started


def team_reclaims(
    state: Mapping[tuple[str, str], tuple[int, float]], now: float
) -> dict[str, dict[str, tuple[int, float]]]:
    """Return team -> flavor -> (reclaims in a row, when the last was) of the pairs whose
    cooldown has not ended at `now` (Team.reclaims); the others hold nothing back."""
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for (team, flavor), (count, at) in state.items():
        if reclaim_cooldown_end(count, at) > now:
            out.setdefault(team, {})[flavor] = (count, at)
    return out

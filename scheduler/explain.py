"""Explain: a verdict for every pending job the pass did not admit.

Each verdict carries the reason code (scheduler.reasons), a sentence with the
numbers that matter, the job's position in its queue, and an estimated start.

Estimated starts come from a shadow projection, one per flavor, that is fast
because it ignores placement and quota: it replays the end estimates of the
running jobs and of the jobs admitted in this pass, counting GPUs only, and
starts the waiting jobs in pass order, each once enough GPUs of its flavor are
free and never before the job before it (so a small job that backfill might
start early gets a pessimistic estimate). A gang starts no earlier than its
workers fit whole on nodes by the backfill projection (_whole_workers). A job
with a reservation starts no earlier than it; a job waiting for preemption no
earlier than its victims'
grace periods end; a job over its GPU-hour budget when the budget resets
(_budget_start); a job in its requeue backoff, last in pass order, no
earlier than it becomes eligible; a job waiting for its previous attempt to
stop, after those, once GPUs are free for it; a task of a job array over its
`%N` limit no earlier than a task of its array ends (scheduler.arrays.Slots). Jobs
that can never fit get None.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from .arrays import Slots
from .backfill import (
    CLAIM_HOLD,
    COHORT_HOLD,
    DUE_NOW,
    NO_ROOM,
    OWN_HOLD,
    QUOTA_CLAIMED,
    QUOTA_KEPT,
    QUOTA_REFUSES,
    RESERVED_QUOTA,
    Backfill,
    projection,
    reserve,
    room_steps,
)
from .model import PendingJob, Verdict
from .ordering import queue_key
from .reasons import (
    ARRAY_LIMIT,
    BACKOFF,
    BUDGET_EXHAUSTED,
    CAPACITY,
    COHORT_BUSY,
    FIFO_BLOCKED,
    FRAGMENTED,
    NEVER_FITS,
    NO_CAPACITY,
    NO_NODES,
    PLACED,
    PREVIOUS_ATTEMPT,
    PRIORITY,
    QUOTA,
    REASONS,
    RESERVED,
    TOPOLOGY,
    WAITING_FOR_PREEMPTION,
    Wait,
)
from .timewords import duration, instant
from .words import gpus

if TYPE_CHECKING:
    from .core import Pass


def verdicts(p: Pass) -> tuple[Verdict, ...]:
    """Return one verdict per waiting job, in pass order."""
    waiting = p.waiting()
    positions = queue_positions(p.queued, p.waits)
    if not p.config.explain:
        return tuple(
            Verdict(j.id, p.waits[j.id].code, REASONS[p.waits[j.id].code], positions[j.id], None)
            for j in waiting
        )
    starts = estimate_starts(p, waiting)
    out = []
    for job in waiting:
        wait, pos = p.waits[job.id], positions[job.id]
        out.append(Verdict(job.id, wait.code, message(p, job, wait, pos), pos, starts[job.id]))
    return tuple(out)


def queue_positions(pending: list[PendingJob], waits: dict) -> dict[int, int]:
    """Return each waiting job's 1-based rank among the waiting jobs of its (team, queue).

    `pending` is in queue order (ordering.queue_key); jobs admitted in this
    pass no longer count, so positions match the queue after the plan is applied.
    """
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for job in pending:
        if job.id not in waits:
            continue
        key = (job.team, job.queue)
        seen[key] = out[job.id] = seen.get(key, 0) + 1
    return out


class Shadow:
    """Free GPUs of one flavor over time, counted, for estimated starts."""

    __slots__ = ("free", "releases", "clock", "most")

    def __init__(self, p: Pass, flavor: str) -> None:
        pool = p.pools[flavor]
        self.free = pool.index.total + (sum(pool.held.values()) if pool.holding else 0)
        if pool.stops is not None:  # free GPUs reserved for preemptors (scheduler.state.Stops)
            self.free += pool.stops.hidden_total
        rel = [(r.end, sum(k for _, k in r.nodes)) for r in p.running_in(flavor) if r.nodes]
        rel += [(a.end, a.gpus) for a in p.admitted.get(flavor, ())]
        heapify(rel)
        self.releases = rel
        self.clock = p.now
        self.most = self.free + sum(k for _, k in rel)  # all that can ever be free

    def start(self, gpus: int, runtime: float, floor: float) -> float | None:
        """Return when a job of `gpus` GPUs starts, not before `floor`, and book it."""
        if gpus > self.most:
            return None
        while self.free < gpus:
            t, k = heappop(self.releases)
            self.free += k
            self.clock = max(self.clock, t)
        self.clock = max(self.clock, floor)
        self.free -= gpus
        heappush(self.releases, (self.clock + runtime, gpus))
        return self.clock


def estimate_starts(p: Pass, waiting: list[PendingJob]) -> dict[int, float | None]:
    """Return the estimated start of each waiting job (see the module doc)."""
    shadows: dict[str, Shadow] = {}
    gate = p.gate
    reserved = {res.job.id: res.start for f in gate.reservations for res in gate.held_for(f)}
    placed = set(reserved)  # GPU reservations: their GPUs are placed already
    for res in (*gate.quota_holds.values(), *gate.cohort_holds.values()):
        start = (res.whole or res).start if res.nodes == COHORT_HOLD else res.start
        reserved[res.job.id] = max(start, reserved.get(res.job.id, p.now))  # backfill._whole
    out: dict[int, float | None] = {}
    cooling = isinstance(gate, Backfill) and gate.reclaim_backoff  # for jobs told a hold first
    slots = None  # scheduler.arrays.Slots, built for the first task over its array's limit
    wholes: dict = {}  # gang shape -> when its workers fit whole (_whole_workers)
    quota_back: dict = {"biggest": {}, "ends": {}}  # (holder, kind, team) -> its replay
    biggest = quota_back["biggest"]  # (holder, kind, team) -> the largest job it holds
    for job in waiting:
        wait = p.waits[job.id]
        if wait.code == RESERVED and wait.info[2] in _QUOTA_HELD:
            key = (wait.info[0], wait.info[2], job.team)
            biggest[key] = max(biggest.get(key, 0), job.gpus)
    for job in waiting:
        wait = p.waits[job.id]
        if wait.code in (NEVER_FITS, NO_NODES) or job.flavor not in p.pools:
            out[job.id] = None
            continue
        shadow = shadows.get(job.flavor)
        if shadow is None:
            shadow = shadows[job.flavor] = Shadow(p, job.flavor)
        floor = reserved.get(job.id, p.now)
        if wait.code == WAITING_FOR_PREEMPTION:
            floor = max(floor, wait.info[1])
        elif wait.code == BACKOFF and len(wait.info) > 2:  # its team's reclaim backoff
            floor = max(floor, _cooled(p, job, wait.info[0]))
        elif wait.code == BACKOFF:  # its own requeue backoff
            floor = max(floor, wait.info[0])
        elif wait.code == BUDGET_EXHAUSTED:
            out[job.id] = _budget_start(job, *wait.info)
            continue
        elif wait.code == RESERVED and wait.info[2] in _QUOTA_HELD:
            floor = max(floor, _quota_back_at(p, job, wait.info[:3], quota_back))
        elif wait.code == ARRAY_LIMIT:  # not before a task of its array ends
            slots = slots or Slots(p)
            floor = max(floor, slots.start(job))
        if cooling and wait.code == RESERVED:  # a hold told first: it would borrow then too
            held = gate.reclaim_wait(p, job, p.ledger.book(job.team))
            if held is not None:
                floor = max(floor, _cooled(p, job, held.info[0]))
        start = shadow.start(job.gpus, job.max_runtime, floor)
        if start is not None and (wait.code == WAITING_FOR_PREEMPTION or job.id in placed):
            # Its GPUs are reserved already: it starts when its victims have stopped, or
            # at its GPU reservation, whatever holds the jobs before it in pass order keep
            # them waiting for (it was estimated 10 h away, behind its team's quota hold,
            # and started in 30 s; reserved from +15 s, it was told +99 h behind another
            # team's job waiting for its cohort's quota). Still booked above, so the jobs
            # after it do not count its GPUs.
            start = floor
        elif start is not None and (job.workers > 1 or job.gpus_per_worker > 1):
            # A gang starts once its workers fit whole (after the booking: the jobs after
            # it are not held to it); under a quota or cohort hold too, which keeps quota,
            # not GPUs (a held 1x8 job was told +60 s by count and started in 99 h).
            whole = _whole_workers(p, job, wholes)
            start = None if whole is None else max(start, whole)  # None: no node ever holds it
        out[job.id] = start
    return out


def _whole_workers(p: Pass, job: PendingJob, known: dict) -> float | None:
    """Return when the job's workers fit whole on nodes (in one domain, for a gang), by
    the backfill projection (scheduler.backfill.reserve) after the flavor's reservations;
    None if that never happens (no node will hold them with the GPUs it has: the count
    said "now" for a 1x8 job beside two nodes of 7 healthy GPUs). One per gang shape and
    pass (and one projection per flavor: backfill.projection).

    The shadow counts GPUs; a gang also needs them in whole workers: without this, a job
    waiting `fragmented` was told it starts when enough GPUs are free in pieces.
    """
    key = (job.flavor, job.workers, job.gpus_per_worker)
    if key not in known:
        pool, held = p.pools[job.flavor], p.gate.held_for(job.flavor)
        events = known.get(job.flavor)  # the pass is over: one projection per flavor
        if events is None:
            events = known[job.flavor] = projection(p, pool, held, p.now)
        res = reserve(p, job, pool, held, p.now, events)
        known[key] = None if res is None else res.start
    return known[key]


def _budget_start(
    job: PendingJob, budget, committed: float, need: float, waiting: float
) -> float | None:
    """Return when a job over its budget may start at the earliest: when the budget resets.

    Not booked in the shadow: a job of another team after it in pass order must not
    inherit a start a month away. None for a rolling window (when enough usage leaves
    it is not in the snapshot) and for a job bigger than the whole budget.
    """
    if budget.resets_at is None or need > budget.limit:
        return None
    return budget.resets_at


def message(p: Pass, job: PendingJob, wait: Wait, position: int) -> str:
    """Return the plain sentence for a verdict: what it waits for, with numbers."""
    text = _MESSAGES[wait.code](p, job, *wait.info)
    if position > 1:
        text += f"; {position - 1} job{'s' if position > 2 else ''} ahead in queue {job.team}/{job.queue}"
    res = p.gate.reservations.get(job.flavor)
    if res is not None and res.job.id == job.id:
        text += f"; GPUs on {res.nodes} node(s) are reserved for it from {_at(p, res.start)}"
    if wait.code in CAPACITY:
        text += _promised(p, job)
    return text


def _promised(p: Pass, job: PendingJob) -> str:
    """Return '; 4 free GPUs are reserved for job(s) 7, which wait for ...', or ''.

    A holder may have preempted jobs, or wait without victims for jobs that stop or
    reach their max run time (preemption rule 2): the sentence covers both."""
    pool = p.pools.get(job.flavor)
    stops = pool.stops if pool is not None else None
    if stops is None or not stops.hidden_total:
        return ""
    holders = sorted({h for n, k in stops.hidden.items() if k for h in stops.holders(n)})
    listed = ", ".join(str(h) for h in holders[:5]) + (", ..." if len(holders) > 5 else "")
    return (
        f"; {gpus(stops.hidden_total, 'free')} are reserved for job(s) {listed}, which wait for "
        f"jobs they preempted, or that stop or reach their max run time, to free more GPUs "
        f"beside them"
    )


def _needs(p: Pass, job: PendingJob) -> str:
    """Return 'needs 16 h100 GPUs (2 workers x 8) in one block'."""
    text = f"needs {gpus(job.gpus, job.flavor)}"
    if job.workers > 1:
        text += f" ({job.workers} workers x {job.gpus_per_worker})"
        pool = p.pools.get(job.flavor)
        if pool is not None and job.gpus > pool.max_total:
            text += f" in one {pool.domain_kind}"
    return text


def _team(p: Pass, job: PendingJob) -> str:
    book = p.ledger.book(job.team)
    said = p.said(book, job.flavor)
    return f"team {job.team} uses {_uses(said)} of {book.quota(job.flavor).nominal} nominal"


def _at(p: Pass, t: float) -> str:
    """Return 'now' or the absolute instant (scheduler.timewords.instant), never an
    offset such as '+3593 s': the reader's page or CLI renders it for them."""
    return "now" if t <= p.now else instant(t)


def _uses(said: tuple[int, int]) -> str:
    """Return '12 (4 of them for its jobs waiting for preemption)' or '12' (Pass.said:
    taken when the job was considered, so the two figures are of one moment)."""
    used, charged = said
    return (
        f"{used} ({charged} of them for its jobs waiting for preemption)" if charged else f"{used}"
    )


def _never_fits(p: Pass, job: PendingJob, why: str, *facts) -> str:
    if why == "shape":
        return f"invalid gang shape: {job.workers} workers x {job.gpus_per_worker} GPUs"
    if why == "node":
        return f"{_needs(p, job)}; a worker needs {gpus(job.gpus_per_worker)} but the largest node has {facts[0]}"
    if why == "topology":
        kind = p.pools[job.flavor].domain_kind
        return f"{_needs(p, job)}; the largest {kind} holds {facts[0]} such workers even when empty"
    return f"{_needs(p, job)}; team {job.team} can never hold more than {facts[0]:g} (nominal + all it may borrow)"


def _no_nodes(p: Pass, job: PendingJob) -> str:
    return f"{_needs(p, job)}; no {job.flavor} node is Ready and uncordoned"


def _budget(p: Pass, job: PendingJob, budget, committed: float, need: float, waiting: float) -> str:
    """Return 'team vision used 4,980 of 5,000 h100 GPU-hours this month; resets at …'.

    What its jobs waiting for stopping jobs (a preemptor waiting for its victims) or
    given a start time (a GPU reservation, a quota or cohort hold: Budgets.promise)
    will use is said apart: counted as its running jobs', a team that ran nothing was
    told its running jobs may use 400 more (a review)."""
    when = "this month" if budget.period == "month" else f"in the last {budget.window_days} days"
    text = (
        f"team {job.team} used {_hours(budget.used)} of {_hours(budget.limit)} {job.flavor} "
        f"GPU-hours {when}"
    )
    if need > budget.limit:
        text += (
            f"; this job alone may use {_hours(need)} ({job.gpus} GPUs x "
            f"{duration(job.max_runtime)} max run time), more than the whole budget: it needs a "
            f"shorter max run time, fewer GPUs or a bigger budget"
        )
    elif budget.used < budget.limit:
        this = (
            f"this job up to {_hours(need)} ({job.gpus} GPUs x {duration(job.max_runtime)} "
            f"max run time)"
        )
        may = "" if committed else "may use "
        waits = (
            f"its jobs waiting for stopping jobs or for a reservation {may}{_hours(waiting)} once "
            f"they start"
        )
        if committed and waiting:
            this = f"its running jobs may use {_hours(committed)} more, {waits}, and {this}"
        elif committed:
            this = f"its running jobs may use {_hours(committed)} more and {this}"
        elif waiting:
            this = f"{waits} and {this}"
        text += f"; {this}, which would cross the limit"
    if budget.resets_at is not None:
        return f"{text}; resets at {_at(p, budget.resets_at)}"
    return f"{text}; usage older than {budget.window_days} days leaves the window"


def _hours(x: float) -> str:
    """Return GPU-hours as people read them: '4,980', '12.5', '0.3'."""
    return f"{x:,.0f}" if abs(x) >= 100 or x == int(x) else f"{x:,.1f}"


def _backoff(p: Pass, job: PendingJob, eligible_at: float, requeues: int, *reclaims: float) -> str:
    """Its own requeue backoff, or its team's reclaim backoff (`reclaims`: the reclaims
    in a row, the last one's time; Backfill.cooldowns)."""
    if reclaims:
        count, at = reclaims
        again = "" if count == 1 else f", the {_ordinal(int(count))} reclaim in a row"
        return (
            f"{_needs(p, job)}; it would borrow, and team {job.team}'s borrowed {job.flavor} "
            f"GPUs were reclaimed at {instant(at)}{again}: the team may not borrow "
            f"{job.flavor} again before {_at(p, eligible_at)} (reclaim backoff), though it "
            f"may use its nominal quota"
        )
    if requeues < 1:
        return f"{_needs(p, job)}; not eligible before {_at(p, eligible_at)}"
    return (
        f"{_needs(p, job)}; backing off after its {_ordinal(requeues)} requeue (it was preempted "
        f"or lost its node): eligible again from {_at(p, eligible_at)}, keeping its original "
        f"submit time"
    )


def _previous_attempt(p: Pass, job: PendingJob) -> str:
    return (
        f"{_needs(p, job)}; requeued, it waits for the workers of its previous attempt to stop "
        f"before it is considered again"
    )


def _array_limit(p: Pass, job: PendingJob, array_id: int, limit: int) -> str:
    """The array's tasks holding GPUs (stopping ones too, and those admitted in this pass)
    and, up to its limit, those ahead of it in the queue that took the other slots (their
    turn comes first: scheduler.arrays.beyond_limit); said to be running, a task that
    waited for quota was said to run."""
    running = sum(1 for r in p.running if r.job.array_id == array_id)
    running += sum(1 for started in p.admitted.get(job.flavor, ()) if started.array_id == array_id)
    running = min(running, limit)
    if running == limit:
        return (
            f"{_needs(p, job)}; array {array_id} already has {limit} "
            f"task{'s' if limit != 1 else ''} running, its limit (%{limit}); it starts when "
            f"one of them ends"
        )
    key = queue_key(job)  # tasks behind it that wait for the jobs they preempted go first
    claiming = sum(  # (those admitted in this pass are running above)
        1 for k, i in p.array_claims.get(array_id, ()) if k > key and i in p.waits
    )
    claiming = min(claiming, limit - running)
    return (
        f"{_needs(p, job)}; array {array_id} has {running} task{'s' if running != 1 else ''} "
        f"running and {_ahead(limit - running - claiming, claiming)}, its limit (%{limit}) "
        f"together; it starts when one of them ends"
    )


def _ahead(ahead: int, claiming: int) -> str:
    """Return '2 ahead of it in the queue', '1 waiting for the jobs it preempted', or both."""
    parts = [f"{ahead} ahead of it in the queue"] if ahead or not claiming else []
    if claiming:
        parts.append(
            f"{claiming} waiting for the jobs {'it' if claiming == 1 else 'they'} preempted"
        )
    return " and ".join(parts)


def _ordinal(n: int) -> str:
    """Return '1st', '2nd', '3rd', '4th', ..., '11th', '12th', '13th', '21st'."""
    if n % 100 in (11, 12, 13):
        return f"{n}th"
    return f"{n}{({1: 'st', 2: 'nd', 3: 'rd'}).get(n % 10, 'th')}"


def _fifo_blocked(p: Pass, job: PendingJob, blocker: int, code: str, team: bool = False) -> str:
    if team:  # a team's block (gates.TEAM_QUOTA): other teams' jobs may pass
        return (
            f"{_needs(p, job)}; job {blocker} of team {job.team} ahead of it waits ({code}) "
            f"and no later job of its team may pass it"
        )
    return f"{_needs(p, job)}; job {blocker} ahead of it waits ({code}) and nothing may pass it"


def _waiting(p: Pass, job: PendingJob, ids: tuple, end: float, new: int, ending: int) -> str:
    """Its new victims (the first `new` ids), the other stopping jobs it waits for, and
    the running jobs (the last `ending` ids) that reach their max run time before any
    victim could stop (preemption rule 2: preempting would not free GPUs sooner)."""
    parts = []
    if new:
        parts.append(f"{new} job(s) it preempted ({_listed(ids[:new])})")
    stopping = ids[new : len(ids) - ending]
    if stopping:
        what = "stopping jobs" if not new else f"{len(stopping)} stopping job(s)"
        parts.append(f"{what} ({_listed(stopping)})")
    if ending:
        parts.append(
            f"{ending} job(s) that reach their max run time ({_listed(ids[len(ids) - ending :])})"
        )
    if not parts:
        parts.append("stopping jobs")
    return f"{_needs(p, job)}; waits for {' and '.join(parts)} to free their GPUs by {_at(p, end)}"


def _listed(ids: tuple) -> str:
    return ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")


def _quota(
    p: Pass,
    job: PendingJob,
    used: int,
    nominal: int,
    limit: float,
    room: float,
    extra=(),
    said=(0, 0),
) -> str:
    limit_text = f"{limit:g}" if limit != float("inf") else "unlimited"
    over = said[0] + job.gpus - limit  # its stopping jobs free theirs by themselves
    when = (
        f"would start when {over:g} of its GPUs {'is' if over == 1 else 'are'} freed"
        if over > 0
        else "would start when its stopping jobs have stopped"
    )
    if extra and extra[0] == "cohort":  # and the cohort could not lend it enough then
        then = extra[1]
        when += (
            f"; even then cohort {p.ledger.book(job.team).cohort} could give it only {then:g} "
            f"more, so {job.gpus - then:g} more of the cohort's quota must come free"
        )
    return (
        f"{_needs(p, job)}; team {job.team} uses {_uses(said)} of {nominal} "
        f"nominal and may hold at most {limit_text}; {when}"
    )


def _cohort_busy(
    p: Pass,
    job: PendingJob,
    used: int,
    nominal: int,
    limit: float,
    room: float,
    extra=(),
    said=(0, 0),
) -> str:
    if extra and extra[0] == "kept" and extra[2:3] == (PLACED,):  # which GPUs bind
        return (
            f"{_needs(p, job)}; team {job.team} uses {_uses(said)} of {nominal} nominal; of "
            f"the {gpus(extra[3], 'free')}, the ones it would be placed on are kept for teams "
            f"within their nominal quota whose jobs wait for them in this pass and fit no others"
        )
    if extra and extra[0] == "kept" and len(extra) > 2:  # the free GPUs bind, not quota
        _, _, usable, free = extra
        return (
            f"{_needs(p, job)}; team {job.team} uses {_uses(said)} of "
            f"{nominal} nominal; {usable} of the {gpus(free, 'free')} are kept for teams within "
            f"their nominal quota whose jobs wait for them in this pass, so it may take only "
            f"{max(0, free - usable)} now"
        )
    cohort = p.ledger.book(job.team).cohort
    text = (
        f"{_needs(p, job)}; team {job.team} uses {_uses(said)} of {nominal} "
        f"nominal and cohort {cohort} can give it only {max(0, room):g} more now"
    )
    if extra and extra[0] == "kept":
        return (
            f"{text}: {gpus(extra[1])} of idle quota are kept for teams within their nominal "
            f"quota whose jobs wait for them in this pass"
        )
    if extra and extra[0] == "unplaced":
        return (
            f"{text}; reclaim cannot make room for it: with the jobs it may reclaim stopped "
            f"its quota would fit, but the GPUs then free would not hold its workers whole "
            f"(jobs that reclaim cannot take hold GPUs on the nodes it would need); it waits "
            f"for those to end"
        )
    if extra and extra[0] == "lent":  # (preemption.unreclaimable)
        _, lent, teams, at, whose = extra
        names = ", ".join(teams)
        text = (
            f"{text}; the {gpus(lent)} lent from team {job.team}'s quota run non-preemptible "
            f"jobs of team {names}, so reclaim cannot free them"
        )
        if at == math.inf:
            return f"{text}; they free up when those end"
        at = _at(p, -(-at // 60) * 60)  # "at the latest": round up to the minute
        if whose in teams:  # the end that gives its quota back is one of theirs
            return f"{text}; they free up when those end, at the latest {at}"
        return (  # another team's job (its own, say) ends first and gives it its quota
            f"{text}; it has its quota back at the latest {at}, when jobs of team {whose} "
            f"that reclaim cannot take have ended"
        )
    short = job.gpus - max(0, room)
    return f"{text}; would start when {gpus(short)} of the cohort {'is' if short == 1 else 'are'} freed"


# The holds that keep a job's quota, not GPUs, from it (the `reserved` wait's kind).
_QUOTA_HELD = (RESERVED_QUOTA, OWN_HOLD, 0, COHORT_HOLD)


def _cooled(p: Pass, job: PendingJob, ends: float) -> float:
    """Return when its team's reclaim backoff, ending at `ends`, stops holding the job
    back: then, or sooner, when its team's running jobs that end first leave it within
    its nominal quota (which the backoff never holds back: Backfill.reclaim_wait). Told
    the cooldown's end alone, a job started 50 min before its estimate (a review's case).
    """
    book = p.ledger.book(job.team)
    room = book.quota(job.flavor).nominal - job.gpus
    used = p.settled(book, job.flavor)
    for r in sorted(p.running_of(job.team, job.flavor), key=lambda r: r.end):
        if r.end >= ends:
            break
        if not r.stopping:  # stopping ones are out of the settled figure already
            used -= r.job.gpus
            if used <= room:
                return max(r.end, p.now)
    return ends


def _quota_back_at(p: Pass, job: PendingJob, held: tuple, cache: dict) -> float:
    """Return when a job held for the quota of a GPU reservation's job (Backfill.quota_taken),
    of its team's quota hold (0), of a cohort hold (COHORT_HOLD) or of its own team's
    gang under one (OWN_HOLD) can take its team's quota: not before the reservation or
    hold, with its job charged from then on (backfill.cohort_free_at); if the replay
    never gets there, the end of that job's max runtime. Floored at the reservation's
    start alone, a job was told +8 min and started after the reserved gang's 2 h (a
    review's case; +5 min and +65 min under a cohort hold; +1 min and +61 min behind
    its team's quota hold). `held`: the wait's (holder, start, kind). One replay per
    holder, kind and team, for every size (backfill.room_steps)."""
    holder, _, kind = held
    key = (holder, kind, job.team)  # a job's quota hold and its GPU reservation differ
    known = cache.get(key)  # (holder's reservation or None, times, rooms)
    if known is None:
        upto = cache["biggest"][key]  # its team's largest job the holder holds
        gate = p.gate
        if kind in (OWN_HOLD, COHORT_HOLD):  # the gang as it can start (backfill._whole)
            hold = gate.cohort_holds.get((p.ledger.book(job.team).cohort, job.flavor))
            holds = [hold and (hold.whole or hold)]
        elif kind == 0:
            holds = [gate.quota_holds.get((job.team, job.flavor))]
        else:
            holds = gate.held_for(job.flavor)
        known = cache[key] = (None, [], [])
        for res in holds:
            if res is not None and res.job.id == holder:
                steps = room_steps(p, job.team, job.flavor, res, upto, cache["ends"])
                known = cache[key] = (res, *steps)
    res, times, rooms = known
    if res is None:
        return p.now
    i = bisect_left(rooms, job.gpus)
    return times[i] if i < len(times) else res.start + res.job.max_runtime


def _reserved(p: Pass, job: PendingJob, holder: int, start: float, nodes: int, bound=None) -> str:
    if nodes == CLAIM_HOLD:  # a preemptor of its team waiting for its victims
        return (
            f"{_needs(p, job)}; it would take team {job.team} past its nominal quota while "
            f"job {holder} waits for the jobs it preempted to stop (by {_at(p, start)}); "
            f"it waits until job {holder} has started"
        )
    if nodes == OWN_HOLD:  # its own team's gang under a cohort hold (scheduler.backfill)
        held = (
            f"it would take quota that job {holder} of team {job.team} needs from "
            f"{_at(p, start)}, when the team's jobs that end by then and GPUs other teams "
            f"borrow have come back"
        )
    elif nodes == RESERVED_QUOTA:  # the quota a GPU reservation's job needs
        held = (
            f"it would take quota that job {holder} needs when the GPUs reserved for it are "
            f"free ({_at(p, start)})"
        )
    else:
        if nodes == 0:  # a quota hold within the team (scheduler.backfill)
            which = f"which needs the team's quota from {_at(p, start)}"
        elif nodes == COHORT_HOLD:  # a hold of the cohort's lendable quota
            hold = p.gate.cohort_holds.get((p.ledger.book(job.team).cohort, job.flavor))
            mine = f"team {job.team}'s quota and " if hold and hold.job.team == job.team else ""
            which = f"which needs {mine}the cohort's idle quota from {_at(p, start)}"
        else:
            which = f"which has GPUs on {nodes} node(s) reserved from {_at(p, start)}"
        held = f"it would delay job {holder}, {which}"
    return f"{_needs(p, job)}; {held}; {_sooner(p, job, start if bound is None else bound)}"


def _sooner(p: Pass, job: PendingJob, bound: float | str) -> str:
    """Return whether a job a hold stops could start now if it ended sooner, and by when
    (Backfill.start_by: the latest end with which it would, or why none would)."""
    if not isinstance(bound, str):
        return f"it could start now if its max runtime were at most {duration(max(0.0, bound - p.now))}"
    if bound == NO_ROOM:
        return "nor do the free GPUs it may use hold it now"
    if bound == DUE_NOW:
        return (
            "the jobs that hold waits for are overdue, due to end now, so it could not "
            "start now even if it ended sooner"
        )
    book = p.ledger.book(job.team)
    if bound == QUOTA_REFUSES:
        stopping = book.used(job.flavor) - p.settled(book, job.flavor)
        until = f" (its stopping jobs hold {stopping} more until they stop)" if stopping else ""
        why = f"{_team(p, job)}{until}{_cohort_room(p, job, book)}"
    elif bound == QUOTA_KEPT:
        why = (
            f"the idle quota or free GPUs of cohort {book.cohort} it would borrow are kept in "
            f"this pass for teams waiting within their nominal quota"
        )
    elif bound == QUOTA_CLAIMED:
        why = (
            f"it would take team {job.team} past its nominal quota while a job of the team "
            f"waits for the jobs it preempted to stop"
        )
    else:  # backfill.BACKING_OFF
        why = f"team {job.team} may not borrow {job.flavor} while its reclaim backoff lasts"
    return f"and {why}, so it could not start now even if it ended sooner"


def _cohort_room(p: Pass, job: PendingJob, book) -> str:
    """Return ' and cohort c can give it only 2 more now' for a team in a cohort."""
    if book.cohort is None:
        return f" and may hold at most {p.ledger.limit(book, job.flavor):g}"
    room = max(0.0, p.ledger.headroom(book, job.flavor))
    return f" and cohort {book.cohort} can give it only {room:g} more now"


def _priority(p: Pass, job: PendingJob, why: str, *facts) -> str:
    if why == "limit":
        return f"{_needs(p, job)}; not reached: the pass stops after {facts[0]} jobs (max_backfill_candidates)"
    return f"{_needs(p, job)}; {facts[0]} job(s) ahead of it in its queue took {gpus(facts[1])} this pass"


def _no_capacity(p: Pass, job: PendingJob, free: int = 0, *_) -> str:
    return f"{_needs(p, job)}; {free} are free; would start if {job.gpus - free} more were freed; {_team(p, job)}"


def _fragmented(p: Pass, job: PendingJob, free: int = 0, most: int = 0, slots: int = 0, *_) -> str:
    return (
        f"{_needs(p, job)}; {free} are free but at most {most} on one node, room for {slots} of its "
        f"workers; {_team(p, job)}"
    )


def _topology(
    p: Pass, job: PendingJob, free: int = 0, most: int = 0, slots: int = 0, best: int = 0
) -> str:
    kind = p.pools[job.flavor].domain_kind
    return (
        f"{_needs(p, job)}; {free} are free with room for {slots} of its workers, but one {kind} "
        f"has room for at most {best}; {_team(p, job)}"
    )


_MESSAGES = {
    NEVER_FITS: _never_fits,
    NO_NODES: _no_nodes,
    BUDGET_EXHAUSTED: _budget,
    BACKOFF: _backoff,
    PREVIOUS_ATTEMPT: _previous_attempt,
    ARRAY_LIMIT: _array_limit,
    FIFO_BLOCKED: _fifo_blocked,
    WAITING_FOR_PREEMPTION: _waiting,
    QUOTA: _quota,
    COHORT_BUSY: _cohort_busy,
    RESERVED: _reserved,
    PRIORITY: _priority,
    TOPOLOGY: _topology,
    FRAGMENTED: _fragmented,
    NO_CAPACITY: _no_capacity,
}

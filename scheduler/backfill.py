"""Backfill with a reservation per flavor (Slurm's sched/backfill rule).

The first job of a flavor that waits for GPUs gets a reservation: the earliest
time T at which it could start, found by replaying the end estimates of the
running jobs (started_at + max_runtime; stopping jobs a grace period after
stop_requested_at; jobs admitted in this pass at now + max_runtime) on a copy
of the free-GPU index, and the nodes it would get then. A later job may start now only if

- it ends before T (now + max_runtime <= T), or
- it uses only GPUs the reservation does not need.

For the second rule the reservation holds, on each of its nodes n, the free
GPUs it will still need at T: need_n = (GPUs it takes on n) - (GPUs released on
n by T). Long jobs are placed with those GPUs hidden; short jobs may use them,
and what they use comes back before T, so need_n drops by as much.
A long job must also leave the reserved job's team the quota it needs
(Backfill.quota_taken), unless it is another team's job within its nominal
quota. Because nothing admitted after the reservation can delay T, and T only
moves earlier as jobs end early, the reserved job cannot starve.

Quota gets the same protection within a team: the first job of a team and
flavor blocked by the team's own quota limit (reason `quota`) holds the
team's quota from the time enough of the team's running jobs will have ended;
later jobs of that team and flavor may start only if they end by then.
Otherwise a team's big gang would starve behind its own stream of small jobs,
each of which fits the quota one freed GPU leaves.

Cohort quota gets it too: the first job of a cohort and flavor blocked because
the cohort cannot lend it enough idle quota (reason `cohort_busy`) holds the
cohort's lendable quota from the time enough borrowed GPUs of the cohort will
have come back; later jobs of that cohort and flavor that would borrow may
start only if they end by then. Without the hold, a gang larger than its
team's nominal quota waits for several GPUs of idle cohort quota at once,
while every single GPU that comes back is borrowed at once by a smaller job.
Other teams' jobs within their nominal quota are never held back: that quota is
guaranteed. The gang's own team's later jobs are, within nominal or not, when
they would take quota the gang is sure to have by then (_takes_own_gangs).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from . import placement
from .gates import FOR_GPUS, Gate
from .model import PendingJob
from .reasons import BACKOFF, COHORT_BUSY, QUOTA, RESERVED, WAITING_FOR_PREEMPTION, Wait
from .requeue import reclaim_cooldown_end
from .state import FREE, Transaction

if TYPE_CHECKING:
    from .core import Pass
    from .index import FreeIndex
    from .state import Pool

# Reservation.nodes of a cohort hold (a quota hold has 0, a GPU reservation its nodes).
COHORT_HOLD = -1
# ... and of a preemptor's hold on its team's quota while it waits (Pass.claim_wait).
CLAIM_HOLD = -2
# ... and of the quota a GPU reservation's job needs (Backfill.quota_taken).
RESERVED_QUOTA = -3
# ... and of a cohort hold of the job's own team's gang, on quota sure to come back
# (Backfill.blocked, _takes_own_gangs).
OWN_HOLD = -4
# Kinds of projection events (reserve): GPUs taken, GPUs given back, GPUs counted as
# held without being taken (out of the index already). At one time: notes, gives, takes.
TAKE, GIVE, NOTE = 0, 1, 2
# Wait.info[3] of `reserved` from a hold, for the sentence only (explain on): the latest
# end with which the job would start now (Backfill.start_by, a float), or why none would:
# its team's quota or the cohort refuses it now; the idle quota it would borrow is kept
# this pass for teams within nominal (Pass.kept_for_others); its team's quota is claimed
# by its waiting preemptor (Pass.claim_wait); its team backs off from borrowing; no
# free GPU it may use holds it now; or the time it would have to end by is now (the
# hold or reservation waits for an overdue job).
QUOTA_REFUSES, QUOTA_KEPT, QUOTA_CLAIMED, BACKING_OFF, NO_ROOM, DUE_NOW = (
    "quota",
    "kept",
    "claimed",
    "backoff",
    "gpus",
    "now",
)
# Give up reserving for a flavor after this many jobs could not get a reservation
# (each costs a replay of the release events). A job whose shape already failed (no
# node will hold its workers: Backfill.never) is not tried again and costs no try.
MAX_TRIES = 4


class Reservation:
    """GPUs promised to a blocked job from time `start` on."""

    __slots__ = (
        "job",
        "start",
        "need",
        "nodes",
        "place",
        "released",
        "seen",
        "counted",
        "whole",
        "before",
    )

    def __init__(
        self,
        job: PendingJob,
        start: float,
        need: dict[int, int],
        nodes: int,
        place: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.job = job
        self.start = start
        self.need = need  # node -> GPUs free now that must still be free at `start`
        self.nodes = nodes  # how many nodes it will use
        self.place = place  # (node, GPUs) it will take at `start`
        # TeamBook -> GPUs of its team's (or cohort's) jobs that end by `start`; how many
        # of the pass's admissions and stopping jobs were looked at for it, and the
        # running jobs counted (Backfill.quota_taken, _released)
        self.released: dict | None = None
        self.seen = (0, 0)
        self.counted: set[int] = set()
        # a cohort hold's gang at the later of its time and when its GPUs are free
        # (_whole), built when first needed; None while not built, False if never
        self.whole: Reservation | bool | None = None
        self.before = 0  # how many GPU reservations its flavor had when it was set


def _takes_own_gangs(p: Pass, job: PendingJob, held: Reservation, end: float) -> bool:
    """Return whether a later job of a cohort hold's own team, within nominal or not,
    ending at `end`, would take quota the hold's gang is sure to have at the hold's
    start: the gang would fit its team's headroom then with only what is sure to come
    back by then given back (_released: its own team's jobs ending, and of the other
    teams' only the GPUs they borrow, which the hold keeps from other borrowers), and
    would not with the job
    charged too (as Backfill.quota_taken asks of a GPU reservation); "then" is the later
    of the hold's time and when the gang's GPUs are free (_whole).

    Each GPU such a job takes is one more the gang must borrow: without this, a team's
    stream of small jobs within its nominal quota kept its earlier gang waiting for
    hours (test_cohort_hold.py), as Slurm's backfill would not let them. Not held (the
    review helpers' cases, each in test_cohort_hold.py):
    - a job that may reclaim (_may_reclaim): its team's quota is lent out;
    - any job when the gang needs a lender's own quota back too (its jobs within
      nominal ending): the lender may take it again and move the hold's time, and held,
      the team's guaranteed quota sat idle all day;
    - any job when the hold's time is now: a release is overdue (a job stopping past
      its grace period), and held, the team's jobs waited as long as it stayed stuck;
    - a job the gang's quota holds as well: held, it waited 5 h for nothing;
    - a job that ends before the gang's GPUs are free (_whole): the hold's time is
      quota only, and the quota is asked at the later of the two.
    A job that leaves the gang its quota is still held if it would sit on GPUs the gang
    needs then (_takes_gpus)."""
    if held.start <= p.now or _may_reclaim(p, job, p.ledger.book(job.team)):
        return False
    whole = _whole(p, held)
    if whole is None or end <= whole.start:
        return False  # it ends before the gang's GPUs are free: it delays nothing
    ledger, f = p.ledger, job.flavor
    book, need = ledger.book(held.job.team), held.job.gpus
    at_start = {}
    for other, k in _released(p, whole).items():
        sure = k if other is book else min(k, other.used(f) - other.quota(f).nominal)
        if sure > 0:
            at_start[other] = -sure
    if ledger.headroom_with(book, f, at_start) < need:
        return False
    at_start[book] = at_start.get(book, 0) + job.gpus
    if ledger.headroom_with(book, f, at_start) < need:
        return True
    return _takes_gpus(p, job, whole)


def _takes_gpus(p: Pass, job: PendingJob, whole: Reservation) -> bool:
    """Return whether the job, placed now as it would be, would take free GPUs the hold's
    gang will need at its start (whole.need: those it would leave a node short of).
    With its quota kept but not its GPUs, a team's 3-minute job let through sat on the
    node the gang needed, and the gang started a pass late (the reservation property of
    test_reservation_quota.py). Asked of where it would go, not of whether it fits
    elsewhere: it is placed without the gang's GPUs hidden."""
    need = {n: k for n, k in whole.need.items() if k > 0}
    if not need:
        return False
    pool = p.pools[job.flavor]
    where = p.choose(pool, job)
    if where is None:
        return False
    tx = Transaction()
    try:
        nodes = placement.take(pool.index, where, job.workers, job.gpus_per_worker, tx)
        return any(n in need and pool.index.free[n] < need[n] for n, _ in nodes or ())
    finally:
        tx.rollback()


def _whole(p: Pass, held: Reservation) -> Reservation | None:
    """Return a cohort hold's gang as it could start: at the later of the hold's time and
    the time its GPUs are free (reserve, after the flavor's GPU reservations set before
    the hold: those of jobs after it in pass order would push it back, and let its
    team's jobs through as ending by then), or None if they never are; one projection
    per hold and pass, not updated by the pass's later admissions. The hold's time is
    quota only: held to it, a team's job waited 5 h for a gang that fit no node for
    20 h (a review's case)."""
    if held.whole is None:
        f = held.job.flavor
        pool = p.pools.get(f)
        earlier = p.gate.held_for(f)[: held.before]
        gpus = None if pool is None else reserve(p, held.job, pool, earlier)
        if gpus is None:
            held.whole = False
        else:  # at the later time, with the GPUs its placement then needs free now
            start = max(held.start, gpus.start)
            held.whole = Reservation(held.job, start, gpus.need, COHORT_HOLD, gpus.place)
    return held.whole or None


def _may_reclaim(p: Pass, job: PendingJob, book) -> bool:
    """Return whether a job of a team below its nominal quota may need to reclaim it: the
    policy preempts, the job does not fit the team's headroom or the free GPUs now (as
    placed: a count of free GPUs held back an 8-GPU job that fits no node), and there
    are GPUs it may reclaim (Pass.reclaimable: borrowing peers' preemptible jobs). Its
    team's quota is lent out then, and a job within nominal reclaims it rather than wait
    for its own team's gang, which, having to borrow, may not (preemption rule 1). A
    peer borrowing while the job fits the idle quota and free GPUs takes nothing a
    reclaim would give back (a review's case)."""
    if not p.preempting:
        return False
    f = job.flavor
    pool = p.pools.get(f)
    if pool is None:
        return False
    if p.ledger.headroom(book, f) >= job.gpus and p.choose(pool, job) is not None:
        return False  # placed where it fits now (counted free GPUs: fragmented, a replay's)
    return bool(p.reclaimable(pool, book))


class Backfill(Gate):
    """Jobs pass a blocked one only if they do not delay its reservation.

    Up to `limit` blocked jobs per flavor get a reservation, each planned after
    the ones before it (Slurm plans every job it tests, up to bf_max_job_test).
    `reservations` keeps the first of each flavor, `later` the others.
    """

    def __init__(self, limit: int = 1, reclaim_backoff: bool = False) -> None:
        super().__init__()
        self.tries: dict[str, int] = {}
        # flavor -> gang shapes (workers, GPUs per worker) no projection placed in this
        # pass: a job as large in both never fits either
        self.never: dict[str, list[tuple[int, int]]] = {}
        self.limit = limit
        self.later: dict[str, list[Reservation]] = {}
        self.reclaim_backoff = reclaim_backoff
        self._cooldowns: dict[tuple[str, str], tuple[float, int, float]] | None = None

    def held_for(self, flavor: str) -> list[Reservation]:
        """Return the flavor's GPU reservations, first first."""
        first = self.reservations.get(flavor)
        return [] if first is None else [first, *self.later.get(flavor, ())]

    def blocked(self, p: Pass, job: PendingJob) -> Wait | None:
        """Return `reserved` if the job would use quota held for an earlier job.

        That is its team's quota (a quota hold), or its cohort's lendable quota (a
        cohort hold) if it would borrow, or the hold is its own team's and it would take
        quota the hold's gang is sure to have (_takes_own_gangs: info[2] OWN_HOLD, at
        the gang's start). With the reclaim backoff on, return `backoff` if it would
        borrow while its team's borrowing of its flavor cools down after a reclaim
        (info: when it ends, 0 requeues, the reclaims in a row, the last's time). info[3]:
        for the sentence, when it could start now (start_by).

        Still `reserved` when its quota refuses it now as well: told `quota` or
        `cohort_busy`, a job within its nominal quota would reclaim, and take the team's
        quota the hold keeps for its gang (the core's benchmark: 5% more preemptions,
        6% fewer admissions).
        """
        hit = self._hold(p, job, p.now + job.max_runtime)
        if hit is None or isinstance(hit, Wait):
            return hit
        held, kind = hit
        bound = self.start_by(p, job, held.start) if p.config.explain else None
        return Wait(RESERVED, (held.job.id, held.start, kind, bound))

    def _hold(self, p: Pass, job: PendingJob, end: float) -> tuple[Reservation, int] | Wait | None:
        """Return the hold that stops the job, ending at `end`, and its kind
        (Reservation.nodes, or OWN_HOLD), the reclaim backoff's wait, or None."""
        held = self.quota_holds.get((job.team, job.flavor))
        if held is not None and end > held.start and held.job is not job:  # (not its own)
            return held, held.nodes
        if not self.cohort_holds and not self.reclaim_backoff:
            return None
        book = p.ledger.book(job.team)
        held = self.cohort_holds.get((book.cohort, job.flavor))
        outlasts = held is not None and end > held.start and held.job is not job
        if outlasts and held.job.team == job.team and _takes_own_gangs(p, job, held, end):
            return held.whole or held, OWN_HOLD
        if p.ledger.borrowed(book, job.flavor, job.gpus) == 0:
            return None  # within its nominal quota, which is guaranteed
        if outlasts:
            return held, held.nodes
        return self.reclaim_wait(p, job, book) if self.reclaim_backoff else None

    def reclaim_wait(self, p: Pass, job: PendingJob, book) -> Wait | None:
        """Return `backoff` if the job would borrow while its team's reclaim backoff for
        its flavor lasts. Not a job within nominal once its team's stopping jobs stop
        (Pass.within_nominal: the ledger still counts them, and told `backoff` such a job
        preempted its own team's job by priority to start: a review), nor one its quota
        refuses whatever the cooldown (`quota` is the true reason)."""
        cooling = self.cooldowns(p).get((job.team, job.flavor))
        if cooling is None or p.within_nominal(book, job) or p.ledger.refuses(book, job):
            return None
        return Wait(BACKOFF, (cooling[0], 0, *cooling[1:]))

    def start_by(self, p: Pass, job: PendingJob, end: float) -> float | str:
        """Return the latest end, at most `end`, with which the job would start now as
        this pass stands (every hold it meets, its quota, the GPU reservations of its
        flavor and the free GPUs), or why none would (QUOTA_REFUSES, QUOTA_KEPT,
        QUOTA_CLAIMED, BACKING_OFF, NO_ROOM, DUE_NOW): the sentence's "it could start
        now if its max runtime were at most". Past the first GPU reservation's start
        only the end asked first is tried, then that start: an end between the
        reservations is not looked for (the sentence is then cautious, not false).

        For the sentence only (explain on), and it changes nothing (the pass's lazily
        filled caches are asked apart: Pass.asked_apart): asked of the job with a
        shorter max runtime, each hold it still meets moves `end` to that hold's
        start. Told the hold's own time, jobs that no free GPU held, that another hold
        or a GPU reservation stopped sooner, or that their quota refused, were promised
        a start they would not get (test_verdicts_true.py's property).
        """
        wholes = {id(h): h.whole for h in self.cohort_holds.values()}
        try:  # a quota hold, a cohort hold, its own team's gang: each moves `end` earlier
            while (hit := self._hold(p, job, end)) is not None:
                if isinstance(hit, Wait):
                    return BACKING_OFF
                end = hit[0].start  # earlier than `end`: the hold stopped a job ending then
        finally:  # built here, a hold's projection would be older than the pass makes it
            for h in self.cohort_holds.values():
                h.whole = wholes.get(id(h), h.whole)
        if end <= p.now:
            return DUE_NOW
        book = p.ledger.book(job.team)
        refused = p.asked_apart(p.quota_or_claim, job, book)  # its runtime asks nothing of quota
        if refused is not None:
            if refused.code == RESERVED:
                return QUOTA_CLAIMED
            room = p.ledger.headroom(book, job.flavor)
            return QUOTA_REFUSES if room < job.gpus else QUOTA_KEPT
        pool = p.pools.get(job.flavor)
        if pool is None:
            return NO_ROOM
        held = self.held_for(job.flavor)
        first = min((r.start for r in held), default=math.inf)
        if end > first:  # it outlasts a GPU reservation: _admit_long's rules
            if self.quota_taken(p, job, pool, end) is None and p.choose(pool, job) is not None:
                return end
            end = first
            if end <= p.now:
                return DUE_NOW
        if not held or not pool.holding:
            return end if p.choose(pool, job) is not None else NO_ROOM
        lift(pool)  # it ends before every reservation: _admit_short's rules
        try:
            return end if p.choose(pool, job) is not None else NO_ROOM
        finally:
            restore(pool)

    def cooldowns(self, p: Pass) -> dict[tuple[str, str], tuple[float, int, float]]:
        """Return (team, flavor) -> (when its reclaim backoff ends, the reclaims in a row,
        when the last was) for the pairs still cooling down (Team.reclaims; Kueue
        KEP-14468's reclaim backoff, scheduler.requeue)."""
        if self._cooldowns is None:
            self._cooldowns = {}
            for book in p.ledger.books.values():
                for flavor, (count, at) in book.reclaims.items():
                    ends = reclaim_cooldown_end(count, at)
                    if ends > p.now:
                        self._cooldowns[(book.name, flavor)] = (ends, count, at)
        return self._cooldowns

    def placed_short(self, p: Pass, job: PendingJob, after: float = 0.0) -> bool:
        """Whether the job ends before every reservation of its flavor, started `after`
        seconds from now at the latest (a preemptor: Pass.preempt_beside_holds), so that
        it is placed with the held GPUs shown (_admit_short)."""
        held = self.held_for(job.flavor)
        return bool(held) and p.now + after + job.max_runtime <= min(r.start for r in held)

    def try_admit(self, p: Pass, job: PendingJob, pool: Pool) -> Wait | None:
        res = self.reservations.get(job.flavor)
        if res is None:
            return super().try_admit(p, job, pool)
        if self.placed_short(p, job):
            return self._admit_short(p, job, pool, self.held_for(job.flavor))
        return self._admit_long(p, job, pool, res)

    def after_block(self, p: Pass, job: PendingJob, pool: Pool | None, wait: Wait) -> Wait | None:
        """Note the blocked job: a quota or cohort hold for the first of its team or
        cohort, a GPU reservation for one waiting for GPUs. Return `reserved` if a hold
        stops the job at the time its GPUs would be reserved (_reserve)."""
        f = job.flavor
        if wait.code == QUOTA:
            if (job.team, f) not in self.quota_holds:
                self._hold_quota(p, job)
                held, book = self.quota_holds.get((job.team, f)), p.ledger.book(job.team)
                if held is None or pool is None or p.within_nominal(book, job):
                    return None
                if p.over_by_passed(book, job):  # over it only by team jobs that passed it
                    self._reserve(p, job, pool, held.start)
            return None
        if wait.code == COHORT_BUSY:
            self._hold_cohort(p, job)
            return None
        if pool is None:
            return None
        if wait.code == RESERVED and wait.info[2] == CLAIM_HOLD:
            return self._reserve_past_claim(p, job, pool, wait)
        if not waits_for_gpus(wait):
            return None
        return self._reserve(p, job, pool)

    def _reserve_past_claim(self, p: Pass, job: PendingJob, pool: Pool, wait: Wait) -> None:
        """Reserve GPUs, from when the claim hold ends, for a job its team's waiting
        preemptor holds (Pass.claim_wait) that waits for GPUs as well: none free now
        hold it. The hold keeps the team's quota until the preemptor has started, not
        GPUs: told `reserved` for it, a job that had GPUs reserved from +90 s lost them
        in the next pass, its team's 4-hour job within nominal quota was placed there,
        and it started 4 h late (an adversarial helper's case,
        test_reservation_holds.py). Not one that fits the free GPUs: it waits for its
        quota only, a pass or a grace period, and a reservation would take the
        flavor's from the next job waiting for GPUs.

        Nor one whose team's quota would refuse it once the hold is gone: the cohort's
        headroom, its own stopping jobs left out (Pass.settled), with the preemptors'
        charges; told GPUs were reserved for it from the claim's time, a job whose team
        was then at its nominal quota, with nothing to borrow, waited hours (a review's
        case). From when the last of its team's waiting preemptors will have started:
        the hold lasts while any of them waits."""
        f = job.flavor
        if len(self.held_for(f)) >= self.limit + self._starving(p, job):
            return None  # (_reserve's test, asked before placing the job)
        book = p.ledger.book(job.team)
        if p.ledger.headroom_with(book, f, {book: p.settled(book, f) - book.used(f)}) < job.gpus:
            return None
        if p.choose(pool, job) is not None:
            return None
        until = max(
            (t for j, t in p.waiting_preemptors if j.team == job.team and j.flavor == f),
            default=wait.info[1],
        )
        self._reserve(p, job, pool, until)
        return None  # the claim's wait stands: it is the reason it waits now

    def _reserve(
        self, p: Pass, job: PendingJob, pool: Pool, not_before: float = 0.0
    ) -> Wait | None:
        """Reserve the GPUs the job needs at the earliest time they are free, not before
        `not_before`, if its flavor has reservations left (`limit`; one more for a
        starving job).

        Not if a quota or cohort hold of the pass stops it then: started at that time it
        would end past the hold's start (blocked's test, asked at the reservation instead
        of now). Let through because it would end by the hold if it started now, a
        2-GPU, 10-minute job waiting for GPUs free at +300 s was told they were reserved
        for it from then, behind its team's quota hold at +600 s, and started an hour
        later; the flavor's reservation sat on GPUs it could not use (a seventh tester's
        case, test_reservation_holds.py). It waits `reserved` for the hold instead, and
        the reservation goes to the next job blocked for GPUs."""
        f = job.flavor
        held = self.held_for(f)
        starving = self._starving(p, job)
        if len(held) >= self.limit + starving:
            return None
        shape, never = (job.workers, job.gpus_per_worker), self.never.setdefault(f, [])
        if any(w <= shape[0] and q <= shape[1] for w, q in never):
            return None  # no node holds such workers as the cluster is (unhealthy GPUs, say)
        if self.tries.get(f, 0) >= MAX_TRIES and not starving:
            return None
        res = reserve(p, job, pool, held, not_before)
        if res is None:  # not even once every job has ended: jobs of its shape never fit
            # (four stuck 2x8 gangs beside a node with a bad GPU used up the tries, and
            # a 1x8 job behind them got no reservation and starved behind 1-GPU jobs)
            self.tries[f] = self.tries.get(f, 0) + 1
            never.append(shape)
            return None
        if held and (res := _with_quota(p, job, pool, held, res)) is None:
            return None
        hit = self._hold(p, job, res.start + job.max_runtime)
        if hit is not None and not isinstance(hit, Wait):
            hold_, kind = hit
            bound = self.start_by(p, job, hold_.start) if p.config.explain else None
            return Wait(RESERVED, (hold_.job.id, hold_.start, kind, bound))
        if held:
            self.later.setdefault(f, []).append(res)
        else:
            self.reservations[f] = res
        hold(pool, [*held, res])
        _promise_budget(p, job, res.start)
        return None

    def _starving(self, p: Pass, job: PendingJob) -> int:
        """Return 1 if the job has waited PolicyConfig.max_wait or more, else 0.

        A starving job gets a reservation even when its flavor has its
        `limit` already (one more at most; Volcano's sla plugin reserves for
        a job past its sla-waiting-time), so an earlier blocked job cannot
        keep the flavor's only reservation from it.
        """
        bound = p.config.max_wait
        return 1 if 0 < bound <= p.now - job.submitted_at else 0

    def _hold_quota(self, p: Pass, job: PendingJob) -> None:
        """Hold the team's quota for its first quota-blocked job of the flavor, from when
        its team may take the job's GPUs (cohort_free_at: in a cohort, once the cohort
        can lend them too; counted against its own limit alone, a borrower was held
        from +60 s, when its 1-GPU job ended, and waited 99 h for the cohort)."""
        start = cohort_free_at(p, job)
        if start != math.inf:
            self.quota_holds[(job.team, job.flavor)] = Reservation(job, start, {}, 0)
            _promise_budget(p, job, start)

    def _hold_cohort(self, p: Pass, job: PendingJob) -> None:
        """Hold the cohort's lendable quota for its first cohort-blocked job of the flavor."""
        key = (p.ledger.book(job.team).cohort, job.flavor)
        if key[0] is None or key in self.cohort_holds:
            return
        start = cohort_free_at(p, job)
        if start != math.inf:
            held = self.cohort_holds[key] = Reservation(job, start, {}, COHORT_HOLD)
            held.before = len(self.held_for(job.flavor))
            _promise_budget(p, job, start)

    def _admit_short(
        self, p: Pass, job: PendingJob, pool: Pool, held_for: list[Reservation]
    ) -> Wait | None:
        """Admit a job that ends before every reservation, held GPUs included."""
        held = sum(pool.held.values())
        if held and p.misfit(pool, job, FREE):
            return p.shortfall(job, pool, extra=held)
        lift(pool)
        where = p.choose(pool, job)
        nodes = None if where is None else p.admit(job, pool, where)
        if nodes is None:
            wait = p.shortfall(job, pool)
            restore(pool)
            return wait
        rehold(pool, held_for, {node: w * job.gpus_per_worker for node, w in nodes})
        return None

    def _admit_long(self, p: Pass, job: PendingJob, pool: Pool, res: Reservation) -> Wait | None:
        """Admit a job that outlasts the reservation on GPUs it does not need, and
        leaves the reserved jobs the quota they need (quota_taken)."""
        taken = self.quota_taken(p, job, pool)
        if taken is not None:
            return taken
        where = p.choose(pool, job)
        if where is not None and p.admit(job, pool, where) is not None:
            return None
        if not pool.held or p.misfit(pool, job, FREE):
            return p.shortfall(job, pool, extra=sum(pool.held.values()))
        lift(pool)
        fits = p.choose(pool, job) is not None
        restore(pool)
        if fits:
            bound = self.start_by(p, job, res.start) if p.config.explain else None
            return Wait(RESERVED, (res.job.id, res.start, res.nodes, bound))
        return p.shortfall(job, pool, extra=sum(pool.held.values()))

    def quota_taken(
        self, p: Pass, job: PendingJob, pool: Pool, end: float | None = None
    ) -> Wait | None:
        """Return `reserved` (RESERVED_QUOTA) if the job, still running at a GPU
        reservation's start, would leave the reserved job's team less quota than the job
        needs; info[3] is for the sentence, as blocked's (start_by). `end`: the job's end
        as start_by asks it (then without the sentence), else now + its max runtime.

        A reservation holds GPUs; without this, a job backfilled beside it on GPUs it
        does not need could take the quota it needs (its own team's, or the cohort's
        idle quota it would borrow), and at its start the reserved job waited for quota
        (`cohort_busy`) as long as that job ran. Jobs of other teams within their
        nominal quota are never held back (that quota is guaranteed; the cohort hold's
        rule): a lender taking back its idle quota can still delay a borrowing gang.
        Nor is a job when the reserved job would be short of quota at its start anyway
        (a job within nominal took it, say): holding it would keep nothing for it. Quota
        at the start is the ledger's now less what the team and its cohort give back by
        then (_released). Asked
        before placement, as a job's quota is asked before its GPUs (Pass.consider);
        asked after it, replays lost 5% more work and met two of the goal's checks fewer.
        """
        book = p.ledger.book(job.team)
        within = None  # whether the job fits its team's nominal quota, asked once
        held = self.held_for(job.flavor)
        ends = p.now + job.max_runtime if end is None else end
        for res in held:
            if ends <= res.start:
                continue
            other = p.ledger.book(res.job.team)
            if other is not book:
                if book.cohort is None or book.cohort != other.cohort:
                    continue
                if within is None:
                    within = p.ledger.borrowed(book, job.flavor, job.gpus) == 0
                if within:
                    continue
            if _leaves_short(p, book, job.gpus, res, held):
                sentence = p.config.explain and end is None
                bound = self.start_by(p, job, res.start) if sentence else None
                return Wait(RESERVED, (res.job.id, res.start, RESERVED_QUOTA, bound))
        return None


# How many later starts a reservation tries for its quota beside the earlier ones
# (_with_quota) before it gives up (the next job blocked for GPUs gets it).
QUOTA_TRIES = 4


def _with_quota(
    p: Pass, job: PendingJob, pool: Pool, held: list[Reservation], res: Reservation
) -> Reservation | None:
    """Return the job's reservation `res` (placed on GPUs alone, beside the flavor's
    earlier reservations `held`), or a later one, at a start where its team has the
    quota for it with the earlier reservations' jobs running then, and where, running,
    it leaves each earlier reservation starting meanwhile the quota its job needs (the
    test quota_taken asks of a job started now); None if QUOTA_TRIES starts do not do.
    Placed on GPUs alone, a team's 2-minute job was reserved from +600 s while its
    team's reserved 4-GPU job held its whole nominal quota from +300 s to +3900 s: told
    +600 s, it started at +3900 s (an adversarial tester's case, test_backfill.py).
    The quota of the jobs running now only comes back over time; the earlier
    reservations' jobs are what take it later."""
    book, f = p.ledger.book(job.team), job.flavor
    within = p.ledger.borrowed(book, f, job.gpus) == 0  # never held for another team
    for _ in range(QUOTA_TRIES):
        t, end = res.start, res.start + job.max_runtime
        later = None
        running = _running_at(held, t)
        if running:
            at_start = _quota_at(p, Reservation(job, t, {}, 0), held)
            if p.ledger.headroom_with(book, f, at_start) < job.gpus:  # once one has ended
                later = min(r.start + r.job.max_runtime for r in running)
        for r in held:
            if later is not None:
                break
            other = p.ledger.book(r.job.team)
            if not t < r.start < end or not p.ledger.shares_quota(book, other):
                continue
            if other is not book and within:  # (quota_taken's rule)
                continue
            if _leaves_short(p, book, job.gpus, r, held):
                later = r.start  # after it has started, with it running
        if later is None:
            return res
        res = reserve(p, job, pool, held, later)
        if res is None:
            return None
    return None


def _quota_at(p: Pass, res: Reservation, held: list[Reservation]) -> dict:
    """Return TeamBook -> GPUs of quota changed by the reservation's start: what its
    team and cohort give back by then (_released, negative), and what the flavor's
    other reservations whose jobs run then take (_running_at)."""
    at_start = {b: -k for b, k in _released(p, res).items()}
    for r in _running_at(held, res.start, res):
        b = p.ledger.book(r.job.team)
        at_start[b] = at_start.get(b, 0) + r.job.gpus
    return at_start


def _leaves_short(p: Pass, book, gpus: int, res: Reservation, held: list[Reservation]) -> bool:
    """Whether `gpus` more of team `book`'s, still running at the reservation's start,
    leave its job short of quota it would have then (Backfill.quota_taken, _with_quota);
    not when it would be short anyway: holding the quota would keep it nothing."""
    other, f, need = p.ledger.book(res.job.team), res.job.flavor, res.job.gpus
    at_start = _quota_at(p, res, held)
    if p.ledger.headroom_with(other, f, at_start) < need:
        return False
    at_start[book] = at_start.get(book, 0) + gpus
    return p.ledger.headroom_with(other, f, at_start) < need


def _running_at(
    held: list[Reservation], t: float, but: Reservation | None = None
) -> list[Reservation]:
    """Return the reservations (but `but`, the one asking) whose jobs will run at `t`,
    started at their reservations: their quota is taken then. Without them, a second
    reservation (backfill_reservations = 2, or a starving job's) counted the quota as if
    the first job were not running, and a 4-hour borrower let through took what the
    second needed (a review's case). All of them, not only those planned before it: a
    later reservation can start earlier and still run then, and with three of a team's
    4-GPU jobs on its nominal 8, each pair fitting at the first's start but not all three,
    the last to start was short (a review's case, test_backfill.py)."""
    return [r for r in held if r is not but and r.start <= t < r.start + r.job.max_runtime]


def _released(p: Pass, res: Reservation) -> dict:
    """Return TeamBook -> GPUs that the reserved job's team (and its cohort) give back
    by the reservation's start: their running and stopping jobs' end estimates (victims
    of this pass too) and this pass's admissions, looked at as they come. Quota counted
    as it stands now, a short job backfilled beside the reservation, or a priority
    preemptor's charge beside its stopping victim, made the reserved job look short of
    quota, and every later long borrower was let through (a review's case,
    test_reservation_quota.py)."""
    f, ledger = res.job.flavor, p.ledger
    book = ledger.book(res.job.team)

    def ours(b) -> bool:
        return ledger.shares_quota(book, b)

    rel, counted = res.released, res.counted
    if rel is None:
        rel = res.released = {}
        for m in ledger.peers(book):
            for r in p.running_of(m.name, f):
                if r.end <= res.start:
                    rel[m] = rel.get(m, 0) + r.job.gpus
                    counted.add(r.job.id)
    admitted = p.admitted.get(f, ())
    pool = p.pools.get(f)
    stopping = pool.stops.jobs if pool is not None and pool.stops is not None else ()
    seen_admitted, seen_stopping = res.seen
    for a in admitted[seen_admitted:]:
        b = ledger.book(a.team)
        if a.end <= res.start and ours(b):
            rel[b] = rel.get(b, 0) + a.gpus
    for r in stopping[seen_stopping:]:  # victims told to stop in this pass, say
        if not ours(r.book):
            continue
        if r.end <= res.start and r.job.id not in counted:
            rel[r.book] = rel.get(r.book, 0) + r.job.gpus
            counted.add(r.job.id)
        elif r.end > res.start and r.job.id in counted:  # its stop ends after its end
            rel[r.book] -= r.job.gpus  # preempted now: it holds its GPUs until then
            if not rel[r.book]:
                del rel[r.book]
            counted.discard(r.job.id)
    res.seen = (len(admitted), len(stopping))
    return rel


def promised_events(p: Pass, pool: Pool) -> list[tuple[float, int, int, int, tuple]]:
    """Return (time, kind, node, GPUs, owner) for the GPUs reserved for preemptors.

    Like an earlier reservation: a preemptor holds what it reserved on each node, the
    free GPUs beside its victims at once (they are out of the index already: kind
    NOTE) and each victim's GPUs from when that victim stops (TAKE), and gives all of it
    back after its max runtime from its last victim's end (GIVE; never, if its job is
    not known). Without this, a projection handed the victims' GPUs to the next job.
    Free and stopping GPUs of a node shared by several preemptors are shared out in
    preemptor order, the soonest-stopping first.
    """
    stops = pool.stops
    if stops is None or not stops.by_job:
        return []
    hidden = dict(stops.hidden)
    stopping: dict[int, list[list[float]]] = {}
    events = []
    for pid in sorted(stops.by_job):
        owner = ("preemptor", pid)
        wait = p.waits.get(pid)
        start = wait.info[1] if wait is not None and wait.code == WAITING_FOR_PREEMPTION else p.now
        known = p.considered(pid)  # a preemptor of an earlier pass not yet considered: never
        end = start + (math.inf if known is None else known.max_runtime)
        for node, k in stops.by_job[pid].items():
            free_part = min(k, hidden.get(node, 0))
            if free_part:
                hidden[node] -= free_part
                events.append((p.now, NOTE, node, free_part, owner))
            left = k - free_part
            queue = stopping.get(node)
            if queue is None:  # [when, GPUs] of the node's stopping jobs, soonest first
                jobs = stops.jobs_on.get(node, ())
                queue = stopping[node] = sorted(
                    [r.end, g] for r in jobs for n, g in r.nodes if n == node
                )
            while left > 0 and queue:
                t, got = queue[0]
                use = min(left, got)
                events.append((t, TAKE, node, use, owner))
                left -= use
                if use == got:
                    queue.pop(0)
                else:
                    queue[0][1] = got - use
            events.append((end, GIVE, node, k, owner))
    return events


def release_events(p: Pass, pool: Pool) -> list[tuple[float, int, int]]:
    """Return (time, node, GPUs) for every GPU of the flavor that will come free."""
    events = [(r.end, node, k) for r in p.running_in(pool.flavor) for node, k in r.nodes]
    for a in p.admitted.get(pool.flavor, ()):
        events.extend((a.end, node, workers * a.per_worker) for node, workers in a.nodes)
    events.sort()
    return events


def cohort_free_at(p: Pass, job: PendingJob, reserved: Reservation | None = None) -> float:
    """Return when enough of the jobs of the flavor end for the job's team to take its
    GPUs (_replay)."""
    return _replay(p, p.ledger.book(job.team), job.flavor, reserved, job.gpus)


def room_steps(
    p: Pass, team: str, flavor: str, reserved: Reservation | None, upto: float, known: dict
) -> tuple[list[float], list[float]]:
    """Return the times of cohort_free_at's replay and, at each, the most GPUs the team
    could take by then, until that is `upto`: one replay answers every job size of the
    team up to it (with bisect on the second list, which never decreases). Asked once
    the pass is over (the sentences' estimates): the end estimates a replay reads are
    then the same for every team that pools its quota with the same teams, and are
    kept in `known` ((cohort, or the team alone, flavor) -> _ends)."""
    book = p.ledger.book(team)
    key = (book.cohort, flavor) if book.cohort is not None else ((team,), flavor)
    if key not in known:
        known[key] = _ends(p, book, flavor)
    steps: list = []
    _replay(p, book, flavor, reserved, upto, steps, known[key])
    times, rooms, most = [], [], -math.inf
    for t, room in steps:
        most = max(most, room)
        times.append(t)
        rooms.append(most)
    return times, rooms


def _replay(
    p: Pass,
    book,
    f: str,
    reserved: Reservation | None,
    gpus: float,
    steps: list | None = None,
    ends: list | None = None,
) -> float:
    """Return when enough of the jobs of the flavor end for the job's team to take its
    GPUs: the team's and, in a cohort, the cohort's (its headroom: its limit and what
    the cohort can lend).

    Replays the end estimates of the team's (its cohort's) running jobs, of the jobs
    admitted in this pass and of the waiting preemptors (charged until their max
    runtime after their victims have stopped; left charged for ever, the next job of
    a team was told 99 h, when another job ended, and started when the preemptor
    did, a minute later), soonest first, on the ledger in a transaction that is
    undone afterwards, until the team's headroom holds the job. Infinite if they
    never free enough: then no quota is held. With `reserved` (a GPU
    reservation whose quota the job may not take, Backfill.quota_taken): not before
    its start, with its job (and the flavor's other reservations whose jobs still run
    then) charged until their max runtimes end. `ends`: _ends(p, book, f), if
    known already (room_steps).
    """
    ledger = p.ledger
    ends = _ends(p, book, f) if ends is None else list(ends)
    at = p.now
    tx = Transaction()
    try:
        if reserved is not None:
            at = reserved.start
            held = p.gate.held_for(f)
            charged = _running_at(held, at, reserved) if reserved in held else []
            for r in (*charged, reserved):
                owner = ledger.book(r.job.team)
                tx.add(ledger, owner, f, r.job.gpus)
                end = (r.start + r.job.max_runtime, math.inf, owner, r.job.gpus)
                insort(ends, end, key=_end_order)  # after those ending as soon: in turn
        k = 0
        while k < len(ends) and ends[k][0] <= at:  # what has ended by then
            tx.add(ledger, ends[k][2], f, -ends[k][3])
            k += 1
        if reserved is not None or k:
            room = ledger.headroom(book, f)
            if steps is not None:
                steps.append((at, room))
            if room >= gpus:
                return at
        for end, _, member, freed in ends[k:]:
            tx.add(ledger, member, f, -freed)
            room = ledger.headroom(book, f)
            if steps is not None:
                steps.append((end, room))
            if room >= gpus:
                return end
        return math.inf
    finally:
        tx.rollback()


def _ends(p: Pass, book, f: str) -> list[tuple]:
    """Return the end estimates _replay replays for a team's quota of a flavor, soonest
    first, as (end, tiebreak, team, GPUs): its (its cohort's) running jobs, the jobs
    admitted in this pass and the waiting preemptors (until their max runtime after
    their victims have stopped)."""
    ledger = p.ledger
    ends = []
    for member in ledger.peers(book):
        ends += [(r.end, r.job.id, member, r.job.gpus) for r in p.running_of(member.name, f)]
    for i, a in enumerate(p.admitted.get(f, ())):
        started = ledger.book(a.team)
        if ledger.shares_quota(book, started):
            ends.append((a.end, -1 - i, started, a.gpus))
    for w, until in p.waiting_preemptors:
        charged = ledger.book(w.team)
        if w.flavor == f and ledger.shares_quota(book, charged):
            ends.append((until + w.max_runtime, w.id, charged, w.gpus))
    ends.sort(key=_end_order)
    return ends


def _end_order(e: tuple) -> tuple:
    return e[0], e[1]


def waits_for_gpus(wait: Wait) -> bool:
    """Return whether a blocked job waits for GPUs not reserved for it yet: a capacity
    reason, or GPUs reserved for a job ahead (not its team's or cohort's quota, which a
    quota or cohort hold keeps).

    Not a preemptor waiting for its victims: the GPUs of its target placement are
    reserved for it already (scheduler.state.Stops); a backfill reservation would hold
    more for it, projected without those, and take the flavor's reservation from the
    next job that waits for GPUs.
    """
    if wait.code == WAITING_FOR_PREEMPTION:
        return False
    if wait.code in FOR_GPUS:
        return True
    return wait.code == RESERVED and len(wait.info) > 2 and wait.info[2] > 0


def reserve(
    p: Pass,
    job: PendingJob,
    pool: Pool,
    earlier: list[Reservation] = (),
    not_before: float = 0.0,
    projected: tuple[list, list] | None = None,
) -> Reservation | None:
    """Return the job's reservation at the earliest time it fits, not before
    `not_before`, or None if it never does. Times are asked at the events only (a
    blocked job does not fit now), and at `not_before` when it is now or later.

    The projection replays the end estimates on the free GPUs (held ones
    included) and the earlier reservations of the flavor: each takes its GPUs
    at its start and gives them back after its max runtime. `projected`: its events
    (projection(p, pool, earlier, not_before)), for a caller that asks for several
    jobs while nothing changes.
    """
    real, events = projected or projection(p, pool, earlier, not_before)
    proj = pool.index.copy()
    if pool.holding:
        for node, k in pool.held.items():
            proj.give(node, k)
    taken: dict[tuple, int] = {}  # (owner, node) -> GPUs it holds in the projection
    takes = [j for j, e in enumerate(events) if e[1] == TAKE]  # (in time order)
    times = [e[0] for e in events] if takes else []
    after = _free_after(proj, events, takes) if takes else {}
    i, n = 0, len(events)
    while i < n:
        t = events[i][0]
        while i < n and events[i][0] == t:
            event = events[i]
            if event[4] is not None:
                _step(proj, taken, event)
            elif event[3]:  # a running job's release (most events)
                proj.give(event[2], event[3])
            i += 1
        if t < not_before:
            continue
        where = placement.choose(proj, job.workers, job.gpus_per_worker)
        if where is None:
            continue
        window = i  # the events while it would run, if one of them takes GPUs
        if (k := bisect_left(takes, i)) < len(takes) and events[takes[k]][0] < t + job.max_runtime:
            window = bisect_left(times, t + job.max_runtime, i)
        nodes = _place(proj, job, where, after, i, window)
        if nodes is not None:
            return _reservation(job, t, nodes, [e for e in real if e[0] <= t])
    return None


def _place(
    proj: FreeIndex, job: PendingJob, where, after: dict, i: int, window: int
) -> list[tuple[int, int]] | None:
    """Take the job's GPUs from `proj` where they stay free while it would run (the
    events i..window-1), `where` (placement.choose) first, and return (node, workers);
    None, with `proj` as it was, where no placement does. A placement is checked on its
    own nodes (_spare); a node that fails is cut to what stays free there and the gang
    is placed again.

    Asked at the start alone, a third reservation (backfill_reservations = 3) took the 2
    GPUs left at +300 s for a 1-hour job, one of which the second needed from +900 s:
    told +300 s, it was held for the second and started at +2700 s (an adversarial
    tester's case; Slurm's backfill asks the whole time a job would run)."""
    cuts = Transaction()
    while where is not None:
        tx = Transaction()
        nodes = placement.take(proj, where, job.workers, job.gpus_per_worker, tx)
        if nodes is None:
            break
        short = {}
        for node, workers in nodes:
            gpus = workers * job.gpus_per_worker
            spare = _spare(after, node, i, window, proj.free[node] + gpus)
            if spare < gpus:
                short[node] = proj.free[node] + gpus - spare
        if not short:
            return nodes
        tx.rollback()
        for node, k in short.items():
            cuts.take(proj, node, k)
        where = placement.choose(proj, job.workers, job.gpus_per_worker)
    cuts.rollback()
    return None


def _free_after(proj: FreeIndex, events: list, takes: list[int]) -> dict:
    """Return node -> (indices, free GPUs after each) of the events of the nodes where an
    event takes GPUs (an earlier reservation's, a waiting preemptor's), replayed as
    reserve replays them: on the other nodes GPUs only come free."""
    nodes = {events[j][2] for j in takes}
    free = _Counts({node: proj.free[node] for node in nodes})
    owned: dict[tuple, int] = {}
    after: dict[int, tuple[list, list]] = {node: ([], []) for node in nodes}
    for j, event in enumerate(events):
        node = event[2]
        if node in free:
            _step(free, owned, event)
            seen = after[node]
            seen[0].append(j)
            seen[1].append(free[node])
    return after


def _spare(after: dict, node: int, i: int, window: int, now: int) -> int:
    """Return the fewest GPUs free on the node from now (`now` free) through the events
    i..window-1, as _free_after replayed them."""
    if node not in after:
        return now
    indices, free = after[node]
    lo, hi = bisect_left(indices, i), bisect_left(indices, window)
    return min(now, *free[lo:hi]) if hi > lo else now


def _step(index, taken: dict[tuple, int], event: tuple) -> None:
    """Apply one projection event to `index` (a FreeIndex, or _Counts)."""
    _, kind, node, k, owner = event
    if owner is None:
        if k:
            index.give(node, k)
    elif kind == GIVE:  # what it took, not what it asked for: a take may get less
        index.give(node, taken.pop((owner, node), 0))
    else:
        got = k if kind == NOTE else min(k, index.free[node])
        if kind == TAKE:
            index.take(node, got)
        taken[(owner, node)] = taken.get((owner, node), 0) + got


class _Counts(dict):
    """Free GPUs of some nodes, with a FreeIndex's give, take and free (_free_after)."""

    @property
    def free(self) -> dict:
        return self

    def give(self, node: int, k: int) -> None:
        self[node] += k

    def take(self, node: int, k: int) -> None:
        self[node] -= k


def projection(
    p: Pass, pool: Pool, earlier: list[Reservation] = (), not_before: float = 0.0
) -> tuple[list, list]:
    """Return reserve's events: the GPUs coming free (release_events) and, sorted, all
    it replays (those, the preemptors' promised GPUs and the earlier reservations)."""
    real = release_events(p, pool)
    events = [(t, GIVE, node, k, None) for t, node, k in real]
    if not_before >= p.now:  # (not_before = now: it may fit now, as an estimate asks)
        events.append((not_before, GIVE, 0, 0, None))  # a time to ask at, freeing nothing
    events += promised_events(p, pool)
    for r, res in enumerate(earlier):
        end = res.start + res.job.max_runtime
        for node, k in res.place:
            events += [(res.start, TAKE, node, k, r), (end, GIVE, node, k, r)]
    events.sort(key=lambda e: (e[0], -e[1]))  # at one time, notes, then releases, then takes
    return real, events


def _reservation(
    job: PendingJob, start: float, nodes: list[tuple[int, int]], released
) -> Reservation:
    """Turn the projected placement into the GPUs each node must keep free.

    Only the running jobs' releases count against the need: GPUs an earlier
    reservation gives back are counted for both (conservative: never too few held).
    """
    place = tuple((node, workers * job.gpus_per_worker) for node, workers in nodes)
    need = dict(place)
    for _, node, k in released:
        if node in need:
            need[node] -= k
    return Reservation(job, start, need, len(nodes), place)


def hold(pool: Pool, held_for: list[Reservation]) -> None:
    """Hide from long jobs the free GPUs the reservations still need (their sum).

    A reservation's need on a node is negative where the node gives back more before
    its start than it takes: that surplus is its own, not the other reservations'.
    Summed as it was, a second reservation's (backfill_reservations = 2, or a starving
    job's) un-held GPUs the first needed, and a long job took them (test_backfill.py).
    """
    index, held = pool.index, {}
    if pool.holding:
        for node, k in pool.held.items():
            index.give(node, k)
    need: dict[int, int] = {}
    for res in held_for:
        for node, k in res.need.items():
            if k > 0:
                need[node] = need.get(node, 0) + k
    for node, k in need.items():
        k = min(k, index.free[node])
        if k > 0:
            index.take(node, k)
            held[node] = k
    if held != pool.held or not pool.holding:
        pool.invalidate()
    pool.held = held
    pool.holding = True


def rehold(pool: Pool, held_for: list[Reservation], taken: dict[int, int]) -> None:
    """Hold the reservations' GPUs again after a job that ends before they start took
    `taken` (node -> GPUs) of them (an admitted short job, Backfill._admit_short; a short
    preemptor's target, Pass.preempt_beside_holds): those come back in time, so each
    reservation's need on the node is lessened by them, the first reservation first."""
    for node, k in taken.items():
        for res in held_for:
            if k > 0 and res.need.get(node, 0) > 0:
                d = min(k, res.need[node])
                res.need[node] -= d
                k -= d
    hold(pool, held_for)


def lift(pool: Pool) -> None:
    """Show the held GPUs again (for a job short enough to use them)."""
    for node, k in pool.held.items():
        pool.index.give(node, k)
    pool.holding = False


def restore(pool: Pool) -> None:
    """Hide the held GPUs again after lift(), with nothing changed in between."""
    for node, k in pool.held.items():
        pool.index.take(node, k)
    pool.holding = True


def _promise_budget(p: Pass, job: PendingJob, start: float) -> None:
    """Commit the GPU-hours of a job given a start time (a GPU reservation, a quota or
    cohort hold) to its team's budget, as a preemptor waiting for its victims is
    (Pass.charge): the jobs of its team after it in the pass may not use them. Left
    free, a team's 50-minute job backfilled beside its gang's reservation took the
    budget the gang needed, and the gang, told "reserved for it from +1 h", was
    `budget_exhausted` from the next pass until the month reset (an adversarial
    tester's case, test_budgets.py)."""
    if p.budgets is not None:
        p.budgets.promise(job, start)

"""One scheduling pass: snapshot in, plan out.

`schedule` is the only entry point. It is pure: no clock (time is
`snapshot.now`), no I/O, no randomness, and the same snapshot, in any tuple
order, gives the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice

from . import placement
from .arrays import beyond_limit
from .backfill import CLAIM_HOLD, lift, rehold, restore
from .budgets import Budgets, job_gpu_hours
from .explain import verdicts
from .model import Admission, JobId, PendingJob, Plan, Reservation, Snapshot
from .ordering import queue_key, victim_key
from .placement import Where
from .policies import get_policy
from .preemption import (
    held_from_borrowing,
    honour_reservations,
    lower_priority,
    may_preempt,
    most_lost,
    try_preempt,
    try_priority_preempt,
    unreclaimable,
    while_borrowing,
)
from .quota import Ledger, Probe, TeamBook, contribution
from .reasons import (
    ARRAY_LIMIT,
    BACKOFF,
    CAPACITY,
    COHORT_BUSY,
    NEVER_FITS,
    NO_NODES,
    PLACED,
    PREVIOUS_ATTEMPT,
    PRIORITY,
    QUOTA,
    RESERVED,
    Wait,
)
from .state import (
    Pool,
    Running,
    Started,
    Stops,
    Transaction,
    build_pools,
    build_running,
    charge_running,
    mark_ending,
)


def schedule(snapshot: Snapshot) -> Plan:
    """Run one scheduling pass and return its plan.

    1. Build the pass state: a pool of free GPUs per flavor, team usage from
       the running jobs, the policy named by snapshot.config.policy. Jobs in
       their requeue backoff (eligible_at > now) are set aside, and so are
       requeued jobs whose previous attempt's workers have not stopped yet
       (previous_attempt_stopping), and tasks of job arrays beyond their
       `%N` limit (scheduler.arrays). Preemptors of
       earlier passes named by their victims are admitted, or get their
       reservation back, before any other job (scheduler.preemption).
    2. Order the eligible pending jobs with the policy's order (fair share or
       submit).
    3. Consider each job in that order, up to max_backfill_candidates
       (Pass.consider: static checks, budget, gate, quota, placement,
       preemption, reservation).
    4. Jobs not reached wait with reason `priority`; jobs set aside wait with
       reason `backoff`, `previous_attempt` or `array_limit`, after every other job in
       pass order (only `never_fits`, `no_nodes` and `budget_exhausted`
       outrank them).
    5. Explain: a verdict with reason, position and estimated start for every
       job not admitted.
    """
    p = Pass(snapshot)
    p.honour_reservations(snapshot)
    order = p.policy.order(p)
    for job in islice(order, p.config.max_backfill_candidates):
        p.consider(job)
    for job in order:
        p.not_reached(job)
    for job in p.backing_off:
        p.back_off(job)
    for job in p.old_attempts:
        p.await_old_attempt(job)
    for job in p.array_held:
        p.hold_for_array(job)
    return p.plan()


class Pass:
    """The mutable state of one pass and the decisions taken so far."""

    __slots__ = (
        "config",
        "now",
        "policy",
        "pools",
        "ledger",
        "_running_jobs",
        "_running",
        "queued",
        "pending",
        "backing_off",
        "old_attempts",
        "array_held",
        "array_claims",
        "gate",
        "budgets",
        "preempting",
        "admissions",
        "preemptions",
        "admitted",
        "waits",
        "order",
        "_order_ids",
        "_order_seen",
        "took",
        "preempt_fails",
        "_preempt_fails_shown",
        "own_cap",
        "charged",
        "waiting_preemptors",
        "claimed",
        "claim_until",
        "demand",
        "demanded",
        "sizes",
        "smallest",
        "tops",
        "_lower_gpus",
        "_by_flavor",
        "_longest_grace",
        "_by_team",
        "_stopping",
        "lent",
        "_own",
        "_stopping_at_start",
        "_reclaim",
        "victim_keys",
    )

    def __init__(self, snapshot: Snapshot) -> None:
        cfg = self.config = snapshot.config
        self.now = snapshot.now
        self.policy = get_policy(cfg.policy)
        self.pools = build_pools(snapshot.nodes, snapshot.running, cfg.topology_key)
        self.ledger = Ledger(snapshot.teams, cfg.half_life)
        # Usage is charged now; the Running views are built only if a step needs them
        # (preemption, reservations, explain): most passes of a light cluster never do.
        self._running_jobs = snapshot.running
        self._running: list[Running] | None = None
        self._own = charge_running(snapshot.running, self.ledger)
        self._stopping_at_start = any(r.stopping for r in snapshot.running)
        self._reclaim: dict[tuple[str, str], dict[int, int]] = {}  # Pass.reclaimable
        self.victim_keys: dict[int, tuple] = {}  # job id -> ordering.job_victim_key
        # Every pending job in queue order (for positions); `pending` are the ones
        # the policy orders, `backing_off` those not eligible yet (scheduler.requeue),
        # `old_attempts` the eligible ones whose previous attempt is still stopping.
        self.queued = self.pending = sorted(snapshot.pending, key=queue_key)
        now = self.now
        self.backing_off = [j for j in self.queued if j.eligible_at > now]
        self.old_attempts = [
            j for j in self.queued if j.previous_attempt_stopping and j.eligible_at <= now
        ]
        if self.backing_off or self.old_attempts:
            self.pending = [
                j for j in self.queued if j.eligible_at <= now and not j.previous_attempt_stopping
            ]
        # Tasks of job arrays beyond their %N limit (scheduler.arrays) are set aside too;
        # a task that preempted keeps its slot (arrays.claimants).
        held = beyond_limit(self.pending, snapshot.running, snapshot.pending)
        self.array_held, self.array_claims = held
        if self.array_held:
            held = {j.id for j in self.array_held}
            self.pending = [j for j in self.pending if j.id not in held]
        self.gate = self.policy.gate(cfg)
        # GPU-hour budgets (scheduler.budgets); None when no team has one
        self.budgets = Budgets(snapshot) if snapshot.budgets else None
        self.preempting = self.policy.preemption and cfg.preemption
        self.admissions: list[Admission] = []
        self.preemptions: list = []
        self.admitted: dict[str, list[Started]] = {}  # flavor -> jobs admitted in this pass
        self.waits: dict[int, Wait] = {}
        self.order: list[PendingJob] = []  # jobs in the order they were considered
        self._order_ids: dict[int, PendingJob] = {}  # Pass.considered's index of order
        self._order_seen = 0  # how much of order it holds
        # (team, queue, flavor) -> [jobs, GPUs, {node: GPUs}] admitted in this pass
        self.took: dict[tuple[str, str, str], list] = {}
        self.preempt_fails: dict[tuple, int] = {}
        # the same, for searches made with the held GPUs shown (Pass.preempt_beside_holds)
        self._preempt_fails_shown: dict[tuple, int] = {}
        # (team's book, most GPUs it may use) while try_priority_preempt searches
        self.own_cap: tuple | None = None
        # (team, flavor) -> GPUs charged for its preemptors waiting for victims
        self.charged: dict[tuple[str, str], int] = {}
        # (team, flavor) -> (preemptor, when its victims will have stopped): claim_wait
        self.claimed: dict[tuple[str, str], tuple[JobId, float]] = {}
        # each preemptor waiting for its victims, and when they will have stopped: its
        # charge ends its max runtime later (backfill.cohort_free_at)
        self.waiting_preemptors: list[tuple[PendingJob, float]] = []
        # preemptor -> the jobs reaching their max runtime its claim counted on, and the
        # horizon they end by (Reservation.until, ending; state.mark_ending)
        self.claim_until: dict[JobId, tuple[float, tuple[JobId, ...]]] = {}
        # (team, flavor) -> GPUs its jobs within nominal not yet considered ask for;
        # built when a job that would borrow first needs it (kept_for_others)
        self.demand: dict[tuple[str, str], int] | None = None
        self.demanded: set[int] = set()  # the jobs `demand` counts (Pass._demand)
        # (team, flavor) -> (workers, GPUs per worker) -> how many of those jobs have it,
        # and the fewest GPUs one of them asks for
        self.sizes: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
        self.smallest: dict[tuple[str, str], float] = {}
        # (team, flavor) -> (queue, priority) -> the GPUs of each of those jobs not
        # considered yet; and (team, flavor, queue, priority) -> the GPUs of the team's
        # running jobs one of them could preempt by priority (as the pass began)
        self.tops: dict[tuple[str, str], dict[tuple[str, int], list[int]]] = {}
        self._lower_gpus: dict[tuple[str, str, str, int], int] = {}
        self._by_flavor: dict[str, list[Running]] | None = None
        self._longest_grace: dict[str, float] = {}  # flavor -> (Pass.preempt_beside_holds)
        self._by_team: dict[tuple[str, str], list[Running]] | None = None
        self._stopping: dict[str, list[Running]] | None = None
        # (team, flavor) -> GPUs of idle quota this pass lent it (Pass.borrows)
        self.lent: dict[tuple[str, str], int] = {}

    # -- step 3 ---------------------------------------------------------------

    def consider(self, job: PendingJob) -> None:
        """Admit the job or record why it waits.

        a. static checks: never_fits, no_nodes; then the GPU-hour budget
           (budget_exhausted), which ends the job's turn: no reservation, no
           preemption, no gate hold (freed GPUs would not start it)
        b. the gate: is a job ahead blocking this one (strict FIFO)? Then a
           preemptor of its team waiting for its victims (claim_wait)
        c. quota: nominal, borrowing and lending limits (scheduler.quota)
        d. placement, under the gate's rules (backfill reservation)
        e. preemption, if the policy allows it (scheduler.preemption)
        f. the gate notes the blocked job (reservation, head-of-line)
        g. a capacity reason becomes `priority` if jobs ahead in its queue
           took the GPUs in this pass
        """
        self.order.append(job)
        pool = self.pools.get(job.flavor)
        book = self.ledger.book(job.team)
        if self.demand is not None:
            self._considered(job)
        wait = self.static_wait(job, pool, book)
        if wait is None and (over := self.budget_wait(job)) is not None:
            self.waits[job.id] = over  # no reservation, preemption or gate hold (step a)
            return
        wait = wait or self.gate.blocked(self, job) or self.quota_or_claim(job, book)
        if wait is None:
            wait = self.gate.try_admit(self, job, pool)
            if wait is None:
                return
        if self.preempting and may_preempt(wait):
            found = self.preempt_beside_holds(job, pool, lambda: try_preempt(self, job, pool))
            wait = found or self._unreclaimable(job, wait)
        elif self.preempting and held_from_borrowing(wait):
            held = wait
            wait = (
                self.preempt_beside_holds(
                    job, pool, lambda: try_priority_preempt(self, job, pool, held)
                )
                or wait
            )
        if not (wait.code == COHORT_BUSY and wait.info[4] and wait.info[4][0] == "kept"):
            # held back only for this pass (kept_for_others): no cohort hold for it
            wait = self.gate.after_block(self, job, pool, wait) or wait
        self.waits[job.id] = self.ahead_in_queue(job, pool, wait)

    def preempt_beside_holds(self, job: PendingJob, pool: Pool | None, attempt) -> Wait | None:
        """Return attempt() (a preemption for the job), made with the GPUs held for the
        flavor's backfill reservations shown if the job ends before every one of them
        starts even once the longest grace period of the flavor's running jobs is over,
        and the jobs the pass counts as ending have ended (a preemptor starts when its
        victims and the stopping or ending jobs it waits for are gone: the rule of
        Backfill._admit_short, Gate.placed_short, bound by that wait). What it takes of the
        held GPUs comes back before the reservations start, so their need is lessened by
        it and the rest held again. Hidden, a 2-GPU, 200 s job beside one free GPU held
        for a gang 100 h away preempted two borrowers' jobs where one did (an adversarial
        tester's case, test_reclaim_adversarial.py)."""
        if pool is None or not pool.holding or not pool.held:
            return attempt()
        if not self.gate.placed_short(self, job):  # (the cheap test first)
            return attempt()
        grace = self._longest_grace.get(job.flavor)
        if grace is None:
            running = self.running_in(job.flavor)
            # (a job counted as ending, for a kept claim past the flavor's horizon too, by
            # its end: a review's case, where a preemptor waited for one 440 s past the
            # longest grace period, on the held GPUs, and the gang started 390 s late)
            grace = max(
                (
                    max(r.end, self.now) - self.now
                    if r.stopping
                    else max(r.end - self.now, r.job.grace_period)
                    if r.ending
                    else r.job.grace_period
                    for r in running
                ),
                default=0.0,
            )
            self._longest_grace[job.flavor] = grace
        if not self.gate.placed_short(self, job, after=grace):
            return attempt()
        held_for, held = self.gate.held_for(job.flavor), dict(pool.held)
        lift(pool)
        # A search that failed with the held GPUs hidden says nothing of one that sees
        # them: the failures remembered (preempt_fails) are kept apart. Shared, a long job
        # that failed made a later short one of its key wait where it could preempt.
        hidden, self.preempt_fails = self.preempt_fails, self._preempt_fails_shown
        try:
            return attempt()
        finally:
            self.preempt_fails = hidden
            free = pool.index.free
            took = {n: k - free[n] for n, k in held.items() if free[n] < k}  # held GPUs taken
            if not took:
                restore(pool)  # (most often: no preemption, or none on held GPUs)
            else:
                rehold(pool, held_for, took)

    def static_wait(self, job: PendingJob, pool: Pool | None, book: TeamBook) -> Wait | None:
        """Return never_fits or no_nodes if the job cannot run in this cluster at all."""
        if job.workers < 1 or job.gpus_per_worker < 1:
            return Wait(NEVER_FITS, ("shape",))
        if pool is None:
            return Wait(NO_NODES)
        per_worker = job.gpus_per_worker
        if per_worker > pool.max_total:
            return Wait(NEVER_FITS, ("node", pool.max_total))
        slots = pool.static_slots(per_worker)
        if job.workers > slots:
            return Wait(NEVER_FITS, ("topology", slots))
        most = self.ledger.most_ever(book, job.flavor)
        if job.gpus > most:
            return Wait(NEVER_FITS, ("quota", most))
        return None

    def budget_wait(self, job: PendingJob) -> Wait | None:
        """Return budget_exhausted if the job could cross its team's GPU-hour budget."""
        return None if self.budgets is None else self.budgets.wait(job)

    def quota_or_claim(self, job: PendingJob, book: TeamBook) -> Wait | None:
        """Return the job's quota wait if its team's limit cannot take it at all (`quota`:
        the true reason, whoever waits), else the claim hold, else the cohort's."""
        wait = self.quota_wait(job, book)
        if wait is not None and wait.code == QUOTA:
            return wait
        return self.claim_wait(job, book) or wait

    def claim_wait(self, job: PendingJob, book: TeamBook) -> Wait | None:
        """Return `reserved` (a quota hold) if the job would take its team past its nominal
        quota while a preemptor of its team waits for its victims.

        The preemptor's claim is what its team's nominal quota leaves it once the
        stopping jobs have stopped (scheduler.preemption._claims). A job of its team
        admitted meanwhile beyond that (a victim requeued and readmitted at once, as a
        borrower) took the claim away at the next pass, and the preemptor, now over
        its nominal quota, preempted that job again (tests/scheduler/test_runs.py).
        So does a short job that would end before the victims stop, at every pass
        before it ends: none passes (a review found the one-time exemption for them
        cost a second round of victims, test_reclaim_adversarial.py).
        """
        held = self.claimed.get((job.team, job.flavor))
        if held is None:
            return None
        holder, start = held
        if self.within_nominal(book, job):
            return None
        return Wait(RESERVED, (holder, start, CLAIM_HOLD))

    def claim(self, job: PendingJob, until: float) -> None:
        """Note a preemptor waiting for its victims until `until` (claim_wait)."""
        self.waiting_preemptors.append((job, until))
        key = (job.team, job.flavor)
        held = self.claimed.get(key)
        if held is None or until < held[1]:
            self.claimed[key] = (job.id, until)

    def quota_wait(self, job: PendingJob, book: TeamBook) -> Wait | None:
        """Return quota or cohort_busy if the team may not take the job's GPUs now.

        A job that would borrow may not take the idle quota that teams of its
        cohort within their nominal quota still wait for in this pass
        (`kept_for_others`): lent now, it would be reclaimed in the same pass.
        Nor may it take the free GPUs that quota stands for: where the cohort's
        quota exceeds its GPUs (quota lent beyond them, nodes down, teams outside
        the cohort), idle quota left over is no GPU left over, and a borrower on
        the free GPUs those teams wait for would have them reclaim its team's
        older jobs in the same pass. That holds of quota a team does not lend too
        (its lending limit): the borrower took another team's idle quota, and the
        free GPUs the team within nominal waited for (test_reclaim_fresh.py). And it
        holds of which GPUs, not only how many (_takes_usable): a borrower placed on
        the one whole node a team's 8-GPU job could use, beside 14 free GPUs, left it
        waiting `fragmented`.
        """
        f = job.flavor
        room = self.ledger.headroom(book, f)
        kept = 0
        extra: tuple = ()
        if job.gpus <= room:
            if not self.preempting or book.cohort is None:
                return None
            if not self.ledger.borrowed(book, f, job.gpus):
                return None
            kept, waited, parts = self.kept_for_others(book, f)
            if waited:
                room = self.ledger.headroom(book, f, kept)
                extra = ("kept", kept) if kept else ()
                free = self._free(f)
                if free - waited < job.gpus:  # the free GPUs may bind: only those usable
                    usable = min(free, self._usable(parts, f)[1])  # with GPUs coming free
                    if free - usable < room:  # they do: say so, not that quota is short
                        room = free - usable
                        extra = ("kept", kept, usable, free)
            if job.gpus <= room:
                if not waited or not self._takes_usable(job, parts):
                    return None
                extra = ("kept", kept, PLACED, free)
        used, limit = book.used(f), self.ledger.limit(book, f)
        code = QUOTA if self.ledger.refuses(book, job) else COHORT_BUSY
        if code == QUOTA and book.cohort is not None:  # and would the cohort lend it then?
            then = self.ledger.headroom_with(book, f, {book: limit - job.gpus - used})
            extra = ("cohort", max(0, then)) if then < job.gpus else ()
        return Wait(code, (used, book.quota(f).nominal, limit, room, extra, self.said(book, f)))

    def _demand(self) -> dict[tuple[str, str], int]:
        """Return the GPUs each cohort team's pending jobs that fit its nominal quota and
        were not considered yet ask for: not a job over its GPU-hour budget, which takes
        nothing in this pass (budget_wait: a budget only fills during a pass), for which
        a reclaim's look-ahead took a dearer target (a review's case,
        test_reclaim_lookahead.py) and idle quota was kept; nor one over it with the
        team's jobs before it (in queue order, the pass's order within a team) that fit
        it and may start (not never_fits: static_wait), within nominal quota or not,
        charged as the pass would charge them: a 1x8 reclaim went to a node with twice
        the work to lose, to keep a block for a 2x8 gang that the same pass then told
        `budget_exhausted` after its team's 1-GPU job ahead of it (an adversarial
        helper's case, test_budgets.py)."""
        demand: dict[tuple[str, str], int] = {}
        book = self.ledger.book
        seen = {j.id for j in self.order}
        budgets = self.budgets
        ahead: dict[tuple[str, str], float] = {}  # GPU-hours of the jobs counted so far
        for job in self.pending:
            if job.id in seen:
                continue
            b = book(job.team)
            if job.workers < 1 or job.gpus_per_worker < 1:
                continue  # never fits (static_wait): no demand
            key = (job.team, job.flavor)
            if budgets is not None:
                if budgets.wait(job, ahead.get(key, 0.0)) is not None:
                    continue
                if self.static_wait(job, self.pools.get(job.flavor), b) is None:
                    ahead[key] = ahead.get(key, 0.0) + job_gpu_hours(job)  # it may start
            if b.cohort is not None and job.gpus <= b.quota(job.flavor).nominal:
                demand[key] = demand.get(key, 0) + job.gpus
                self.demanded.add(job.id)
                shapes = self.sizes.setdefault(key, {})
                shape = (job.workers, job.gpus_per_worker)
                shapes[shape] = shapes.get(shape, 0) + 1
                self.smallest[key] = min(job.gpus, self.smallest.get(key, math.inf))
                self.tops.setdefault(key, {}).setdefault((job.queue, job.priority), []).append(
                    job.gpus
                )
        return demand

    def _considered(self, job: PendingJob) -> None:
        """A job's own demand stops holding back borrowers once it has been considered."""
        key = (job.team, job.flavor)
        if job.id in self.demanded:  # (not one it left out: over its budget when built)
            self.demanded.discard(job.id)
            self.demand[key] -= job.gpus
            shapes, shape = self.sizes[key], (job.workers, job.gpus_per_worker)
            left = shapes.pop(shape, 1) - 1
            if left:
                shapes[shape] = left
            elif job.gpus == self.smallest[key]:
                self.smallest[key] = min((w * g for w, g in shapes), default=math.inf)
            sizes = self.tops.get(key, {}).get((job.queue, job.priority))
            if sizes and job.gpus in sizes:
                sizes.remove(job.gpus)

    def kept_for_others(
        self, book: TeamBook, flavor: str
    ) -> tuple[int, int, list[tuple[int, tuple[str, str]]]]:
        """Return the cohort's idle quota that other teams within nominal wait for in this
        pass, the GPUs they wait for (the idle nominal quota their jobs ask for, lent or
        not: a lending limit keeps quota from borrowers, not GPUs), and the parts of
        the latter: (GPUs, (team, flavor)) per team.

        For each other team: its idle lendable quota, at most what its pending
        jobs that fit its nominal quota and were not considered yet ask for; none
        if not even the smallest of them fits what it has left of its nominal
        quota now (it would borrow: no claim on anyone's idle quota), even with
        the GPUs its own lower-priority jobs hold, which one of them may preempt
        (a priority-1 8-GPU job of a team using 2 of its nominal 9 with priority-0
        jobs: lent out, the idle 7 went to a borrower, and the job then reclaimed
        that borrower's older job in the same pass), and with its jobs that end
        before a victim could stop gone, as preemption's rule 1 counts them (counted
        with them, a team whose 4-GPU job ended 10 s later was not kept for; its
        idle 4 were lent, and its 8-GPU job reclaimed the borrower's older 8-GPU job
        in the same pass: tests/scheduler/test_reclaim_fresh.py).
        """
        if self.demand is None:
            self.demand = self._demand()
        kept = waited = 0
        parts = []
        for other in self.ledger.members.get(book.cohort, ()):
            key = (other.name, flavor)
            want = self.demand.get(key, 0)
            if other is book or want <= 0:
                continue
            q = other.quota(flavor)
            used = self.settled(other, flavor)
            # `ended` <= `used`, so the first tests only spare building the pass's Stops
            if used + self.smallest[key] > q.nominal:
                least = min(self.smallest[key], self._lower(key))
                if used + least > q.nominal and self.ended(other, flavor) + least > q.nominal:
                    continue
            k = min(want, max(0, q.nominal - used))
            if k:
                kept += min(k, max(0, contribution(q, used)))
                waited += k
                parts.append((k, key))
        return kept, waited, parts

    def _lower(self, key: tuple[str, str]) -> float:
        """Return the fewest GPUs one of a team's waiting jobs not considered yet adds to
        its team's usage once it preempted its own queue's lower-priority jobs."""
        least = math.inf
        for (queue, priority), sizes in self.tops.get(key, {}).items():
            if sizes:
                least = min(least, min(sizes) - self._preemptible_below(key, queue, priority))
        return least

    def _preemptible_below(self, key: tuple[str, str], queue: str, priority: int) -> int:
        """Return the GPUs of a team's preemptible running jobs of a queue below a priority
        (those running as the pass began, not stopping; cached for the pass)."""
        level = (*key, queue, priority)
        if level not in self._lower_gpus:
            victims = lower_priority(self, *key, queue, priority)
            self._lower_gpus[level] = sum(r.job.gpus for r in victims)
        return self._lower_gpus[level]

    def forget_lower(self, flavor: str, teams: Iterable[str]) -> None:
        """Forget the teams' cached lower-priority GPUs of a flavor (_preemptible_below):
        their jobs just stopped as victims are no longer there to preempt. Kept, a team
        whose own priority preemptor had stopped its priority-0 jobs still counted them
        for its next job, that job could not fit even so, and the idle quota kept for it
        held a borrower back for the pass (test_reclaim_fresh.py)."""
        teams = set(teams)
        for level in [level for level in self._lower_gpus if level[0] in teams]:
            if level[1] == flavor:
                del self._lower_gpus[level]

    def _usable(self, parts: list[tuple[int, tuple[str, str]]], flavor: str) -> tuple[int, int]:
        """Return how much of the kept quota the waiting teams' jobs could use on the free
        GPUs now: per team, at most what its waiting jobs that fit them ask for (GPUs a
        2x8 gang cannot be placed on are not what it waits for, even beside a 1-GPU job).
        Twice: without victims, and with the GPUs they may reclaim (_beside_reclaim).

        Free GPUs include those that come free without victims (_coming_free), as
        preemption's rule 2 counts them: without them, the 4 free GPUs beside a team's
        job ending in 15 s were "not what its 2x4 gang waits for", were lent, and the
        gang then reclaimed the borrower's older job in the same pass (an adversarial
        tester's case, test_reclaim_fresh.py)."""
        pool = self.pools.get(flavor)
        if pool is None:
            return 0, 0
        tx = Transaction()
        fails = pool.fails
        if self._coming_free(pool, tx):
            pool.fails = {}  # another view of the pool's GPUs until rollback
        try:
            plain = usable = 0
            for k, key in parts:
                fitting, beside = 0, []
                for (w, g), n in self.sizes[key].items():
                    if self.fits_shape(pool, w, g):
                        fitting += n * w * g
                    else:
                        beside.append((w, g, n))
                plain += min(k, fitting)
                if fitting < k and beside and self.preempting:
                    fitting += self._beside_reclaim(pool, key, beside, k - fitting)
                usable += min(k, fitting)
            return plain, usable
        finally:
            tx.rollback()
            pool.fails = fails

    def _coming_free(self, pool: Pool, tx: Transaction) -> bool:
        """Let the pool's placement questions see, until tx is rolled back, the GPUs that
        come free without a victim and that no preemptor counts on: those of stopping
        jobs (Stops.future, rule 2's view) and of jobs that reach their max runtime
        before a victim could stop (Stops.ending_surplus). Return whether there were
        any."""
        if not self.preempting:
            return False
        stops = self.stops(pool)
        if not stops.on and not stops.ending_on:
            return False
        index = stops.future()
        tx.view(pool, index)
        for node in stops.ending_on:
            k = min(stops.ending_surplus(node), index.cap - index.free[node])
            if k > 0:
                tx.give(index, node, k)
        return True

    def asked_apart(self, question, *args):
        """Return question(*args) with the pass's lazily filled caches left as they were:
        what an explanation asks (Backfill.start_by) must not fill them before the pass
        would, or a later decision reads a figure from before a preemption (a review:
        `_reclaim` filled early refused a borrower the pass without explanations
        admitted)."""
        reclaim, lower = self._reclaim, self._lower_gpus  # added to while asked: the newest go
        sizes = len(reclaim), len(lower)
        try:
            return question(*args)
        finally:
            for cache, size in ((reclaim, sizes[0]), (lower, sizes[1])):
                while len(cache) > size:
                    del cache[next(reversed(cache))]

    def _takes_usable(self, job: PendingJob, parts: list[tuple[int, tuple[str, str]]]) -> bool:
        """Return whether the job, placed now as it would be, leaves the waiting teams'
        jobs less of the free GPUs they could use (_usable) than they have now: the
        GPUs kept for them are a count, and a count does not say which GPUs their
        shapes need. Nothing is changed.

        A job that ends before every GPU reservation is placed with the held GPUs
        shown (Gate.placed_short, Backfill._admit_short), so it is asked where it
        would go then; on each node it takes the held GPUs first, since those come
        back before the reservations start and stay held, and only the rest leaves
        the others less. Asked with them hidden, a short borrower was let through
        for 4 unheld GPUs of one node and placed on another, the only one a 6-GPU
        job within nominal could use (test_reclaim_fresh.py).
        """
        pool = self.pools.get(job.flavor)
        if pool is None:
            return False
        short = pool.holding and self.gate.placed_short(self, job)
        if short:
            lift(pool)
        where = self.choose(pool, job)
        tx = Transaction()
        nodes = (
            None
            if where is None
            else placement.take(pool.index, where, job.workers, job.gpus_per_worker, tx)
        )
        tx.rollback()
        if short:
            restore(pool)
        if nodes is None:
            return False  # it is not placed now either: the capacity reason says so
        before = self._usable(parts, job.flavor)
        fails, pool.fails = pool.fails, {}
        try:
            for node, workers in nodes:
                k = workers * job.gpus_per_worker - (pool.held.get(node, 0) if short else 0)
                if k > 0:
                    tx.take(pool.index, node, k)
            after = self._usable(parts, job.flavor)
            return after[0] < before[0] or after[1] < before[1]
        finally:
            tx.rollback()
            pool.fails = fails

    def _beside_reclaim(self, pool: Pool, key: tuple[str, str], shapes: list, most: int) -> int:
        """Return the free GPUs a team's waiting jobs within nominal that do not fit the
        free GPUs would use together with GPUs they may reclaim (`reclaimable`): as many
        of each shape as the free and reclaimable GPUs hold, workers placed most free
        node first. Without this, the 4 free GPUs beside a borrower's 4-GPU job were "not
        what an 8-GPU job waits for": lent to a borrower, and the job then reclaimed two
        jobs elsewhere in the same pass instead of one (a review's case,
        test_reclaim_adversarial.py). Workers are counted per node, not per domain: a gang
        held to one block may be kept more than it could use, for the rest of the pass.
        Counts up to `most`; one pass over the nodes per shape."""
        team = self.ledger.book(key[0])
        reclaimable = self.reclaimable(pool, team)
        if not reclaimable:
            return 0
        free = pool.index.free
        nodes = set(reclaimable)
        nodes.update(n for n, c in enumerate(free) if c)
        order = sorted(nodes, key=lambda n: (-free[n], n))
        left = {n: free[n] for n in order}
        used = 0
        for w, g, count in shapes:
            rooms = [(n, (left[n] + reclaimable.get(n, 0)) // g) for n in order]
            workers = min(count, sum(k for _, k in rooms) // w) * w
            for n, room in rooms:
                if workers <= 0:
                    break
                if room > 0:
                    here = min(room, workers)
                    took = min(left[n], here * g)
                    left[n] -= took
                    used += took
                    workers -= here
            if used >= most:
                break
        return used

    def reclaimable(self, pool: Pool, team: TeamBook) -> dict[int, int]:
        """Return node -> GPUs a within-nominal job of the team could reclaim there: the
        preemptible jobs of its cohort's other teams that borrow, as many of each team as
        preemption may take (a team's victims but its largest add up to less than what it
        borrows: `_Search.allowed`), in victim order; cached per pass and team until a
        preemption of its cohort (Pass.charge).
        Counted without that limit, 8 free GPUs were kept for a gang that could reclaim
        only one of a team's two jobs, and sat idle (a review's case)."""
        cache = self._reclaim
        k = (pool.flavor, team.name)
        if k not in cache:
            cache[k] = self.reclaimable_now(pool, team)
        return cache[k]

    def reclaimable_now(
        self, pool: Pool, team: TeamBook, gone: Iterable[Running] = ()
    ) -> dict[int, int]:
        """Return `reclaimable` as the pass stands now, uncached: without the jobs that
        victims of this pass have become since (a reclaim's look-ahead, preemption._spoiled,
        counted a block's jobs an earlier reclaim had stopped as the gang's to reclaim, and
        let the next reclaim take the gang's last block: a review's case); with `gone`, as
        it will be once those running jobs have stopped (their teams borrowing that much
        less)."""
        out: dict[int, int] = {}
        for r in self._reclaim_jobs(pool, team, gone):
            for node, g in r.nodes:
                out[node] = out.get(node, 0) + g
        return out

    def _reclaim_jobs(self, pool: Pool, team: TeamBook, gone: Iterable[Running] = ()):
        """Yield the running jobs `reclaimable_now` counts: of each other team of the
        cohort that borrows, its preemptible jobs, not stopping nor ending, as many as
        preemption may take (while_borrowing), its largest first, then in victim order."""
        f = pool.flavor
        if team.cohort is None:
            return
        left = {id(r) for r in gone}
        less: dict[TeamBook, int] = {}
        for r in gone:
            less[r.book] = less.get(r.book, 0) + r.job.gpus
        for other in self.ledger.members.get(team.cohort, ()):
            if other is team:
                continue
            jobs = [
                r
                for r in self.running_of(other.name, f)
                if not (r.stopping or r.ending or not r.job.preemptible) and id(r) not in left
            ]  # an ending job's GPUs come free without a victim (_coming_free)
            if not jobs:
                continue
            borrows = self.borrows(other, f, self.settled(other, f) - less.get(other, 0))
            if borrows <= 0:
                continue
            jobs.sort(key=lambda r: victim_key(r.job, True))
            big = max(r.job.gpus for r in jobs)
            largest = next(r for r in jobs if r.job.gpus == big)  # taken first: the most
            gpus = 0
            for r in (largest, *(r for r in jobs if r is not largest)):
                if while_borrowing(gpus, big, r.job.gpus, borrows):
                    gpus += r.job.gpus
                    yield r

    def reachable(
        self, pool: Pool, team: TeamBook, charged: PendingJob, lower: Iterable[Running], want: int
    ) -> int:
        """Return `want` GPUs of the pool's flavor, or less: the most quota the team could
        have in this pass once `charged` (a preemptor of its cohort, whose own candidates
        are `lower`) has its GPUs: its headroom with every job of the cohort that stops or
        ends gone (`ended`), every preemptible job of its own (a job of its may preempt
        them by priority) and the preemptor's `lower` given back, and of each other team
        of the cohort that borrows, the most any reclaims may take (its preemptible jobs,
        at most what it borrows less one plus its largest: Kueue's rule, while_borrowing;
        the jobs `reclaimable_now` counts are one such set, not always the largest, and
        a 1x8 job whose quota a team's 4-, 2- and 2-GPU jobs made up lost its place, a
        review's case). Asked only if `want` does not fit without them: giving back
        never lowers a headroom. A reclaim's look-ahead keeps a later job's place only up
        to this: one whose quota a non-preemptible borrower held had a node kept whole
        for it, and the preemptor lost 60 times the work elsewhere (a helper's case,
        test_reclaim_lookahead.py)."""
        f = pool.flavor
        probe = Probe(self.ledger, team, f)
        members = self.ledger.members.get(team.cohort, ())
        for member in members:
            probe.change(member, self.ended(member, f) - member.used(f))
        mine = self.ledger.book(charged.team)
        probe.change(mine, charged.gpus)
        if probe.headroom() >= want:
            return want
        given = {id(r): r for r in lower}
        given.update(
            (id(r), r)
            for r in self.running_of(team.name, f)
            if not (r.stopping or r.ending or not r.job.preemptible)
        )
        for r in given.values():
            probe.change(r.book, -r.job.gpus)
        for other in members:
            if other is team or other is mine:
                continue
            sizes = [
                r.job.gpus
                for r in self.running_of(other.name, f)
                if not (r.stopping or r.ending or not r.job.preemptible)
            ]
            probe.change(other, -most_lost(self.borrows(other, f, self.settled(other, f)), sizes))
        return min(want, int(probe.headroom()))

    def _free(self, flavor: str) -> int:
        """Return the free GPUs of a flavor in the pool's current view: not reserved for a
        preemptor, nor held for a backfill reservation while the pool holds them."""
        pool = self.pools.get(flavor)
        return 0 if pool is None else pool.index.total

    def _unreclaimable(self, job: PendingJob, wait: Wait) -> Wait:
        """Say why reclaim cannot help a within-nominal job whose cohort lent its quota out."""
        if wait.code != COHORT_BUSY or not self.config.explain or wait.info[4]:
            return wait
        why = unreclaimable(self, job, wait.info[3])
        return wait if why is None else Wait(COHORT_BUSY, (*wait.info[:4], why, *wait.info[5:]))

    def charge(self, job: PendingJob) -> None:
        """Charge a preemptor's GPUs to its team while it waits for its victims, and
        forget what its cohort's teams may reclaim (`reclaimable`): its victims, stopped
        first (preemption.commit), borrow no more. Kept, a borrower was held back for
        GPUs kept for a team whose reclaim an earlier one of the pass had ruled out, and
        that team's job escaped its gang's hold as one that may reclaim (a helper's
        case, test_reclaimable_cache.py).

        Its GPU-hours are committed to its team's budget too, as an admission's are:
        left out, a later job of its team preempted for itself within the budget, and
        at the next pass, the preemptor admitted first, was over it, its victim's work
        lost for nothing (a random disrupted run, test_budgets.py)."""
        key = (job.team, job.flavor)
        book = self.ledger.book(job.team)
        self.ledger.add(book, job.flavor, job.gpus)
        self.charged[key] = self.charged.get(key, 0) + job.gpus
        if self.budgets is not None:
            self.budgets.charge(job, waiting=True)
        for member in self.ledger.members.get(book.cohort, ()) if book.cohort else ():
            self._reclaim.pop((job.flavor, member.name), None)

    def said(self, book: TeamBook, flavor: str) -> tuple[int, int]:
        """Return what messages say a team uses of a flavor now, and how much of that is
        charged to its preemptors waiting for victims: its GPUs but those of its stopping
        jobs (they are on their way out, each GPU counted once), plus the charges. Counted
        with both, a team whose 8-GPU job a priority preemptor of its own replaces read
        "uses 16 (8 of them for its jobs waiting for preemption) of 8 nominal"."""
        return self.settled(book, flavor), self.charged.get((book.name, flavor), 0)

    def settled(self, book: TeamBook, flavor: str) -> int:
        """Return the GPUs of a flavor a team uses once its stopping jobs have stopped,
        with its waiting preemptors' charges (preemption rule 2's view): what decides
        whether its next job is within its nominal quota, for the pass order, the idle
        quota kept for it, its claims and its messages alike. Counted with its stopping
        jobs, a team whose job was stopping (cancelled, or replaced by its own priority
        preemptor) was ordered and kept for as a borrower, a borrower took the GPUs
        it waited for, and its within-nominal job then reclaimed that borrower's older
        job in the same pass (a review's case, test_reclaim_adversarial.py)."""
        used = book.used(flavor)
        pool = self.pools.get(flavor)
        if pool is None or (pool.stops is None and not self._stopping_at_start):
            return used  # nothing stops in this pool (yet): no need to build the view
        return used - self.stops(pool).quota.get(book, 0)

    def within_nominal(self, book: TeamBook, job: PendingJob, ending: bool = False) -> bool:
        """Return whether the job fits its team's nominal quota of its flavor once the
        team's stopping jobs have stopped (`settled`): the test of "within nominal" for
        the pass order, claims and the claim hold alike. (Backfill's holds ask whether a
        job would borrow now, on the ledger as it stands: docs/scheduling.md.)

        `ending`: and once its jobs that end before a victim could stop have ended
        (Running.ending), as a preemptor that waits for them counted them (a claim)."""
        used = self.ended(book, job.flavor) if ending else self.settled(book, job.flavor)
        return used + job.gpus <= book.quota(job.flavor).nominal

    def borrows(self, book: TeamBook, flavor: str, used: int | None = None) -> int:
        """Return the GPUs a team borrows that reclaim may take back in this pass: what it
        uses (`used`, else the ledger's figure) beyond its nominal quota, less the idle
        quota this pass lent it. Quota lent in a pass is not reclaimed in it (issue 13):
        a team within nominal got a borrower admitted, was a borrower then, and another
        team's job reclaimed its older 6-GPU job in the same pass for its 2 borrowed GPUs
        (helper-8's case, test_reclaim_fresh.py). The next pass may."""
        used = book.used(flavor) if used is None else used
        return used - book.quota(flavor).nominal - self.lent.get((book.name, flavor), 0)

    def ordered_within(self, book: TeamBook, job: PendingJob) -> bool:
        """Return whether the job is ordered as one within its team's nominal quota: it
        fits once the team's stopping jobs have stopped (within_nominal), not counting
        the team's running jobs that passed it (`passed`).

        Those started while it waited, backfilled beside its reservation because they
        would end before it starts. When the jobs it waited for ended early, such a
        job kept it over its nominal quota for a while; ordered then as one that would
        borrow, behind every other team's jobs within nominal, it lost its GPUs to one
        of them and waited as long as that job ran (100 h in the case built:
        test_backfill.py). Counted out here, it keeps its place, and its GPUs are
        reserved until its team's jobs give its quota back (over_by_passed).
        Only the order: whether it may take quota, reclaim or be kept for is
        within_nominal's. And only outside a cohort: in one, a job over its nominal
        quota borrows, and ordered before other teams' jobs within nominal it would
        take the quota they are guaranteed and be reclaimed for it (a cohort hold
        keeps the cohort's idle quota for it instead: Backfill)."""
        used = self.settled(book, job.flavor)
        nominal = book.quota(job.flavor).nominal
        if used + job.gpus > nominal and book.cohort is None:
            used -= self.passed(book, job)
        return used + job.gpus <= nominal

    def over_by_passed(self, book: TeamBook, job: PendingJob) -> bool:
        """Return whether the job is over its team's limit (`quota`) only by the team's
        running jobs that passed it (`passed`): backfilled beside its reservation, they
        end before it starts, and it keeps GPUs reserved from when its team's quota is
        free again (Backfill.after_block). In a cohort too: the limit there is nominal
        quota plus borrowing limit, and a gang of a team that borrows, over it by a
        15-minute job of its team let through beside it, lost its reservation for those
        minutes to another team's 10-hour job behind it (a seventh tester's case,
        test_reservation_holds.py). Outside a cohort this is ordered_within's test."""
        passed = self.passed(book, job)
        f = job.flavor
        return passed > 0 and self.settled(book, f) - passed + job.gpus <= self.ledger.limit(
            book, f
        )

    def passed(self, book: TeamBook, job: PendingJob) -> int:
        """Return the GPUs of the team's running jobs of the job's flavor that passed it:
        not stopping (a victim of this pass neither: `settled` leaves those out), after
        it in queue order (ordering.queue_key), and started while it waited in the queue
        (since it was submitted, or, requeued or released from its dependencies, since
        it became eligible again: PendingJob.eligible_at). A lower-priority job that ran
        before a higher-priority one was submitted did not pass it: counted, the latter
        took its flavor's reservation from another team's gang (a review's case,
        test_backfill.py); so did a job released from its dependencies, with the jobs
        its team started while it was held (an adversarial helper's case)."""
        since = max(job.submitted_at, job.eligible_at)
        key = queue_key(job)
        return sum(
            r.job.gpus
            for r in self.running_of(job.team, job.flavor)
            if not r.stopping and r.job.started_at >= since and queue_key(r.job) > key
        )

    def ended(self, book: TeamBook, flavor: str) -> int:
        """Return `settled` less the team's jobs that end before a victim could stop
        (Running.ending): what rule 1 of preemption counts the team as using."""
        used = self.settled(book, flavor)
        pool = self.pools.get(flavor)
        if pool is not None and self.preempting:
            used -= self.stops(pool).ending_quota.get(book, 0)
        return used

    def held(self, book: TeamBook, flavor: str) -> int:
        """Return the GPUs a team holds, without those charged to its waiting preemptors."""
        return book.used(flavor) - self.charged.get((book.name, flavor), 0)

    def honour_reservations(self, snapshot: Snapshot) -> None:
        """Deal first with the preemptors that victims of earlier passes name."""
        if not self.preempting:
            return
        if not any(r.preempted_by is not None for r in snapshot.running) and not any(
            j.preempted_by is not None or j.reserved_on for j in snapshot.pending
        ):
            return
        done = honour_reservations(self)
        if not done:
            return
        ids = {j.id for j in done}
        for job in done:
            self.order.append(job)
            if self.demand is not None:  # built meanwhile (a reclaim's look-ahead asked)
                self._considered(job)
        self.pending = [j for j in self.pending if j.id not in ids]

    def stops(self, pool: Pool) -> Stops:
        """Return the pool's stopping GPUs and reservations, built when first needed."""
        if pool.stops is None:
            pool.stops = Stops(pool)
            for r in self.stopping_in(pool.flavor):
                pool.stops.add(r)
            for r in self.running_in(pool.flavor):
                if r.ending:
                    pool.stops.end(r)
        return pool.stops

    def misfit(self, pool: Pool, job: PendingJob, view: int) -> bool:
        """Return whether the job is already known not to fit the pool's `view`."""
        return pool.fails.get((view, job.gpus_per_worker), math.inf) <= job.workers

    def choose(self, pool: Pool, job: PendingJob) -> Where | None:
        """Return where the job fits in the pool's current view, remembering failures.

        Until the free GPUs change, a gang that failed fails again, and so does
        any gang with more workers of the same size (Pool.fails).
        """
        return self._place(pool, job.workers, job.gpus_per_worker)

    def fits_shape(self, pool: Pool, workers: int, per_worker: int) -> bool:
        """Return whether a gang of this shape fits the pool's current view (Pass.choose)."""
        return self._place(pool, workers, per_worker) is not None

    def _place(self, pool: Pool, workers: int, per_worker: int) -> Where | None:
        key = (pool.view(), per_worker)
        fails = pool.fails
        if fails.get(key, math.inf) <= workers:
            return None
        where = placement.choose(pool.index, workers, per_worker)
        if where is None:
            fails[key] = min(workers, fails.get(key, math.inf))
        return where

    def admit(self, job: PendingJob, pool: Pool, where: Where) -> list[tuple[int, int]] | None:
        """Take the gang's GPUs and charge its team, all or nothing; return (node, workers)."""
        tx = Transaction()
        nodes = placement.take(pool.index, where, job.workers, job.gpus_per_worker, tx)
        if nodes is None:
            return None
        return self._book(job, pool, nodes, tx)

    def admit_on(self, job: PendingJob, pool: Pool, nodes: list[tuple[int, int]]) -> None:
        """Admit the gang on the given (node, workers) pairs, which the caller found free
        (a preemptor's kept reservation, scheduler.preemption)."""
        tx = Transaction()
        for node, workers in nodes:
            tx.take(pool.index, node, workers * job.gpus_per_worker)
        self._book(job, pool, nodes, tx)

    def _book(self, job: PendingJob, pool: Pool, nodes: list, tx: Transaction) -> list:
        """Charge the team for GPUs taken in tx, commit, and record the admission."""
        book = self.ledger.book(job.team)
        # what it borrows once the team's stopping jobs have stopped (settled): counted
        # with them, a job whose team's priority preemptor was charged beside its
        # stopping victim was said to borrow 4 GPUs in a team without a cohort
        borrowed = self.ledger.borrowed(book, job.flavor, job.gpus, self.settled(book, job.flavor))
        tx.add(self.ledger, book, job.flavor, job.gpus)
        tx.commit()
        if borrowed:
            key = (job.team, job.flavor)
            self.lent[key] = self.lent.get(key, 0) + borrowed
        if self.budgets is not None:
            self.budgets.charge(job)
        pool.invalidate()
        self.admissions.append(Admission(job.id, pool.assign(nodes, job.gpus_per_worker), borrowed))
        self.admitted.setdefault(job.flavor, []).append(Started(job, self.now, nodes))
        took = self.took.setdefault((job.team, job.queue, job.flavor), [0, 0, {}])
        took[0] += 1
        took[1] += job.gpus
        for node, workers in nodes:
            took[2][node] = took[2].get(node, 0) + workers * job.gpus_per_worker
        return nodes

    def shortfall(self, job: PendingJob, pool: Pool, extra: int = 0) -> Wait:
        """Return the capacity reason a job that passed its quota does not fit. `extra`:
        the free GPUs held for reservations, which it could use if it were short enough;
        its facts are taken with them shown (the count had them and the largest node's
        free GPUs did not: "10 are free but at most 4 on one node" beside 6 held)."""
        if extra and pool.holding:
            lift(pool)
            try:
                return self.shortfall(job, pool)
            finally:
                restore(pool)
        index = pool.index
        code = placement.shortfall(index, extra, job.workers, job.gpus_per_worker)
        if not self.config.explain:
            return Wait(code)
        q = job.gpus_per_worker
        facts = (index.total + extra, index.most_free(), index.slots(q), index.best_domain_slots(q))
        return Wait(code, facts)

    def ahead_in_queue(self, job: PendingJob, pool: Pool | None, wait: Wait) -> Wait:
        """Return `priority` if jobs ahead in the job's queue took the GPUs it needed: it
        would fit, in whole workers, with the GPUs they took free (and those held for a
        reservation, which a capacity reason counts). Counted only, a 1x8 job was told
        `priority` because a 1-GPU job of its queue took a GPU on a 4-GPU node."""
        if wait.code not in CAPACITY or pool is None:
            return wait
        took = self.took.get((job.team, job.queue, job.flavor))
        held = pool.held if pool.holding else {}
        extra = sum(held.values())
        if not took or pool.index.total + extra + took[1] < job.gpus:
            return wait
        # one answer per shape until the free GPUs change (Pool.invalidate: the queue
        # taking more does too); asked for each, 3,000 blocked 1x8 jobs on 500 nodes
        # cost 7.7 s
        key = (job.team, job.queue, job.workers, job.gpus_per_worker, extra, pool.index.total)
        fits = pool.ahead.get(key)
        if fits is None:
            tx = Transaction()
            try:
                for node, k in (*held.items(), *took[2].items()):
                    tx.give(pool.index, node, k)
                fits = placement.choose(pool.index, job.workers, job.gpus_per_worker) is not None
            finally:
                tx.rollback()
            pool.ahead[key] = fits
        return Wait(PRIORITY, ("took", took[0], took[1])) if fits else wait

    # -- step 4 and 5 ---------------------------------------------------------

    def not_reached(self, job: PendingJob) -> None:
        self.order.append(job)
        self.waits[job.id] = Wait(PRIORITY, ("limit", self.config.max_backfill_candidates))

    def back_off(self, job: PendingJob) -> None:
        """Record why a job in its requeue backoff waits, without considering it.

        It is not ordered, gated, placed, given a reservation or a quota hold,
        and preempts nothing: a reservation for a job that may not start would
        keep GPUs idle for it. Only never_fits, no_nodes and budget_exhausted
        outrank it.
        """
        self.order.append(job)
        static = self.static_wait(job, self.pools.get(job.flavor), self.ledger.book(job.team))
        over = static or self.budget_wait(job)
        self.waits[job.id] = over or Wait(BACKOFF, (job.eligible_at, job.restart_count))

    def await_old_attempt(self, job: PendingJob) -> None:
        """Record that a requeued job waits for its previous attempt's workers to stop.

        Set aside as a job in its backoff is (back_off), for the same reason: its
        old workers may still use its GPUs and write its checkpoint. Only
        never_fits, no_nodes and budget_exhausted outrank it; `backoff` does too
        (back_off).
        """
        self.order.append(job)
        static = self.static_wait(job, self.pools.get(job.flavor), self.ledger.book(job.team))
        self.waits[job.id] = static or self.budget_wait(job) or Wait(PREVIOUS_ATTEMPT)

    def hold_for_array(self, job: PendingJob) -> None:
        """Record that a task of a job array waits for its array's `%N` limit.

        Set aside as a job in its backoff is (back_off): admitting it would run more
        of its array's tasks at once than the limit allows. Only never_fits, no_nodes
        and budget_exhausted outrank it (reasons.REASONS).
        """
        self.order.append(job)
        static = self.static_wait(job, self.pools.get(job.flavor), self.ledger.book(job.team))
        self.waits[job.id] = (
            static or self.budget_wait(job) or Wait(ARRAY_LIMIT, (job.array_id, job.array_limit))
        )

    def considered(self, job_id: int) -> PendingJob | None:
        """Return the job if it has been considered in this pass (it is on `order`)."""
        ids, order = self._order_ids, self.order
        for i in range(self._order_seen, len(order)):
            ids[order[i].id] = order[i]
        self._order_seen = len(order)
        return ids.get(job_id)

    def waiting(self) -> list[PendingJob]:
        """Return the jobs not admitted, in the order they were considered."""
        return [job for job in self.order if job.id in self.waits]

    def plan(self) -> Plan:
        found = verdicts(self)
        stats = {
            "pending": float(len(self.queued)),
            "backing_off": float(len(self.backing_off)),
            "previous_attempt": float(len(self.old_attempts)),
            "array_limit": float(len(self.array_held)),
            "considered": float(len(self.order)),
            "admitted": float(len(self.admissions)),
            "preempted": float(len(self.preemptions)),
            "waiting": float(len(found)),
            "reservations": float(len(self.gate.reservations)),
        }
        return Plan(
            tuple(self.admissions), tuple(self.preemptions), found, stats, self.reservations()
        )

    def reservations(self) -> tuple[Reservation, ...]:
        """Return where each preemptor that waits for its victims holds its GPUs."""
        out = []
        for pool in self.pools.values():
            if pool.stops is None:
                continue
            names = pool.names
            for job_id, on in pool.stops.by_job.items():
                nodes = tuple(sorted((names[n], k) for n, k in on.items() if k))
                until, ending = self.claim_until.get(job_id, (None, ()))
                out.append(Reservation(job_id, nodes, until, ending))
        out.sort(key=lambda r: r.job_id)
        return tuple(out)

    # -- indexes --------------------------------------------------------------

    @property
    def running(self) -> list[Running]:
        """Return the running and stopping jobs with where their GPUs are, by id."""
        if self._running is None:
            self._running = build_running(self._running_jobs, self.pools, self.ledger, self.now)
            if self.preempting:
                mark_ending(self._running, self.now, self.queued)
        return self._running

    def team_queues(self) -> list[tuple[str, list[PendingJob]]]:
        """Return each team's pending jobs in queue order, teams by name."""
        by_team: dict[str, list[PendingJob]] = {}
        for job in self.pending:
            by_team.setdefault(job.team, []).append(job)
        return sorted(by_team.items())

    def running_in(self, flavor: str) -> list[Running]:
        """Return the running jobs of a flavor, by id."""
        if self._by_flavor is None:
            self._by_flavor = {}
            for r in self.running:
                self._by_flavor.setdefault(r.job.flavor, []).append(r)
        return self._by_flavor.get(flavor, [])

    def stopping_in(self, flavor: str) -> list[Running]:
        """Return the jobs of a flavor that were stopping before this pass, soonest end first."""
        if self._stopping is None:
            self._stopping = {}
            for r in sorted((r for r in self.running if r.stopping), key=Running.stop_order):
                self._stopping.setdefault(r.job.flavor, []).append(r)
        return self._stopping.get(flavor, [])

    def own_gpus(self, team: str, flavor: str) -> int:
        """Return the GPUs of a flavor the team's running jobs held when the pass began."""
        return self._own.get((team, flavor), 0)

    def running_of(self, team: str, flavor: str) -> list[Running]:
        """Return a team's running jobs of a flavor, by id."""
        if self._by_team is None:
            self._by_team = {}
            for r in self.running:
                self._by_team.setdefault((r.book.name, r.job.flavor), []).append(r)
        return self._by_team.get((team, flavor), [])

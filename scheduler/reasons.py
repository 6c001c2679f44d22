"""Why a pending job waits: the reason codes, in order of precedence.

When several reasons apply, the pass reports the first of this list that it
finds (Kueue ranks its reasons the same way): a job that can never fit is told
so before it is told the cluster is busy. The pass checks them in this order,
except that `waiting_for_preemption` replaces the quota or capacity reason that
triggered the preemption, and `priority` replaces a capacity reason when jobs
ahead of it in its own queue took the GPUs. `budget_exhausted` comes right
after `no_nodes`: no freed GPU would start the job before its budget allows
it. A job in its requeue backoff (`backoff`), or requeued while its previous attempt's workers still stop
(`previous_attempt`), is not considered at all: only `never_fits` and
`no_nodes`, which no wait would change, are told before it, and `backoff`,
whose end is known, before `previous_attempt`. A task of a job array beyond its
`%N` limit (`array_limit`) is set aside the same way, after those two.
"""

from __future__ import annotations

from typing import NamedTuple

NEVER_FITS = "never_fits"
NO_NODES = "no_nodes"
BUDGET_EXHAUSTED = "budget_exhausted"
BACKOFF = "backoff"
PREVIOUS_ATTEMPT = "previous_attempt"
ARRAY_LIMIT = "array_limit"
FIFO_BLOCKED = "fifo_blocked"
WAITING_FOR_PREEMPTION = "waiting_for_preemption"
QUOTA = "quota"
COHORT_BUSY = "cohort_busy"
RESERVED = "reserved"
PRIORITY = "priority"
TOPOLOGY = "topology"
FRAGMENTED = "fragmented"
NO_CAPACITY = "no_capacity"
# Release codes, not pass verdicts: a job held for its dependencies is outside the
# snapshot (scheduler/dependency.py), so the portal writes these, never the pass.
DEPENDENCY = "dependency"
DEPENDENCY_NEVER_SATISFIED = "dependency_never_satisfied"

# code -> the sentence used when PolicyConfig.explain is off; order = precedence.
REASONS: dict[str, str] = {
    NEVER_FITS: "It can never run: bigger than any node, topology domain or its quota allows.",
    NO_NODES: "No schedulable node of its GPU flavor is Ready and uncordoned.",
    BUDGET_EXHAUSTED: "Its team's GPU-hour budget for its flavor is used up, or would be "
    "if it ran to its max run time.",
    BACKOFF: "Requeued after a preemption or a lost node, it backs off before it may start "
    "again; or it would borrow while its team's reclaim backoff lasts.",
    PREVIOUS_ATTEMPT: "Waiting for the workers of its previous attempt to stop before it can "
    "be admitted again.",
    ARRAY_LIMIT: "Its job array already has as many tasks running as its limit (%N) allows.",
    FIFO_BLOCKED: "A job submitted before it is blocked, and strict FIFO lets nothing pass it.",
    WAITING_FOR_PREEMPTION: "It waits for preempted or stopping jobs to free their GPUs.",
    QUOTA: "It would exceed its team's nominal quota plus borrowing limit.",
    COHORT_BUSY: "Its cohort has not enough idle quota to lend it right now.",
    RESERVED: "Starting it now would delay a job that holds a reservation: GPUs or quota "
    "for backfill, or its team's quota while that job's preempted jobs stop.",
    PRIORITY: "Jobs ahead of it in its queue go first.",
    TOPOLOGY: "Enough GPUs are free, but not inside one topology domain.",
    FRAGMENTED: "Enough GPUs are free, but not enough of them together on nodes.",
    NO_CAPACITY: "Not enough GPUs of its flavor are free.",
}

# code -> what would let the job start sooner: `berth why` and the dashboard say it
# after the reason (the API's `remedy` field). "new" and "requeued" are the
# portal's codes for a job no pass has looked at yet since it was (re)queued.
REMEDIES: dict[str, str] = {
    "new": "Nothing: the next scheduling pass (every few seconds) will place it or say why it waits.",
    "requeued": "Nothing: it was put back in the queue with its original submit time.",
    NEVER_FITS: "It cannot start as it is. Ask for fewer workers or fewer GPUs per worker, "
    "or ask an admin for more quota or bigger nodes; then cancel it and submit again.",
    NO_NODES: "A node of its GPU flavor becoming Ready and uncordoned (ask an admin), "
    "or submitting to another flavor.",
    BUDGET_EXHAUSTED: "The budget period resetting (see the reason), a shorter max run time "
    "or fewer GPUs so that it fits what is left, or an admin raising the team's budget.",
    BACKOFF: "Nothing: after a preemption or a lost node it waits out its requeue backoff, "
    "then keeps its place in the queue; held by its team's reclaim backoff, it may borrow "
    "once that ends.",
    FIFO_BLOCKED: "The blocked job ahead of it starting or being cancelled.",
    WAITING_FOR_PREEMPTION: "Nothing: preempted jobs are stopping to make room; it starts "
    "when their grace periods end.",
    QUOTA: "Your team's running jobs finishing, a smaller gang, or more quota for the team.",
    COHORT_BUSY: "Other teams of the cohort freeing the quota they use, or a gang that fits "
    "within your team's own nominal quota.",
    RESERVED: "The job holding the reservation starting, or, for a backfill reservation, "
    "a shorter max run time so it can backfill before it.",
    PRIORITY: "The jobs ahead of it in its queue starting, or a higher priority.",
    TOPOLOGY: "GPUs freeing up inside one rack/block, or fewer workers so the gang fits in one.",
    FRAGMENTED: "Whole nodes freeing up, or fewer GPUs per worker.",
    NO_CAPACITY: "Running jobs of its flavor finishing (see its estimated start), or a smaller gang.",
    PREVIOUS_ATTEMPT: "Nothing: the workers of its previous attempt are stopping.",
    ARRAY_LIMIT: "Nothing: it starts when a running task of its array ends; a larger %N "
    "limit needs a new array.",
    DEPENDENCY: "The jobs it depends on reaching the states its dependency names (see the "
    "reason); it enters the queue with its original submit time once they do, or is "
    "cancelled if they cannot.",
}


def remedy(code: str) -> str:
    """Return what would let a pending job with reason `code` start sooner ("" = "new")."""
    return REMEDIES.get(code or "new", "see the reason above.")


# Capacity reasons: quota allows the job, the free GPUs do not.
CAPACITY = frozenset({TOPOLOGY, FRAGMENTED, NO_CAPACITY})


# Wait.info[4][2] of `cohort_busy` when a borrower's placement takes the GPUs teams
# within nominal wait for (Pass._takes_usable), not their number.
PLACED = "placed"


class Wait(NamedTuple):
    """A reason code with the facts its message needs, captured when decided.

    `info` by code (see scheduler.explain for how each is worded):
      never_fits: ("shape",) | ("node", largest node) |
                  ("topology", most workers one domain holds) | ("quota", most ever)
      budget_exhausted: (the Budget, GPU-hours its running jobs may still use, the
                         job's GPU-hours: GPUs x max run time, GPU-hours its jobs
                         waiting for stopping jobs may use)  (scheduler.budgets)
      backoff: (when it becomes eligible, how many times it was requeued) |
               (when its team's reclaim backoff ends, 0, the team's reclaims of the
                flavor in a row, when the last was)  (scheduler.requeue)
      fifo_blocked: (id of the blocked job ahead, its reason code)
      waiting_for_preemption: (ids waited for, its victims first, their latest end,
                               how many of the ids are its victims, how many of them,
                               last, are running jobs that reach their max run time)
      quota, cohort_busy: (team usage, nominal, usage limit, GPUs it may still take,
                           why: () | ("kept", idle quota kept for teams within nominal
                                     [, of it on the free GPUs, the free GPUs: when
                                     those bind; PLACED for the first when the GPUs
                                     it would be placed on bind]) |
                           ("lent", GPUs of its quota lent to non-preemptible jobs,
                            their teams, when enough of the cohort's jobs that
                            reclaim cannot take will have ended, whose job ends then) |
                           ("unplaced",): reclaim would give its quota back, but no
                           victims leave GPUs that hold its workers whole,
                           the usage messages give: Pass.said)
      reserved: (reserved job id, reserved start, its number of nodes; 0 for a
                team's quota hold, COHORT_HOLD, CLAIM_HOLD, RESERVED_QUOTA (the quota
                of a GPU reservation's job), OWN_HOLD (its own team's gang's cohort
                hold, on quota sure to come back) [, for the sentence: the
                latest end with which it would start now, or why none would:
                scheduler.backfill.Backfill.start_by])
      priority: ("took", jobs admitted ahead, their GPUs) | ("limit", jobs considered)
      capacity codes: (free GPUs, most free on a node, worker slots, best domain's
                      worker slots), or () when explanations are off
    """

    code: str
    info: tuple = ()

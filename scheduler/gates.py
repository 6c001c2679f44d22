"""Gates: how a blocked job holds back the jobs after it in the pass order.

A gate has three hooks, called by Pass.consider in this order:

- blocked(p, job): a Wait if a job ahead keeps this one from even trying;
- try_admit(p, job, pool): admit the job (return None) or say why not;
- after_block(p, job, pool, wait): note that the job stays pending; return the wait
  that replaces `wait`, if what it noted changes why the job waits (None: it stands).

The base Gate lets every job that fits pass, with no protection for the jobs
it passes (greedy list scheduling); the policies use HeadOfLine (Slurm's
sched/builtin) or Backfill (Slurm's sched/backfill, scheduler.backfill).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import PendingJob
from .reasons import (
    CAPACITY,
    FIFO_BLOCKED,
    NEVER_FITS,
    NO_NODES,
    QUOTA,
    REASONS,
    WAITING_FOR_PREEMPTION,
    Wait,
)

if TYPE_CHECKING:
    from .core import Pass
    from .state import Pool


class Gate:
    """Admit whatever fits; a blocked job holds nothing back."""

    def __init__(self) -> None:
        # Backfill only: flavor -> Reservation, (team, flavor) -> Reservation of the
        # team's quota, (cohort, flavor) -> Reservation of the cohort's lendable quota.
        self.reservations: dict = {}
        self.quota_holds: dict = {}
        self.cohort_holds: dict = {}

    def held_for(self, flavor: str) -> list:
        """The flavor's GPU reservations, first first (Backfill; none here)."""
        return []

    def placed_short(self, p: Pass, job: PendingJob, after: float = 0.0) -> bool:
        """Whether the job would be placed with the held GPUs shown (Backfill: it ends
        before every reservation of its flavor); none are held here."""
        return False

    def blocked(self, p: Pass, job: PendingJob) -> Wait | None:
        return None

    def try_admit(self, p: Pass, job: PendingJob, pool: Pool) -> Wait | None:
        where = p.choose(pool, job)
        if where is not None and p.admit(job, pool, where) is not None:
            return None
        return p.shortfall(job, pool)

    def after_block(self, p: Pass, job: PendingJob, pool: Pool | None, wait: Wait) -> Wait | None:
        return None


class HeadOfLine(Gate):
    """The first job of a flavor blocked for one of `codes` stops that flavor; the first
    job of a team blocked for one of `team_codes` stops that team's jobs of the flavor.

    Slurm's sched/builtin: strict order, no job passes a blocked one. Jobs that
    can never run, or whose flavor has no nodes, do not block.
    """

    def __init__(self, codes: frozenset[str], team_codes: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.codes = codes
        self.team_codes = team_codes
        # flavor -> (job id, its code); (team, flavor) -> (job id, its code, True)
        self.blockers: dict = {}

    def blocked(self, p: Pass, job: PendingJob) -> Wait | None:
        blocker = self.blockers.get(job.flavor) or self.blockers.get((job.team, job.flavor))
        return None if blocker is None else Wait(FIFO_BLOCKED, blocker)

    def after_block(self, p: Pass, job: PendingJob, pool: Pool | None, wait: Wait) -> Wait | None:
        if wait.code in self.codes and job.flavor not in self.blockers:
            self.blockers[job.flavor] = (job.id, wait.code)
        elif wait.code in self.team_codes:
            self.blockers.setdefault((job.team, job.flavor), (job.id, wait.code, True))
        return None


# The reference FIFO: any reason but a permanent one blocks the flavor.
STRICT = frozenset(REASONS) - {NEVER_FITS, NO_NODES, FIFO_BLOCKED}
# Backfill switched off: only a job waiting for GPUs blocks the flavor; a job
# held back by its own team's quota does not hold back other teams, but does hold
# back its own team's later jobs (TEAM_QUOTA: passed by them, a gang within nominal
# quota starved behind its team's stream of 1-GPU jobs, each taking the quota back).
FOR_GPUS = CAPACITY | {WAITING_FOR_PREEMPTION}
TEAM_QUOTA = frozenset({QUOTA})

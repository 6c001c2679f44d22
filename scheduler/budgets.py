"""GPU-hour budgets: a team's jobs of a flavor may not be admitted past its budget.

The rule is Slurm's GrpTRESMins with `AccountingStorageEnforce=safe`: a job
starts only if it could run to its time limit without the association going
over its limit, counting what was used, what the running jobs may still use
until their time limits, and the job's own request. Here, per team and flavor:

    used + committed + gpus x max_runtime  <=  limit      (all in GPU-hours)

`used` comes in the snapshot (scheduler.model.Budget); `committed` is the
running jobs' GPUs times the rest of their max run time, and a stopping job's
(one the pass preempts too, from then on: `stopped`)
times the rest of its grace period (RunningJob.ends_by: its GPUs are in use,
and counted as used, until it has stopped; committing nothing, a job admitted
meanwhile took that room, and the team's preemptor, once its victim had stopped,
was over the budget, the victim's work lost for nothing: an adversarial helper's
case, tests/scheduler/test_budgets.py), summed exactly (math.fsum: the same
in any order of the snapshot's jobs); jobs admitted earlier in the same pass
commit their whole max run time, and so do the team's jobs the pass made wait for
stopping or ending jobs (a preemptor waiting for its victims) or gave a start time (a
GPU reservation, a quota or cohort hold: `promise`), counted apart, as `waiting`, for
the sentence. Running jobs are never stopped by a budget:
only admissions wait (reason `budget_exhausted`), with no reservation and no
preemption, since freeing GPUs would not let them start.
"""

from __future__ import annotations

from math import fsum

from .model import Budget, PendingJob, RunningJob, Snapshot
from .reasons import BUDGET_EXHAUSTED, Wait

HOUR = 3600.0
# Float sums of GPU-hours: a job that lands exactly on the limit is admitted.
EPSILON = 1e-9


class Budgets:
    """What is left of each budget during one pass, charged as jobs are admitted."""

    __slots__ = ("by_key", "committed", "waiting", "promised", "after_reset", "now")

    def __init__(self, snapshot: Snapshot) -> None:
        self.by_key: dict[tuple[str, str], Budget] = {
            (b.team, b.flavor): b for b in snapshot.budgets
        }
        self.waiting: dict[tuple[str, str], float] = dict.fromkeys(self.by_key, 0.0)
        self.promised: set[int] = set()  # ids of the jobs promise() committed
        # GPU-hours promised to jobs that start once the budget has reset (promise)
        self.after_reset: dict[tuple[str, str], float] = dict.fromkeys(self.by_key, 0.0)
        self.now = now = snapshot.now
        left: dict[tuple[str, str], list[float]] = {key: [] for key in self.by_key}
        for r in snapshot.running:
            if (key := (r.team, r.flavor)) in left:
                left[key].append(r.gpus * (r.ends_by(now) - now) / HOUR)
        self.committed: dict[tuple[str, str], float] = {k: fsum(v) for k, v in left.items()}

    def wait(self, job: PendingJob, ahead: float = 0.0) -> Wait | None:
        """Return `budget_exhausted` if the job could cross its team's budget, else None;
        `ahead`: GPU-hours of its team's jobs counted as admitted before it (Pass._demand).

        info: (the Budget, GPU-hours committed to running and admitted jobs, the job's
        GPU-hours, GPU-hours committed to the team's jobs waiting for stopping jobs)
        """
        key = (job.team, job.flavor)
        budget = self.by_key.get(key)
        if budget is None:
            return None
        committed, waiting = self.committed[key], self.waiting[key]
        if budget.resets_at is not None and self.now + job.max_runtime > budget.resets_at:
            waiting += self.after_reset[key]  # it may run into the next period: theirs too
        need = job_gpu_hours(job)
        if budget.used + committed + waiting + ahead + need <= budget.limit + EPSILON:
            return None
        return Wait(BUDGET_EXHAUSTED, (budget, committed, need, waiting))

    def stopped(self, job: RunningJob, was: float, now: float) -> None:
        """Commit what a job the pass just preempted uses from now on: its GPUs until it
        has stopped (`now`), not until it would have ended (`was`), as the next pass will
        count it. Left at its whole max run time, a job of its team was told
        `budget_exhausted` in the pass that preempted it and started in the next with
        nothing else changed (a review)."""
        key = (job.team, job.flavor)
        if key in self.committed:
            self.committed[key] += job.gpus * (now - was) / HOUR

    def charge(self, job: PendingJob, waiting: bool = False) -> None:
        """Commit a job's whole max run time to its budget, if it has one: admitted, or
        (`waiting`) made to wait for stopping jobs, as a preemptor waiting for its
        victims is (Pass.charge)."""
        key = (job.team, job.flavor)
        if key in self.committed:
            (self.waiting if waiting else self.committed)[key] += job_gpu_hours(job)

    def promise(self, job: PendingJob, start: float) -> None:
        """Commit, once, a job given a start time (a GPU reservation, a quota or cohort
        hold), as one waiting for stopping jobs: its team's later jobs of the pass may
        not use what it will (backfill._promise_budget). One that starts once its
        budget has reset uses the next period's: it is counted only against jobs that
        may still run then (`after_reset`). Counted against all, a gang reserved past the
        reset held the month's last GPU-hours from a 20-minute job; against none, a
        4-hour job admitted beside it took the next period's, and the gang, told +1 h,
        started at +4 h (two reviews' cases)."""
        key = (job.team, job.flavor)
        budget = self.by_key.get(key)
        if budget is None or job.id in self.promised:
            return
        self.promised.add(job.id)
        if budget.resets_at is not None and start >= budget.resets_at:
            self.after_reset[key] += job_gpu_hours(job)
        else:
            self.charge(job, waiting=True)


def job_gpu_hours(job: PendingJob) -> float:
    """Return the most GPU-hours a job may use: its GPUs times its max run time."""
    return job.gpus * job.max_runtime / HOUR

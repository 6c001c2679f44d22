"""Every ordering the scheduler uses, one key function each.

Smaller keys come first. The last tiebreak is always the job's
(submitted_at, id), so a pass never depends on input order.
(Kueue pkg/scheduler/preemption/common/ordering.go keeps its orderings the
same way.)
"""

from __future__ import annotations

import math

from .model import PendingJob, RunningJob


def queue_key(job: PendingJob) -> tuple:
    """Order jobs within a team (and so within each of its queues).

    1. priority, highest first
    2. submitted_at, oldest first
    3. id
    """
    return (-job.priority, job.submitted_at, job.id)


def claim_key(job: PendingJob) -> tuple:
    """Order the preemptors whose victims have all stopped, admitted first in a pass.

    1. the most GPUs per worker first, 2. then the most GPUs (first-fit decreasing:
       placed by best fit, a smaller or more divisible preemptor would take the hole a
       larger one's victims left, 2x4 GPUs a whole node freed for 1x8, where the
       larger cannot use the other's holes, and would have to preempt again)
    3. queue_key
    """
    return (-job.gpus_per_worker, -job.gpus, *queue_key(job))


def submit_key(job: PendingJob) -> tuple:
    """Order jobs for the FIFO policies (Slurm's sched/builtin without priorities).

    1. submitted_at, oldest first
    2. id
    """
    return (job.submitted_at, job.id)


def team_key(
    borrows: bool, priority: float, head: PendingJob, team_index: int, starving: bool = False
) -> tuple:
    """Order teams in the fair-share heap by their next job.

    1. a next job that fits in the team's nominal quota before one that would
       borrow (Kueue: workloads that do not borrow are admitted first; nominal
       quota is guaranteed, so a borrower admitted first would only be
       reclaimed later)
    2. a starving next job (it has waited PolicyConfig.max_wait or more) before
       one that is not, and starving jobs by submit time alone (Volcano's sla
       plugin, sla-waiting-time: a job past its waiting time goes first and
       gets resources reserved), so share order cannot overtake it forever
    3. the next job's priority, highest first: the team's fair-share factor
       (2^-share of its weighted dominant share; Kueue admission fair sharing,
       Slurm's fair-share factor) plus the job's weighted age factor (Slurm's
       PriorityWeightAge, PriorityMaxAge); scheduler.fairshare.priority
    4. submitted_at of the team's next job, oldest first
    5. id of that job
    6. the team's index (only reached if job ids repeat)
    """
    if starving:
        return (borrows, 0, 0.0, head.submitted_at, head.id, team_index)
    return (borrows, 1, -priority, head.submitted_at, head.id, team_index)


def last_progress(job: RunningJob) -> float:
    """Return when the job last made durable progress: its start or last checkpoint."""
    if job.checkpointed_at is None:
        return job.started_at
    return max(job.started_at, job.checkpointed_at)


def victim_key(job: RunningJob, team_borrowing: bool, max_age: float = math.inf) -> tuple:
    """Order preemption candidates, first victim first (Kueue's candidate ordering).

    1. jobs of teams borrowing above their nominal quota first
    2. lowest priority first
    3. jobs that waited less than `max_age` before they started first: a job
       whose age factor was full when it started has the higher multifactor
       priority (Slurm preempts lower-priority jobs first, and a job's age
       factor stops growing when it starts); PolicyConfig.max_age when the
       age factor is on
    4. least work lost first: the latest max(started_at, checkpointed_at)
    5. newest first: (submitted_at, id) reversed, so the job that has waited
       least is the one sent back to the queue
    """
    return (0 if team_borrowing else 1, job_victim_key(job, max_age))


def job_victim_key(job: RunningJob, max_age: float = math.inf) -> tuple:
    """Return victim_key's steps 2-5, the job's own part (a pass keys each job once)."""
    return (
        job.priority,
        job.started_at - job.submitted_at >= max_age,
        -last_progress(job),
        -job.submitted_at,
        -job.id,
    )


def stopping_key(end: float, job: RunningJob) -> tuple:
    """Order stopping jobs whose GPUs a preemptor may wait for.

    1. estimated end (now + grace period), soonest first
    2. submitted_at
    3. id
    """
    return (end, job.submitted_at, job.id)

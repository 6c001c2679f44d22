"""Job arrays' concurrency limit (Slurm's `--array=0-99%8`, its ArrayTaskThrottle).

A task of an array with a limit may be considered only while fewer than `limit`
tasks of its array hold GPUs: those running or stopping when the pass begins count,
and the first `limit - holding` of its pending tasks in queue order are considered;
the others are set aside before ordering, as jobs in their requeue backoff are, and
wait with reason `array_limit`. The pass never admits more than it considered, so
an array never holds more than `limit` tasks' GPUs at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from .model import PendingJob, RunningJob
from .ordering import queue_key
from .reasons import WAITING_FOR_PREEMPTION

if TYPE_CHECKING:
    from .core import Pass


def beyond_limit(
    pending: list[PendingJob], running: Iterable[RunningJob], every: Iterable[PendingJob]
) -> tuple[list[PendingJob], dict[int, list[tuple]]]:
    """Return the pending tasks that their array's limit sets aside, in the order given
    (queue order: the tasks with the lowest ids, so indices, go first), and per array
    the (queue key, id) of the tasks given a slot ahead of that order: those that hold a
    claim go first (claimants; `every`: all pending jobs, whose links to their
    preemptors count)."""
    limits = {j.array_id: j.array_limit for j in pending if j.array_limit is not None}
    if not limits:
        return [], {}
    holding: dict[int, int] = {}
    running = tuple(running)
    for r in running:
        if r.array_id in limits:
            holding[r.array_id] = holding.get(r.array_id, 0) + 1
    claims = claimants(running, every)
    out, jumped = [], {}
    for job in sorted(pending, key=lambda j: j.id not in claims):
        if job.array_id not in limits:
            continue
        n = holding.get(job.array_id, 0)
        if n >= limits[job.array_id]:
            out.append(job)
            continue
        holding[job.array_id] = n + 1
        if job.id in claims:
            jumped.setdefault(job.array_id, []).append((queue_key(job), job.id))
    out.sort(key=queue_key)
    return out, jumped


def claimants(running: Iterable[RunningJob], pending: Iterable[PendingJob]) -> set:
    """Return the ids of the preemptors whose victims still stop (RunningJob.preempted_by)
    and of those with a kept target (PendingJob.reserved_on) whose requeued victims name
    them: they hold a claim on GPUs their victims gave up.

    Such a task keeps its array's slot ahead of its array's earlier tasks: one of them
    out of its requeue backoff (or with its previous attempt stopped, or its priority
    raised) came back ahead of it in queue order, the limit set the preemptor aside and
    its claim went with it, and the victim was readmitted on the GPUs it had been
    stopped for, its work lost for nothing (an adversarial helper's case,
    tests/scheduler/test_array_limit.py). Not a requeued victim's link alone, which
    outlives the claim (a preemptor whose target was cordoned kept the slot from a task
    that fitted free GPUs, pass after pass), nor a kept target with no victims (one
    waiting for a cancelled job kept the slot idle for ten minutes, and the earlier task
    started an hour later): no victim's work is at stake there (two reviews' cases)."""
    named = {r.preempted_by for r in running if r.stopping}
    linked = {j.preempted_by for j in pending}
    named.update(j.id for j in pending if j.reserved_on and j.id in linked)
    named.discard(None)
    return named


class Slots:
    """When the set-aside tasks of each array may start, for their estimated starts:
    a task takes the slot of its array's task that ends first (running ones at their
    end, those admitted in this pass after their max run time, preemptors waiting for
    their victims after that wait and their max run time), in pass order."""

    def __init__(self, p: Pass) -> None:
        ends: dict[int, list[float]] = {}
        for r in p.running:
            if r.job.array_id is not None:
                ends.setdefault(r.job.array_id, []).append(r.end)
        admitted = {a.job_id for a in p.admissions}
        for job in p.order:
            if job.array_id is None:
                continue
            if job.id in admitted:
                ends.setdefault(job.array_id, []).append(p.now + job.max_runtime)
            elif (wait := p.waits.get(job.id)) and wait.code == WAITING_FOR_PREEMPTION:
                # a preemptor holds its slot from when its victims have stopped
                ends.setdefault(job.array_id, []).append(wait.info[1] + job.max_runtime)
        for heap in ends.values():
            heapify(heap)
        self.ends, self.now = ends, p.now

    def start(self, job: PendingJob) -> float:
        """Return the earliest time a slot of the job's array frees, and take it."""
        heap = self.ends.setdefault(job.array_id, [])
        start = max(self.now, heappop(heap)) if heap else self.now
        heappush(heap, start + job.max_runtime)
        return start

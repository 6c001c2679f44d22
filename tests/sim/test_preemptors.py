"""Preemptors in replays: what a reclaim or a priority preemption costs over time."""

from __future__ import annotations

from tests.sim.helpers import T0, job, run, team


def replay(urgent_duration):
    """b's job 8 borrows a GPU; a's 8-GPU job 10 reclaims it and runs; a's priority-1 job
    12 arrives at +500 s and preempts job 10 (a's own, priority 0)."""
    jobs = [
        job(8, "b", at=0, duration=10_000, gpus=1),
        job(10, "a", at=100, duration=10_000, gpus=8),
        job(12, "a", at=500, duration=urgent_duration, gpus=1, priority=1),
    ]
    sim, _ = run(jobs, nodes=1, teams=[team("a", 8), team("b", 0)], requeue_backoff_s=0)
    return sim.recs


def test_a_victims_link_ends_when_its_preemptor_is_admitted():
    """Job 8, pending again, named job 10 as its preemptor. That link must end when job 10
    is admitted: left in place, job 10, requeued by job 12, looked like a preemptor whose
    victims had stopped, was honoured first and took the GPUs freed for job 12, which
    waited the whole of job 10's run (10,000 s) instead of one grace period."""
    recs = replay(urgent_duration=3_600)
    assert recs[10].first_start == T0 + 130  # its victim 8 stopped after the grace period
    assert recs[12].first_start == T0 + 530  # job 10 stopped: its GPUs are job 12's
    assert recs[10].preempted == 1


def test_a_priority_preemptor_is_not_held_back_by_a_borrowers_cohort_hold():
    """The same with job 12 running longer than job 10 has left: b's job 8, first in line,
    holds the cohort's idle quota from job 10's end, and job 12, which would borrow
    now, was `reserved` behind it instead of preempting job 10 (within a's nominal
    quota once job 10 stops): it waited 10,000 s (tests/scheduler/test_reclaim_adversarial.py)."""
    recs = replay(urgent_duration=10_000)
    assert recs[12].first_start == T0 + 530
    assert recs[8].first_start == T0 + 0 and recs[8].preempted == 1

"""The dependency rule (scheduler/dependency.py) as tables: each type against each
parent state, the never-satisfied rule, several conditions, and singleton."""

from __future__ import annotations

import pytest

from scheduler.dependency import (
    AFTER,
    AFTERANY,
    AFTERNOTOK,
    AFTEROK,
    MET,
    NEVER,
    WAITING,
    Parent,
    condition_status,
    judge,
)

STATES = ["pending", "admitted", "running", "preempting", "succeeded", "failed", "cancelled"]

# (type, parent state) -> status; `preempting`/requeued parents have not ended.
TABLE = {
    AFTEROK: {"succeeded": MET, "failed": NEVER, "cancelled": NEVER},
    AFTERNOTOK: {"succeeded": NEVER, "failed": MET, "cancelled": MET},
    AFTERANY: {"succeeded": MET, "failed": MET, "cancelled": MET},
    AFTER: {"running": MET, "preempting": MET, "succeeded": MET, "failed": MET, "cancelled": MET},
}


@pytest.mark.parametrize("kind", sorted(TABLE))
@pytest.mark.parametrize("state", STATES)
def test_each_type_against_each_parent_state(kind, state):
    started = state in ("running", "preempting")
    expected = TABLE[kind].get(state, WAITING)
    assert condition_status(kind, Parent(7, "train", state, started)) == expected


def test_after_counts_a_start_that_a_requeue_undid():
    """A parent that ran and was requeued (pending again) has started (Slurm's `after`)."""
    assert condition_status(AFTER, Parent(7, "train", "pending", started=True)) == MET
    assert condition_status(AFTEROK, Parent(7, "train", "pending", started=True)) == WAITING


def test_all_conditions_must_hold_and_the_sentence_names_each_parent():
    conditions = [
        (AFTEROK, Parent(12, "train", "succeeded")),
        (AFTEROK, Parent(13, "prep", "running", True)),
        (AFTERANY, Parent(14, "lint", "pending")),
    ]
    verdict = judge(20, conditions)
    assert verdict.status == WAITING
    assert verdict.sentence == (
        "Waits for job 13 (prep) to succeed (it is running); and job 14 (lint) to end "
        "(it is pending)."
    )
    assert judge(20, conditions[:1]).status == MET


def test_afternotok_needs_every_parent_to_fail():
    """Slurm's `,`: afternotok:7:8 is two conditions, so one success makes it impossible."""
    failed, running = Parent(7, "a", "failed"), Parent(8, "b", "running", True)
    assert judge(20, [(AFTERNOTOK, failed), (AFTERNOTOK, running)]).status == WAITING
    never = judge(20, [(AFTERNOTOK, failed), (AFTERNOTOK, Parent(8, "b", "succeeded"))])
    assert never.status == NEVER and never.parent.id == 8


def test_never_wins_over_waiting_and_names_the_parent():
    verdict = judge(
        20,
        [(AFTERANY, Parent(13, "prep", "running", True)), (AFTEROK, Parent(12, "train", "failed"))],
    )
    assert verdict.status == NEVER
    assert verdict.parent == Parent(12, "train", "failed")
    assert verdict.sentence == ("Dependency afterok:12 can never be met: job 12 (train) failed.")


@pytest.mark.parametrize(
    ("others", "expected"),
    [
        ([], MET),
        ([Parent(10, "nightly", "running")], WAITING),  # an earlier one runs
        ([Parent(10, "nightly", "admitted")], WAITING),
        ([Parent(10, "nightly", "pending")], WAITING),  # an earlier one waits: it goes first
        ([Parent(30, "nightly", "pending")], MET),  # a later pending one does not block
        ([Parent(30, "nightly", "running")], WAITING),  # but any active one does
        ([Parent(20, "nightly", "pending")], MET),  # itself
    ],
)
def test_singleton(others, expected):
    verdict = judge(20, [], singleton=True, namesakes=others)
    assert verdict.status == expected
    if expected == WAITING:
        assert "of the same name and user to end (singleton)" in verdict.sentence

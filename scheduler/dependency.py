"""Job dependencies (Slurm's `--dependency`): when a job held for them may be released.

A dependent job is not part of any scheduling pass: it waits outside the snapshot
(reason `dependency`) until the portal releases it (portal/core/actions/dependencies.py),
so 10,000 jobs waiting on a pipeline cost the pass nothing. This module is the rule
the portal applies, pure so that it reads in one place and tests as a table:

- `afterok:ID` is met when the parent succeeded; it can never be met once the parent
  failed or was cancelled.
- `afternotok:ID` is met when the parent failed or was cancelled (Slurm: ended in any
  state but COMPLETED); it can never be met once the parent succeeded.
- `afterany:ID` is met when the parent ended, whatever the outcome.
- `after:ID` is met when the parent started running, or ended without starting
  (Slurm: "begun execution or been cancelled").
- `singleton` is met when no other open job of the same team, user and name is
  active, or pending with a smaller id (Slurm's `_find_singleton_job`: running, or
  pending and submitted earlier). It never becomes impossible.

Every parent listed is its own condition and all of them must hold (Slurm's `,`;
so `afternotok:7:8` waits for both 7 and 8 to fail). A requeued or preempted parent is
pending again, not ended, so `afterok`/`afternotok`/`afterany` wait for its final end
(Slurm keeps a requeued job's dependents waiting too); `after` counts its first start.
"""

from __future__ import annotations

from dataclasses import dataclass

AFTER = "after"
AFTERANY = "afterany"
AFTEROK = "afterok"
AFTERNOTOK = "afternotok"
SINGLETON = "singleton"
# The types that name parent jobs, in the order a normalized spec lists them.
PARENT_TYPES = (AFTEROK, AFTERNOTOK, AFTERANY, AFTER)
TYPES = (*PARENT_TYPES, SINGLETON)

MET, WAITING, NEVER = "met", "waiting", "never"

_SUCCEEDED, _FAILED, _CANCELLED = "succeeded", "failed", "cancelled"
_ENDED = (_SUCCEEDED, _FAILED, _CANCELLED)
_ACTIVE = ("admitted", "running", "preempting")
_WAITS_FOR = {AFTEROK: "succeed", AFTERNOTOK: "fail", AFTERANY: "end", AFTER: "start"}


@dataclass(frozen=True)
class Parent:
    """What the rule needs of a parent job (or of a job a singleton waits behind)."""

    id: int
    name: str
    state: str
    started: bool = False  # it ran at some point of its current or an earlier attempt


@dataclass(frozen=True)
class Judgement:
    """MET (release it), WAITING (keep it held; `sentence` names what it waits for) or
    NEVER (cancel it: `parent` is the job whose end made the condition impossible)."""

    status: str
    sentence: str
    parent: Parent | None = None


def condition_status(kind: str, parent: Parent) -> str:
    """Return MET, WAITING or NEVER for one `kind:parent` condition (see the module)."""
    ended = parent.state in _ENDED
    if kind == AFTEROK:
        return MET if parent.state == _SUCCEEDED else NEVER if ended else WAITING
    if kind == AFTERNOTOK:
        if parent.state in (_FAILED, _CANCELLED):
            return MET
        return NEVER if ended else WAITING
    if kind == AFTERANY:
        return MET if ended else WAITING
    if kind == AFTER:
        return MET if ended or parent.started or parent.state == "running" else WAITING
    raise ValueError(f"unknown dependency type {kind!r}")


def blocks_singleton(job_id: int, other: Parent) -> bool:
    """Whether `other` (same team, user and name) keeps singleton job `job_id` waiting."""
    return other.id != job_id and (
        other.state in _ACTIVE or (other.state == "pending" and other.id < job_id)
    )


def judge(
    job_id: int,
    conditions: list[tuple[str, Parent]],
    singleton: bool = False,
    namesakes: list[Parent] = (),
) -> Judgement:
    """The verdict on a held job: its `conditions` ((type, parent) pairs), and when it is
    a singleton, the other open jobs of its team, user and name (`namesakes`).

    NEVER wins over WAITING (the first impossible condition in the given order names
    the parent), so a pipeline whose training failed ends its report job at once."""
    waiting = []
    for kind, parent in conditions:
        status = condition_status(kind, parent)
        if status == NEVER:
            return Judgement(NEVER, never_sentence(kind, parent), parent)
        if status == WAITING:
            waiting.append(
                f"job {parent.id} ({parent.name}) to {_WAITS_FOR[kind]} (it is {parent.state})"
            )
    if singleton:
        ahead = sorted(o.id for o in namesakes if blocks_singleton(job_id, o))
        if ahead:
            jobs = ", ".join(str(i) for i in ahead[:5]) + (", …" if len(ahead) > 5 else "")
            word = "job" if len(ahead) == 1 else "jobs"
            waiting.append(f"{word} {jobs} of the same name and user to end (singleton)")
    if waiting:
        return Judgement(WAITING, "Waits for " + _and(waiting) + ".")
    return Judgement(MET, "Its dependencies are met.")


def never_sentence(kind: str, parent: Parent) -> str:
    """Why a condition can never be met, naming the parent (Slurm's DependencyNeverSatisfied)."""
    return (
        f"Dependency {kind}:{parent.id} can never be met: job {parent.id} ({parent.name}) "
        f"{parent.state}."
    )


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]

"""`berth why`: a job's state in plain words, and what would change it.

The portal sends the reason code and a sentence with the numbers that matter
(scheduler/reasons.py defines the codes); this adds what the user can do.
"""

from __future__ import annotations

from berthcli.output import at, duration, ordinal, shape, times_in, when

# reason code -> what would let the job start sooner
REMEDIES = {
    "new": "Nothing: the next scheduling pass (every few seconds) will place it or say why it waits.",
    "requeued": "Nothing: it was put back in the queue with its original submit time.",
    "never_fits": "It cannot start as it is. Ask for fewer workers or fewer GPUs per worker, "
    "or ask an admin for more quota or bigger nodes; then cancel it and submit again.",
    "no_nodes": "A node of its GPU flavor becoming Ready and uncordoned (ask an admin), "
    "or submitting to another flavor.",
    "backoff": "Nothing: after a preemption or a lost node it waits out its requeue backoff, "
    "then keeps its place in the queue.",
    "fifo_blocked": "The blocked job ahead of it starting or being cancelled.",
    "waiting_for_preemption": "Nothing: preempted jobs are stopping to make room; it starts "
    "when their grace periods end.",
    "quota": "Your team's running jobs finishing, a smaller gang, or more quota for the team.",
    "cohort_busy": "Other teams of the cohort freeing the quota they use, or a gang that fits "
    "within your team's own nominal quota.",
    "reserved": "The job holding the backfill reservation starting, or a shorter "
    "max run time so it can backfill before that reservation.",
    "priority": "The jobs ahead of it in its queue starting, or a higher priority.",
    "topology": "GPUs freeing up inside one rack/block, or fewer workers so the gang fits in one.",
    "fragmented": "Whole nodes freeing up, or fewer GPUs per worker.",
    "no_capacity": "Running jobs of its flavor finishing (see its estimated start), or a smaller gang.",
    "previous_attempt": "Nothing: the workers of its previous attempt are stopping.",
}


def explain(job: dict) -> list[str]:
    """Lines for people: what the job is doing and, while pending, what would change it."""
    state = job["state"]
    who = f"Job {job['id']} ({job['name']}, {shape(job)})"
    head = f"{who} is {state}"
    if state == "pending":
        return _pending(job, head)
    if state in ("admitted", "running"):
        since = at(job.get("started_at") or job.get("admitted_at"))
        head = f"{who} has been {state} since {since}" if since else head
        return [f"{head}; it may run for up to {duration(job['max_runtime_seconds'])}."]
    if state == "preempting":
        return [f"{head}: it was chosen to make room and is stopping; it will be requeued."]
    return _ended(job, who)


def _pending(job: dict, head: str) -> list[str]:
    code = job.get("reason_code") or "new"
    reason = times_in(job.get("reason") or "waiting for the scheduler.")
    lines = [f"{head}: {reason} (reason: {code})"]
    place = []
    if job.get("position"):
        place.append(f"it is {ordinal(job['position'])} in {job['team']}/{job['queue']}")
    start = when(job.get("estimated_start"))
    place.append(f"estimated start {start}" if start else "no estimated start yet")
    sentence = "; ".join(place)
    lines.append(sentence[0].upper() + sentence[1:] + ".")  # not capitalize(): "UTC" stays
    lines.append("What would change it: " + REMEDIES.get(code, "see the reason above."))
    return lines


ENDED = {"succeeded": "succeeded", "failed": "failed", "cancelled": "was cancelled"}


def _ended(job: dict, who: str) -> list[str]:
    """`Job 7 (…) failed at 10:06 UTC (5m ago) with exit code 3.`"""
    finished = at(job.get("finished_at"))
    line = f"{who} {ENDED.get(job['state'], job['state'])}{' at ' + finished if finished else ''}"
    if job.get("exit_code") is not None:
        line += f" with exit code {job['exit_code']}"
    lines = [line + "."]
    last = (job.get("events") or [])[-1:]
    if last and last[0].get("message"):
        lines.append(f"Last event: {last[0]['kind']}: {times_in(last[0]['message'])}")
    if job.get("reason"):
        lines.append(f"Reason: {times_in(job['reason'])}")
    return lines

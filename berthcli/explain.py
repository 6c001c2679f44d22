"""`berth why`: a job's state in plain words, and what would change it.

The portal sends the reason code and a sentence with the numbers that matter
(scheduler/reasons.py defines the codes) and what would change it (`remedy`);
this words them for a terminal.
"""

from __future__ import annotations

from berthcli.output import at, duration, ordinal, shape, times_in, when


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
    if job.get("remedy"):  # the portal's advice by reason code; an older portal sends none
        lines.append("What would change it: " + job["remedy"])
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

"""Job arrays in the CLI, the way Slurm writes them.

`berth submit --array 0-99%8 …` submits one (POST /api/v1/arrays/). An array is
addressed as squeue shows it: `12_` is array 12 (all its tasks), `12_4` its task of
index 4, a plain `12` is job 12. `berth queue` collapses an array's pending tasks into
one row, `12_[4-99%8]`, and lists its running tasks one by one, `12_3`; `--expand`
lists every task.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from berthcli import exitcodes
from berthcli.client import ApiError, Client
from berthcli.output import print_json

_REF = re.compile(r"(\d{1,18})(?:_(\d{1,9})?)?\Z")


@dataclass(frozen=True)
class ArrayRef:
    """`12_` (index None: the whole array) or `12_4` (one task)."""

    array: int
    index: int | None = None

    def __str__(self) -> str:
        return f"{self.array}_{'' if self.index is None else self.index}"


def parse_ref(text: str) -> int | ArrayRef:
    """argparse type of a job argument: `12` (a job), `12_` (an array), `12_4` (a task)."""
    match = _REF.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a job id (12), an array (12_) or one of its tasks (12_4)"
        )
    if "_" not in text:
        return int(match[1])
    return ArrayRef(int(match[1]), None if match[2] is None else int(match[2]))


def job_id(client: Client, ref: int | ArrayRef) -> int:
    """The job id a reference names; a whole array is not one job (UsageError)."""
    if isinstance(ref, int):
        return ref
    if ref.index is None:
        from berthcli.commands import UsageError

        raise UsageError(f"{ref} is a whole array; name one task, e.g. {ref.array}_0")
    params = {"array": ref.array, "array_index": ref.index}
    found = client.get("/api/v1/jobs/", params).body["results"]
    if not found:
        raise ApiError(404, "not_found", f"No task {ref} (no such array or index, or not yours).")
    return found[0]["id"]


# --- submit ---------------------------------------------------------------------------


def submit(args, client: Client, team: str | None, job: dict, key: str) -> int:
    """Submit `job` as the array `args.array`; without `{index}` in its name each task is
    named `NAME-INDEX`, as `berth submit --array` always named them."""
    name = job.get("name") or "job"
    if "{index}" not in name:
        name += "-{index}"
    body = job | {"name": name, "array": args.array} | ({"team": team} if team else {})
    reply = client.post("/api/v1/arrays/", body, headers={"Idempotency-Key": key}, safe=True)
    got = reply.body
    if args.json:
        print_json(got)
    elif args.parsable:
        print(f"{got['id']}_")
    else:
        ids = got["ids"]
        span = f"{ids[0]}–{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) else "see --json"
        limit = f", at most {got['limit']} at once" if got["limit"] else ""
        print(
            f"Submitted array {got['id']}_ to {got['team']}: {got['size']} tasks "
            f"[{got['array']}]{limit}; jobs {span}"
        )
    return exitcodes.OK


# --- queue ----------------------------------------------------------------------------


def collapse(client: Client, jobs: list[dict], row) -> list[list]:
    """Rows for `berth queue`: each array's pending tasks as one row `12_[4-99%8]` (at the
    place of its first one, with the array's own count of them), its other tasks one each
    as `12_3`; plain jobs as `row(job)` makes them."""
    rows, shown = [], set()
    arrays: dict[int, dict] = {}
    for job in jobs:
        array = job.get("array")
        if array is None:
            rows.append(row(job))
            continue
        if job["state"] != "pending":
            rows.append([f"{array}_{job['array_index']}", *row(job)[1:]])
            continue
        if array in shown:
            continue
        shown.add(array)
        if array not in arrays:
            arrays[array] = client.get(f"/api/v1/arrays/{array}/").body
        summary = arrays[array]
        cells = row(job)
        cells[0], cells[3] = summary["display"], summary["name"][:24]
        rows.append(cells)
    return rows


def expand(jobs: list[dict], row) -> list[list]:
    """Rows for `berth queue --expand`: every task on its own, `12_4`."""
    return [
        row(j) if j.get("array") is None else [f"{j['array']}_{j['array_index']}", *row(j)[1:]]
        for j in jobs
    ]


# --- status, cancel, wait ---------------------------------------------------------------

FINAL = {
    "succeeded": exitcodes.OK,
    "failed": exitcodes.JOB_FAILED,
    "cancelled": exitcodes.JOB_CANCELLED,
}


def status_lines(a: dict) -> list[str]:
    counts = ", ".join(f"{n} {state}" for state, n in a["counts"].items() if n)
    limit = f", at most {a['limit']} at once" if a["limit"] else ""
    lines = [
        f"Array {a['id']}_  {a['name']}  ({a['team']})  {a['display']}",
        f"State:       {a['state']}",
        f"Tasks:       {a['size']} [{a['array']}]{limit}",
        f"Counts:      {counts}",
    ]
    if a["pending_indices"]:
        lines.append(f"Pending:     {a['pending_indices']}")
    lines.append(f"Submitted:   {a['submitted_at']} by {a['submitted_by'] or '?'}")
    lines.append(f"Tasks list:  berth queue --all --expand --array {a['id']}")
    return lines


def cancel(client: Client, ref: ArrayRef, reason: str | None) -> dict:
    """Cancel a whole array; a retry that finds every task ended is a success if none is
    still open (the first try got through)."""
    try:
        return client.post(
            f"/api/v1/arrays/{ref.array}/cancel/", {"reason": reason} if reason else {}, safe=True
        ).body
    except ApiError as exc:
        if exc.status == 409:
            return client.get(f"/api/v1/arrays/{ref.array}/").body
        raise


def wait(args, client: Client, ref: ArrayRef, sleep, clock) -> int:
    """Poll until no task of the array is open; exit 0 only if every task succeeded, else
    10 if any failed, else 11 (cancelled)."""
    started, last = clock(), None
    while True:
        a = client.get(f"/api/v1/arrays/{ref.array}/").body
        elapsed = clock() - started
        counts = ", ".join(f"{n} {s}" for s, n in a["counts"].items() if n)
        if a["state"] in FINAL:
            print(f"array {ref} {a['state']}: {counts}", file=sys.stderr)
            if args.json:
                print_json(a)
            return FINAL[a["state"]]
        text = f"array {ref}: {a['state']} ({counts})"
        if text != last:
            print(text, file=sys.stderr)
            last = text
        if args.timeout is not None and elapsed >= args.timeout:
            print(f"array {ref} still {a['state']}; stopped waiting", file=sys.stderr)
            if args.json:
                print_json(a)
            return exitcodes.WAIT_TIMEOUT
        pause = args.interval
        if args.timeout is not None:
            pause = max(0.0, min(pause, args.timeout - elapsed))
        sleep(pause)

"""One function per `berth` command: call the API, print for people or `--json`,
return the exit code (berthcli.exitcodes)."""

from __future__ import annotations

import getpass
import socket
import sys
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

from berthcli import arrays, config, exitcodes
from berthcli.client import RETRY_STATUSES, ApiError, Client
from berthcli.explain import explain
from berthcli.jobfile import SpecFileError, load_file, normalise, parse_duration, parse_env
from berthcli.output import (
    at,
    command_line,
    duration,
    ordinal,
    parse_time,
    print_json,
    shape,
    table,
    times_in,
    when,
)

_sleep = time.sleep  # tests replace this to drive `berth wait` without waiting
_clock = time.monotonic

ACTIVE = "pending,admitted,running,preempting"
FINAL = {
    "succeeded": exitcodes.OK,
    "failed": exitcodes.JOB_FAILED,
    "cancelled": exitcodes.JOB_CANCELLED,
}


class UsageError(Exception):
    """The command cannot run as given; the message says what to give instead (exit 2)."""


# --- account -------------------------------------------------------------------------


def login(args, client_for) -> int:
    """Trade a username and password (or, with --sso, a single sign-on) for an API token
    and store it (mode 0600)."""
    if getattr(args, "sso", False):
        from berthcli import sso

        return sso.login(args, _ask)
    url, username, password = _credentials(args)
    body = {"name": args.name or f"berth-cli@{socket.gethostname()}"[:100]}
    if args.expires_days:
        body["expires_in_days"] = args.expires_days
    if args.team:
        body["teams"] = args.team
    client = client_for(url=url, auth=(username, password), token=None)
    # A 429 here is the login lockout (portal/core/logins.py), which lasts the rest of its
    # window (minutes): say so now, not after sending the password again for up to 25.
    client.retry_statuses = RETRY_STATUSES - {429}
    token = client.post("/api/v1/tokens/", body).body
    return save_token(args, url, token, as_whom=f" as {username}")


def save_token(args, url: str, token: dict, as_whom: str = "") -> int:
    """Store a token the API just created (mode 0600) and say so (`berth login`, `--sso`)."""
    path = config.save(url, token.pop("token"))
    if args.json:
        print_json(token | {"url": url, "config": str(path)})
        return exitcodes.OK
    expiry = f", expires {when(token['expires_at'])}" if token.get("expires_at") else ""
    print(f"Logged in to {url}{as_whom}; token {token['prefix']}… saved in {path}{expiry}.")
    return exitcodes.OK


def _credentials(args) -> tuple[str, str, str]:
    """The URL, username and password: from the flags, else asked on the terminal.
    Without a terminal nothing is asked: the password comes from --password-stdin."""
    saved, terminal = config.load(), sys.stdin.isatty()
    if args.password_stdin:
        if not args.username:
            raise UsageError("--password-stdin needs --username (stdin holds the password)")
        url = args.url or saved.url
        if not url:
            raise UsageError("give --url (or set BERTH_URL): stdin holds the password")
        password = sys.stdin.readline().rstrip("\n")
        if not password:
            raise UsageError("--password-stdin: no password on stdin")
        return url, args.username, password
    if not terminal:
        raise UsageError(
            "no terminal to ask for the password: pass it on stdin, e.g. "
            "`berth login --url URL -u NAME --password-stdin < password-file`"
        )
    url = args.url or saved.url or _ask("Berth URL: ")
    username = args.username or _ask("Username: ")
    return url, username, getpass.getpass()


def _ask(prompt: str) -> str:
    """Prompt on stderr, so stdout stays clean for --json."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.strip()


def logout(args, client_for) -> int:
    """Revoke the stored token on the server and forget it locally."""
    client = client_for()
    me = client.get("/api/v1/me/").body
    if me.get("token"):
        client.post(f"/api/v1/tokens/{me['token']['id']}/revoke/", safe=True)
    path = config.forget_token()
    if args.json:
        print_json({"revoked": bool(me.get("token")), "config": str(path)})
    else:
        print(f"Token revoked and removed from {path}.")
    return exitcodes.OK


def whoami(args, client_for) -> int:
    me = client_for().get("/api/v1/me/").body
    if args.json:
        print_json(me)
        return exitcodes.OK
    teams = ", ".join(f"{t['slug']} ({t['role']})" for t in me["teams"]) or "no team"
    print(f"{me['username']}{' (staff)' if me['is_staff'] else ''} — {teams}")
    if me.get("token"):
        teams = me["token"]["teams"]  # null: every team; []: its teams were all deleted
        scope = "all your teams" if teams is None else ", ".join(teams) or "no team"
        expiry = when(me["token"]["expires_at"]) or "never"
        print(f"token {me['token']['prefix']}… reaches {scope}; expires {expiry}")
    return exitcodes.OK


# --- submit ------------------------------------------------------------------------


def submit(args, client_for) -> int:
    team, jobs, bulk = _specs(args)
    client = client_for()
    if args.array:  # with a key, a retry returns the same array, never a second one
        key = args.idempotency_key or f"berth-cli-{uuid.uuid4()}"
        return arrays.submit(args, client, team, jobs[0], key)
    if bulk:
        body = {"jobs": jobs} | ({"team": team} if team else {})
        key = args.idempotency_key or f"berth-cli-{uuid.uuid4()}"
        # With a key a retried bulk submission returns the same jobs, never a second set.
        reply = client.post("/api/v1/jobs/bulk/", body, headers={"Idempotency-Key": key}, safe=True)
        return _print_bulk(args, reply.body)
    key = args.idempotency_key or f"berth-cli-{uuid.uuid4()}"
    body = jobs[0] | ({"team": team} if team else {})
    # With a key, repeating the POST after a lost answer returns the same job.
    reply = client.post("/api/v1/jobs/", body, headers={"Idempotency-Key": key}, safe=True)
    replayed = reply.headers.get("Idempotent-Replayed") == "true"
    if args.json:
        print_json(reply.body)
    elif args.parsable:
        print(reply.body["id"])
    else:
        print(f"Submitted job {reply.body['id']}")
    if replayed and args.idempotency_key:
        print(f"berth: job {reply.body['id']} was already submitted with this key", file=sys.stderr)
    return exitcodes.OK


def _specs(args) -> tuple[str | None, list[dict], bool]:
    """The jobs to send: the file's, with the flags laid over each of them."""
    team, jobs, bulk = load_file(args.file) if args.file else (None, [{}], False)
    team = args.team or team
    flags = _flag_fields(args)
    jobs = [normalise(job | flags) for job in jobs]
    if args.array and bulk:
        raise SpecFileError("--array needs a single job, not a file of many")
    return team, jobs, bulk


def _flag_fields(args) -> dict:
    fields = {
        "name": args.name,
        "queue": args.queue,
        "image": args.image,
        "workers": args.workers,
        "gpus_per_worker": args.gpus_per_worker,
        "flavor": args.flavor,
        "priority": args.priority,
        "preemptible": args.preemptible,
        "checkpoint_signal": args.checkpoint_signal,
        "dependency": args.dependency,
    }
    if args.time:
        fields["max_runtime_seconds"] = parse_duration(args.time)
    if args.grace_period:
        fields["grace_period_seconds"] = parse_duration(args.grace_period)
    if args.command:
        fields["command"] = args.command[1:] if args.command[0] == "--" else args.command
    out = {k: v for k, v in fields.items() if v is not None}
    if args.env:
        out["env"] = parse_env(args.env)
    if args.notify or args.notify_on or args.mail:
        out["notify"] = _notify(args)
    return out


def _notify(args) -> dict:
    """The job's `notify` from --notify, --notify-on and --mail (Slurm's --mail-type)."""
    notify = {"url": args.notify} if args.notify else {}
    if args.notify_on:
        notify["on"] = [e.strip() for e in args.notify_on.split(",") if e.strip()]
    if args.mail:
        notify["email"] = True
    return notify


def _print_bulk(args, body: dict) -> int:
    if args.json:
        print_json(body)
    elif args.parsable:
        print("\n".join(str(i) for i in body["ids"]))
    else:
        ids = body["ids"]
        span = (
            f"{ids[0]}–{ids[-1]}"
            if ids == list(range(ids[0], ids[-1] + 1))
            else ", ".join(map(str, ids))
        )
        print(f"Submitted {body['count']} jobs to {body['team']}: {span}")
    return exitcodes.OK


# --- look ---------------------------------------------------------------------------


def status(args, client_for) -> int:
    client = client_for()
    if isinstance(args.job, arrays.ArrayRef) and args.job.index is None:
        body = client.get(f"/api/v1/arrays/{args.job.array}/").body
        if args.json:
            print_json(body)
        else:
            print("\n".join(arrays.status_lines(body)))
        return exitcodes.OK
    job = client.get(f"/api/v1/jobs/{arrays.job_id(client, args.job)}/").body
    if args.json:
        print_json(job)
        return exitcodes.OK
    print("\n".join(_status_lines(job)))
    return exitcodes.OK


def _notify_line(notify: dict) -> str:
    targets = [t for t in (notify.get("url"), "e-mail" if notify.get("email") else None) if t]
    return f"{' and '.join(targets)} on {', '.join(notify.get('on') or [])}"


def _status_lines(job: dict) -> list[str]:
    lines = [
        f"Job {job['id']}  {job['name']}  ({job['team']}/{job['queue']})",
        f"State:       {job['state']}" + (f" ({job['reason_code']})" if job["reason_code"] else ""),
    ]
    if job.get("array") is not None:
        lines.append(
            f"Array task:  {job['array']}_{job['array_index']} (berth status {job['array']}_)"
        )
    if job["reason"]:
        lines.append(f"Reason:      {times_in(job['reason'])}")
    if job["position"]:
        lines.append(f"Position:    {ordinal(job['position'])} in its queue")
    if job["estimated_start"]:
        lines.append(f"Est. start:  {when(job['estimated_start'])}")
    if job.get("dependency"):
        lines.append(f"Dependency:  {job['dependency']}")
    preempt = "preemptible" if job["preemptible"] else "not preemptible"
    lines += [
        f"Shape:       {shape(job)}, priority {job['priority']}, {preempt}, "
        f"max {duration(job['max_runtime_seconds'])}",
        f"Image:       {job['image']}",
        f"Command:     {command_line(job['command'])}",
        f"Submitted:   {when(job['submitted_at'])} by {job['submitted_by'] or '?'}",
    ]
    for label, key in (("Started", "started_at"), ("Finished", "finished_at")):
        if job.get(key):
            lines.append(f"{label + ':':<13}{when(job[key])}")
    if job.get("stops_by"):  # workers told to stop still run
        lines.append(
            f"Stop:        asked {when(job['stop_requested_at'])}: {job['checkpoint_signal']}, "
            f"then a kill after its grace period, by about {at(job['stops_by'])}"
        )
    if job["exit_code"] is not None:
        lines.append(f"Exit code:   {job['exit_code']}")
    if job.get("notify"):
        lines.append(f"Notify:      {_notify_line(job['notify'])}")
    if job["allocations"]:
        lines.append("GPUs:")
        lines += [f"  rank {a['rank']}  {a['node']}  {a['gpu_uuid']}" for a in job["allocations"]]
    lines.append("Events:")
    for event in job["events"][-10:]:
        stamp = parse_time(event["at"]).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"  {stamp}  {event['kind']:<12} {times_in(event['message'])}")
    return lines


def queue(args, client_for) -> int:
    params = {"ordering": "queue", "limit": min(args.limit, 1000)}
    if not args.all:
        params["state"] = args.state or ACTIVE
    for key in ("queue", "team"):
        if getattr(args, key):
            params[key] = getattr(args, key)
    if args.me:
        params["submitted_by"] = "me"
    if args.array:
        params["array"] = args.array
    elif not args.expand:
        params["collapse"] = "true"  # an array's pending tasks: one row, and --limit counts it once
    client = client_for()
    jobs = _all_pages(client, "/api/v1/jobs/", params, args.limit)
    if args.json:
        print_json(jobs)
        return exitcodes.OK
    if args.expand or args.array:
        rows = arrays.expand(jobs, _queue_row)
    else:
        rows = arrays.collapse(client, jobs, _queue_row)
    headers = ["JOBID", "TEAM", "QUEUE", "NAME", "USER", "STATE", "GPUS", "POS", "REASON", "START"]
    print(table(rows, headers))
    return exitcodes.OK


def _all_pages(client: Client, path: str, params: dict, limit: int) -> list[dict]:
    jobs, url = [], path
    while url and len(jobs) < limit:
        body = client.get(url, params).body
        jobs += body["results"]
        url, params = _local(body["next"]), None
    return jobs[:limit]


def _local(url: str | None) -> str | None:
    """The path and query of a `next` link: follow it on the URL we were given, even
    when the portal behind a proxy names itself differently."""
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def _queue_row(job: dict) -> list:
    # When it started (or should): a job cancelled or failed while pending never did.
    if job["state"] == "pending":
        start = when(job["estimated_start"])
    else:
        start = when(job["started_at"] or job["admitted_at"])
    return [
        job["id"],
        job["team"],
        job["queue"],
        job["name"][:24],
        job["submitted_by"],
        job["state"],
        job["gpus"],
        job["position"],
        _reason_cell(job),
        start,
    ]


def _reason_cell(job: dict) -> str | None:
    """The reason code; a job held for its dependencies names them, as squeue's
    `(Dependency)` does not: `dependency(afterok:12)`."""
    if job["reason_code"] == "dependency" and job.get("dependency"):
        return f"dependency({job['dependency']})"
    return job["reason_code"] or None


def why(args, client_for) -> int:
    client = client_for()
    job = client.get(f"/api/v1/jobs/{arrays.job_id(client, args.job)}/").body
    lines = explain(job)
    if args.json:
        print_json({"id": job["id"], "state": job["state"], "reason_code": job["reason_code"],
                    "explanation": lines})  # fmt: skip
    else:
        print("\n".join(lines))
    return exitcodes.OK


def share(args, client_for) -> int:
    client = client_for()
    slugs = [args.team] if args.team else [t["slug"] for t in client.get("/api/v1/teams/").body]
    teams = [client.get(f"/api/v1/teams/{slug}/").body for slug in slugs]
    if args.json:
        print_json(teams)
        return exitcodes.OK
    rows = [
        [t["slug"], q["flavor"], q["nominal"], q["borrowing_limit"], q["lending_limit"],
         q["used"], q["borrowed"], q["pending_gpus"]]
        for t in teams for q in t["quota"]
    ]  # fmt: skip
    print(
        table(
            rows,
            ["TEAM", "FLAVOR", "NOMINAL", "BORROW_LIM", "LEND_LIM", "USED", "BORROWED", "PENDING"],
        )
    )
    standings = {s["team"]: s for t in teams for s in t["fair_share"]}
    print("\nFair share (lowest share is served first):")
    rows = [
        [
            s["team"],
            f"{s['weight']:g}",
            f"{s['current']:.3f}",
            f"{s['historical']:.3f}",
            f"{s['share']:.3f}",
        ]
        for s in sorted(standings.values(), key=lambda s: (s["share"], s["team"]))
    ]
    print(table(rows, ["TEAM", "WEIGHT", "CURRENT", "HISTORICAL", "SHARE"]))
    budgets = [(t["slug"], b) for t in teams for b in t.get("budgets", [])]
    if budgets:
        print("\nGPU-hour budgets (at the limit new jobs wait: budget_exhausted):")
        print(table([budget_row(slug, b) for slug, b in budgets], BUDGET_HEADERS))
    now = datetime.now(UTC)
    cooling = [
        [t["slug"], b["flavor"], b["reclaims"], at(b["may_borrow_from"], now)]
        for t in teams
        for b in t.get("reclaim_backoff", [])
        if parse_time(b["may_borrow_from"]) > now  # a cooldown that is over holds nothing
    ]
    if cooling:
        print("\nReclaim backoff (jobs that would borrow this flavor wait: backoff):")
        print(table(cooling, ["TEAM", "FLAVOR", "IN_A_ROW", "MAY_BORROW_FROM"]))
    return exitcodes.OK


BUDGET_HEADERS = ["TEAM", "FLAVOR", "PERIOD", "USED", "SOFT", "LIMIT", "USED%", "FORECAST", "STATE"]


def budget_row(team: str, b: dict) -> list:
    """One budget of `berth share`: GPU-hours used, soft threshold, limit, month-end forecast."""
    period = "month" if b["period"] == "month" else f"{b['window_days']}d"
    hours = [b["used_gpu_hours"], b["soft_gpu_hours"], b["limit_gpu_hours"]]
    forecast = b["forecast_gpu_hours"]
    return [team, b["flavor"], period, *(None if h is None else f"{h:,.0f}" for h in hours),
            f"{b['percent_used']:.0f}%", None if forecast is None else f"{forecast:,.0f}",
            b["state"]]  # fmt: skip


def logs(args, client_for) -> int:
    params = {"attempt": args.attempt} if args.attempt is not None else None
    client = client_for()
    body = client.get(f"/api/v1/jobs/{arrays.job_id(client, args.job)}/logs/", params).body
    workers = [w for w in body["workers"] if args.rank is None or w["rank"] == args.rank]
    if args.json:
        print_json(body | {"workers": workers})
        return exitcodes.OK
    if not workers:
        print(f"No logs for job {args.job} yet.", file=sys.stderr)
    for worker in workers:
        if len(workers) > 1:
            print(f"==> rank {worker['rank']} on {worker['node']} ({worker['state']}) <==")
        sys.stdout.write(worker["log_tail"])
        if worker["log_tail"] and not worker["log_tail"].endswith("\n"):
            sys.stdout.write("\n")
    return exitcodes.OK


# --- act ----------------------------------------------------------------------------


def cancel(args, client_for) -> int:
    client, results, code = client_for(), [], exitcodes.OK
    for job_id in args.jobs:
        try:
            if isinstance(job_id, arrays.ArrayRef) and job_id.index is None:
                job = arrays.cancel(client, job_id, args.reason)
            else:
                job_id = arrays.job_id(client, job_id)
                job = _cancel_one(client, job_id, args.reason)
        except ApiError as exc:
            results.append({"id": _ref_json(job_id), "error": exc.body or {"message": exc.message}})
            print(f"berth: job {job_id}: {exc.message}", file=sys.stderr)
            code = code or _code_for(exc)
            continue
        results.append({"id": _ref_json(job_id), "state": job["state"]})
        if not args.json:
            print(f"Cancelled {'array' if isinstance(job_id, arrays.ArrayRef) else 'job'} {job_id}")
    if args.json:
        print_json(results)
    return code


def _ref_json(ref) -> int | str:
    return ref if isinstance(ref, int) else str(ref)


def _cancel_one(client: Client, job_id: int, reason: str | None) -> dict:
    """Cancel; a retry that finds the job already cancelled (by us) is a success too."""
    try:
        return client.post(
            f"/api/v1/jobs/{job_id}/cancel/", {"reason": reason} if reason else {}, safe=True
        ).body
    except ApiError as exc:
        if exc.status == 409:
            job = client.get(f"/api/v1/jobs/{job_id}/").body
            if job["state"] == "cancelled":
                return job
        raise


def wait(args, client_for) -> int:
    """Poll until the job ends; exit 0 if it succeeded, else its own code (exitcodes)."""
    client, started, last = client_for(), _clock(), None
    if isinstance(args.job, arrays.ArrayRef) and args.job.index is None:
        return arrays.wait(args, client, args.job, _sleep, _clock)
    args.job = arrays.job_id(client, args.job)
    progress = _Progress(args.job)
    while True:
        job = client.get(f"/api/v1/jobs/{args.job}/").body
        elapsed = _clock() - started
        if job["state"] in FINAL:
            progress.done(job, elapsed)
            if args.json:
                print_json(job)
            return FINAL[job["state"]]
        last = progress.update(job, elapsed, last)
        if args.timeout is not None and elapsed >= args.timeout:
            progress.timed_out(job, elapsed)
            if args.json:
                print_json(job)
            return exitcodes.WAIT_TIMEOUT
        pause = args.interval
        if args.timeout is not None:
            pause = max(0.0, min(pause, args.timeout - elapsed))
        _sleep(pause)


class _Progress:
    """One progress line on stderr: rewritten in place on a terminal, one line per change otherwise."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.tty = sys.stderr.isatty()

    def update(self, job: dict, elapsed: float, last: str | None) -> str:
        text = f"job {self.job_id}: {job['state']}"
        if job["state"] == "pending":
            extras = [job["reason_code"] or None]
            if job["position"]:
                extras.append(f"{ordinal(job['position'])} in queue")
            if job["estimated_start"]:
                extras.append(f"start {when(job['estimated_start'])}")
            text += " (" + ", ".join(e for e in extras if e) + ")" if any(extras) else ""
        if self.tty:
            sys.stderr.write(f"\r\033[K{text} · waited {duration(elapsed)}")
            sys.stderr.flush()
        elif text != last:
            print(f"{text} · waited {duration(elapsed)}", file=sys.stderr)
        return text

    def done(self, job: dict, elapsed: float) -> None:
        exit_code = f" (exit code {job['exit_code']})" if job["exit_code"] is not None else ""
        why = f": {times_in(job['reason'])}" if job["state"] == "failed" and job["reason"] else ""
        self._end(
            f"job {self.job_id} {job['state']}{exit_code} after waiting {duration(elapsed)}{why}"
        )

    def timed_out(self, job: dict, elapsed: float) -> None:
        self._end(
            f"job {self.job_id} still {job['state']} after {duration(elapsed)}; stopped waiting"
        )

    def _end(self, text: str) -> None:
        print(("\r\033[K" if self.tty else "") + text, file=sys.stderr)


def _code_for(exc: ApiError) -> int:
    if exc.status == 401:
        return exitcodes.NOT_AUTHENTICATED
    if exc.status == 404:
        return exitcodes.NOT_FOUND
    if exc.status == 429 or exc.status >= 500:
        return exitcodes.UNAVAILABLE
    return exitcodes.REFUSED

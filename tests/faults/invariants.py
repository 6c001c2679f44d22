"""The consistency checker every fault scenario runs: what must hold of the database
whatever was killed, stopped or restarted, and whenever it is read.

It reads with plain SQL in one REPEATABLE READ, READ ONLY transaction, so it sees
one consistent snapshot even while the system under test keeps running, and it
trusts nothing of the product's code. Each rule returns the violations it finds;
`check()` collects them all and `assert_consistent()` fails with the first few.

The rules:

1. No GPU has two active allocations.
2. Every active allocation belongs to a live worker (not exited or lost) and agrees
   with it: same job, same node, same rank, and a GPU of that node.
3. Every admitted or running job has exactly one worker row per rank 0..workers-1
   in its current attempt; each live one holds exactly gpus_per_worker active
   allocations. (A worker that already exited 0 holds none: a gang releases
   each worker's GPUs as it ends, so `workers × gpus_per_worker` active
   allocations holds until the first worker of the gang ends.) None of them is
   lost or failed, and not all of them have ended (the job would have moved on);
   an admitted job does not have all of them running (it would be running).
4. A pending job has no worker of its current attempt, so no allocation of it;
   workers of earlier attempts (and of terminal jobs) may still hold GPUs only
   while live, i.e. still stopping (rule 2).
5. Every job's timeline is one chain: the first event is `submitted` into
   pending, each event starts where the previous one ended, and the last one
   ends in the job's state.
6. Terminal jobs have finished_at; others do not. Admitted, running and
   preempting jobs have admitted_at.
7. Every job the API accepted (the ids its 201s returned, and the job each
   Idempotency-Key resolved to) exists exactly once, with that key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

LIVE = ("assigned", "starting", "running", "stopping")
ENDED = ("exited", "lost")
TERMINAL = ("succeeded", "failed", "cancelled")
ACTIVE = ("admitted", "running", "preempting")
LIMIT = 20  # violations reported per rule


@dataclass
class Accepted:
    """What clients were told: job ids from 201s (and bulk receipts), and for
    submissions with an Idempotency-Key the id the key resolved to."""

    ids: list[int] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)  # "<team slug>/<key>" -> job id

    def add(self, job_id: int, key: str | None = None) -> None:
        self.ids.append(job_id)
        if key is not None:
            self.keys[key] = job_id


@dataclass
class Report:
    violations: dict[str, list[str]]
    jobs_by_state: dict[str, int]
    jobs: int

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def summary(self) -> str:
        lines = [f"{self.jobs} jobs: {self.jobs_by_state}"]
        for rule, found in self.violations.items():
            if found:
                lines.append(f"{rule}: {len(found)} violation(s), e.g.")
                lines += [f"  - {v}" for v in found[:5]]
        return "\n".join(lines)


def check(url: str, accepted: Accepted | None = None) -> Report:
    with psycopg.connect(url, connect_timeout=10) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.transaction():
            cur = conn.cursor()
            violations = {
                "1 double-booked GPU": _double_booked(cur),
                "2 allocation without its live worker": _allocations_of_ended(cur),
                "3 admitted/running gang incomplete": _gangs(cur),
                "4 pending job holds its current attempt": _pending(cur),
                "5 timeline disagrees with state": _timelines(cur),
                "6 timestamps disagree with state": _timestamps(cur),
                "7 accepted job lost or duplicated": _accepted(cur, accepted or Accepted()),
            }
            by_state = dict(cur.execute("SELECT state, count(*) FROM core_job GROUP BY state"))
    return Report(violations, by_state, sum(by_state.values()))


def assert_consistent(url: str, accepted: Accepted | None = None, when: str = "") -> Report:
    report = check(url, accepted)
    assert report.ok, f"inconsistent database{f' ({when})' if when else ''}:\n{report.summary()}"
    return report


def _rows(cur, sql: str, params=()) -> list[tuple]:
    return cur.execute(sql, params).fetchall()


def _double_booked(cur) -> list[str]:
    rows = _rows(
        cur,
        "SELECT gpu_id, array_agg(job_id ORDER BY job_id) FROM core_allocation WHERE active "
        "GROUP BY gpu_id HAVING count(*) > 1 LIMIT %s",
        [LIMIT],
    )
    return [f"GPU {gpu} is held by jobs {jobs}" for gpu, jobs in rows]


def _allocations_of_ended(cur) -> list[str]:
    rows = _rows(
        cur,
        """
        SELECT a.id, a.job_id, w.job_id, w.attempt, w.rank, w.state, a.node_id, w.node_id,
               a.worker_rank, g.node_id
        FROM core_allocation a
        JOIN core_worker w ON w.id = a.worker_id
        JOIN core_gpu g ON g.id = a.gpu_id
        WHERE a.active AND (
            w.state = ANY(%s) OR a.job_id <> w.job_id OR a.node_id <> w.node_id
            OR a.worker_rank <> w.rank OR g.node_id <> a.node_id)
        LIMIT %s
        """,
        [list(ENDED), LIMIT],
    )
    return [
        f"allocation {a} (job {aj}) is active but its worker {wj}.{att}.{rank} is {state} "
        f"(nodes {an}/{wn}/{gn}, rank {ar})"
        for a, aj, wj, att, rank, state, an, wn, ar, gn in rows
    ]


def _gangs(cur) -> list[str]:
    rows = _rows(
        cur,
        """
        WITH cur AS (
            SELECT j.id, j.state, j.workers, j.gpus_per_worker, w.id AS wid, w.rank,
                   w.state AS wstate, w.exit_code,
                   (SELECT count(*) FROM core_allocation a WHERE a.worker_id = w.id AND a.active)
                       AS held
            FROM core_job j
            LEFT JOIN core_worker w ON w.job_id = j.id AND w.attempt = j.attempt
            WHERE j.state IN ('admitted', 'running')
        )
        SELECT id, state, workers, gpus_per_worker,
               count(wid) AS n, count(DISTINCT rank) AS ranks, min(rank), max(rank),
               count(*) FILTER (WHERE wstate = ANY(%(live)s) AND held <> gpus_per_worker),
               count(*) FILTER (WHERE wstate = 'lost' OR (wstate = 'exited' AND exit_code <> 0)),
               count(*) FILTER (WHERE wstate = ANY(%(ended)s)),
               count(*) FILTER (WHERE wstate IN ('running', 'exited'))
        FROM cur GROUP BY id, state, workers, gpus_per_worker
        """,
        {"live": list(LIVE), "ended": list(ENDED)},
    )
    out = []
    for pk, state, workers, per, n, ranks, lo, hi, wrong_held, bad, ended, up in rows:
        if n != workers or ranks != workers or lo != 0 or hi != workers - 1:
            out.append(
                f"job {pk} ({state}) has {n} worker rows for ranks {lo}..{hi}, not {workers}"
            )
        if wrong_held:
            out.append(f"job {pk} ({state}): {wrong_held} live worker(s) without {per} GPUs each")
        if bad:
            out.append(
                f"job {pk} is {state} but {bad} worker(s) of its attempt failed or were lost"
            )
        if n and ended == n:
            out.append(f"job {pk} is {state} but all its workers ended")
        if state == "admitted" and n and up == n:
            out.append(f"job {pk} is admitted but all its workers run or ran")
        if len(out) >= LIMIT:
            break
    return out


def _pending(cur) -> list[str]:
    rows = _rows(
        cur,
        """
        SELECT j.id, w.rank, w.state,
               (SELECT count(*) FROM core_allocation a WHERE a.worker_id = w.id AND a.active)
        FROM core_job j JOIN core_worker w ON w.job_id = j.id AND w.attempt = j.attempt
        WHERE j.state = 'pending' LIMIT %s
        """,
        [LIMIT],
    )
    return [
        f"pending job {pk} has worker rank {rank} ({st}, {held} GPUs) in its current attempt"
        for pk, rank, st, held in rows
    ]


def _timelines(cur) -> list[str]:
    rows = _rows(
        cur,
        """
        WITH e AS (
            SELECT job_id, id, kind, from_state, to_state,
                   lag(to_state) OVER (PARTITION BY job_id ORDER BY id) AS prev,
                   row_number() OVER (PARTITION BY job_id ORDER BY id) AS n,
                   row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS back
            FROM core_jobevent
        )
        SELECT j.id, j.state, e.id, e.n, e.back, e.kind, e.from_state, e.to_state, e.prev
        FROM core_job j LEFT JOIN e ON e.job_id = j.id
        WHERE e.id IS NULL
           OR (e.n = 1 AND (e.kind <> 'submitted' OR e.to_state <> 'pending'))
           OR (e.n > 1 AND e.from_state IS DISTINCT FROM e.prev)
           OR (e.back = 1 AND e.to_state <> j.state)
        ORDER BY j.id LIMIT %s
        """,
        [LIMIT],
    )
    out = []
    for pk, state, ev, n, back, kind, frm, to, prev in rows:
        if ev is None:
            out.append(f"job {pk} ({state}) has no events")
        elif back == 1 and to != state:
            out.append(f"job {pk} is {state} but its last event {kind} went to {to}")
        elif n == 1:
            out.append(f"job {pk}'s first event is {kind} to {to}, not submitted to pending")
        else:
            out.append(f"job {pk}: event {ev} {kind} from {frm} follows one that ended in {prev}")
    return out


def _timestamps(cur) -> list[str]:
    rows = _rows(
        cur,
        """
        SELECT id, state, finished_at IS NOT NULL, admitted_at IS NOT NULL FROM core_job
        WHERE (state = ANY(%(terminal)s)) <> (finished_at IS NOT NULL)
           OR (state = ANY(%(active)s) AND admitted_at IS NULL)
        LIMIT %(limit)s
        """,
        {"terminal": list(TERMINAL), "active": list(ACTIVE), "limit": LIMIT},
    )
    return [
        f"job {pk} is {state} with finished_at {'set' if fin else 'unset'}, "
        f"admitted_at {'set' if adm else 'unset'}"
        for pk, state, fin, adm in rows
    ]


def _accepted(cur, accepted: Accepted) -> list[str]:
    out = []
    ids = sorted(set(accepted.ids))
    keyed = set(accepted.keys.values())
    duplicates = len(accepted.ids) - len(ids)
    # One id answered to two different submissions is a duplicate, unless it is one key's replay.
    replays = len([i for i in accepted.ids if i in keyed]) - len(keyed)
    if duplicates > max(replays, 0):
        out.append(f"{duplicates - replays} job ids were returned for two different submissions")
    found = {pk for (pk,) in _rows(cur, "SELECT id FROM core_job WHERE id = ANY(%s)", [ids])}
    lost = [pk for pk in ids if pk not in found]
    if lost:
        out.append(f"{len(lost)} accepted jobs are missing, e.g. {lost[:10]}")
    if accepted.keys:
        rows = _rows(
            cur,
            "SELECT t.slug || '/' || j.idempotency_key, array_agg(j.id) FROM core_job j "
            "JOIN core_team t ON t.id = j.team_id WHERE j.idempotency_key IS NOT NULL "
            "GROUP BY 1",
        )
        by_key = dict(rows)
        for key, pk in accepted.keys.items():
            held = by_key.get(key)
            if held != [pk]:
                out.append(
                    f"Idempotency-Key {key} was answered with job {pk}; the database has {held}"
                )
                if len(out) >= LIMIT:
                    break
    return out

"""The hand-written SQL statements that survive, each beside the ORM query it replaces.

A statement is hand-written only on a measured hot path (docs/benchmarks.md): the
ORM spends more Python building these queries than the database spends answering
them. Each section holds the statement and, next to it, the ORM query that answers
the same (a function `*_orm`, or named in the docstring where it is a whole path of
its caller); tests/portal/test_statements.py runs both and compares the answers.

Where they run:

- **Both backends**: `token_sql` (authenticate_token runs it on SQLite too) and
  `node_by_token` (its caller uses the ORM on SQLite; the parity test runs the
  statement on SQLite and on PostgreSQL).
- **PostgreSQL only, by design**: the others. They bind arrays as one parameter
  (`= ANY(%s)`, `unnest`), use `LATERAL`, a data-modifying `WITH`,
  `UPDATE … FROM`, `md5(row::text)`, `statement_timestamp()`, `array_agg` or
  `extract(epoch …)`, and are kept
  prepared by db.server_binding_cursor; SQLite (the `make run` default) takes the
  ORM query beside each. Their parity tests run on PostgreSQL.

The access rules are portal/core/access.py's: a statement that must decide one
takes it from there as a parameter (`guard_sql`'s roles are access.SUBMIT_ROLES)
and says in SQL only what access.token_usable says in Python. The generic writers
(db.bulk_set_values, db.update_row, db.insert_rows) stay in db.py: they build the
statement for any model's fields, not one query.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import (
    NOT_PROVIDED,
    BigIntegerField,
    Case,
    Exists,
    OuterRef,
    Q,
    Value,
    When,
)

from portal.core.db import (
    bulk_set,
    column_cast,
    columns,
    insert_fields,
    row_columns,
    server_binding_cursor,
    split_row,
)
from portal.core.models import (
    Allocation,
    ApiToken,
    Gpu,
    GpuFlavor,
    Job,
    JobArray,
    JobEvent,
    Membership,
    Node,
    Queue,
    Team,
    Worker,
)
from portal.core.models.cluster import SCHEDULABLE

# --- API tokens (actions/tokens.py) ---------------------------------------------------


def token_sql(select: str = "", join: str = "") -> str:
    """A token by its digest (`%(digest)s`) with its user, the team ids it is scoped
    to (NULL when it is not, none when its teams are gone; on SQLite only 1 when it
    is), and what `select` adds from `join`. Both backends.

    Replaces token_by_digest_orm (below): the same token, user and scope, in one query
    instead of three."""
    User = get_user_model()
    through = ApiToken.teams.through._meta.db_table
    if connection.vendor == "postgresql":  # (a scoped token with no team left: no team)
        scope = (
            " CROSS JOIN LATERAL (SELECT CASE WHEN tk.scoped THEN "
            f"coalesce(array_agg(st.team_id), '{{}}') END AS teams FROM {through} st "
            "WHERE st.apitoken_id = tk.id) s"
        )
        teams = "s.teams"
    else:
        scope, teams = "", "CASE WHEN tk.scoped THEN 1 END"
    return (
        f"SELECT {columns(ApiToken, 'tk')}, {columns(User, 'u')}, {teams}{select} "
        f"FROM {ApiToken._meta.db_table} tk JOIN {User._meta.db_table} u ON u.id = tk.user_id"
        f"{scope}{join} WHERE tk.token_hash = %(digest)s"
    )


def token_by_digest(token_digest: str, select: str = "", join: str = "") -> list:
    """Run token_sql: its rows (none, or one per row of `join`)."""
    with server_binding_cursor() as cursor:
        cursor.execute(token_sql(select, join), {"digest": token_digest})
        return cursor.fetchall()


def token_by_digest_orm(token_digest: str) -> tuple[ApiToken, set[int] | None] | None:
    """token_sql through the ORM: the token with its user, and its scope (None: all)."""
    token = ApiToken.objects.select_related("user").filter(token_hash=token_digest).first()
    if token is None:
        return None
    return token, set(token.teams.values_list("pk", flat=True)) if token.scoped else None


def row_version(alias: str) -> str:
    """SQL for a digest of a whole row (every column's value): equal digests, same row.
    PostgreSQL only."""
    return f"md5({alias}::text)"


# --- where a member submits (access.get_submit_target) --------------------------------


def submit_target_sql(user: str, scope: str | None, slug: bool, versions: bool = False) -> str:
    """SQL for the queue, team and role of `user`'s membership in the team named
    `%(slug)s` (or any, when not `slug`) that has the queue `%(queue)s`, and how
    many teams the user has: at most 2 rows, to tell one from several. `user` is an
    SQL expression (a parameter, or a column of an outer query); `scope` one for the
    array of team ids a token may reach, NULL for every team, or None for no limit.
    With `versions`, also a digest of the queue's row and of the team's (row_version).
    PostgreSQL only (`= ANY(array)`).

    Replaces access._slow_submit_target's queries for a member: the user's
    memberships (`Membership.objects.filter(user=user)`, narrowed to `scope` and the
    slug), then `Queue.objects.filter(team=team, name=queue)`; access.submit_target_from
    reads its rows."""
    mine = Membership._meta.db_table

    def in_scope(column: str) -> str:
        return f" AND ({scope} IS NULL OR {column} = ANY({scope}))" if scope else ""

    return (
        f"SELECT {columns(Queue, 'q')}, {columns(Team, 't')}, m.role, "
        f"(SELECT count(*) FROM {mine} m2 WHERE m2.user_id = {user}{in_scope('m2.team_id')})"
        + (f", {row_version('q')}, {row_version('t')} " if versions else " ")
        + f"FROM {Queue._meta.db_table} q JOIN {Team._meta.db_table} t ON t.id = q.team_id "
        f"JOIN {mine} m ON m.team_id = t.id WHERE q.name = %(queue)s AND m.user_id = {user}"
        + (" AND t.slug = %(slug)s" if slug else "")
        + in_scope("t.id")
        + " LIMIT 2"
    )


def member_submit_target(user_pk: int, slug: str | None, queue_name: str, scope) -> list:
    """Run submit_target_sql for a user given by primary key. PostgreSQL only."""
    if scope is not None and not scope:
        return []  # a scoped token whose teams are all gone reaches none
    sql = submit_target_sql("%(user)s", "%(scope)s" if scope is not None else None, bool(slug))
    params = {"user": user_pk, "queue": queue_name, "slug": slug, "scope": list(scope or ())}
    with server_binding_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def token_and_submit_target(token_digest: str, slug: str | None, queue_name: str) -> list:
    """token_sql and submit_target_sql in one statement (the remembered grant,
    actions.tokens.authenticate_for_submit): the token's rows, each with its user's
    row_version and the target's columns (NULL when none fits). PostgreSQL only
    (LATERAL).

    Replaces token_by_digest_orm followed by access.get_submit_target."""
    target = submit_target_sql("u.id", "s.teams", bool(slug), versions=True)
    sql = token_sql(
        select=f", {row_version('u')}, x.*", join=f" LEFT JOIN LATERAL ({target}) x ON true"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, {"digest": token_digest, "queue": queue_name, "slug": slug})
        return cursor.fetchall()


class SubmitGuard(NamedTuple):
    """What a remembered grant decided from (submit_guard): the token, the rows'
    digests (row_version) when it was found, and whether the request named its team."""

    token_id: int
    user_version: str
    queue_version: str
    team_version: str
    slug_named: bool


def submit_guard(token: ApiToken, team: Team, queue: Queue, slug: bool) -> SubmitGuard:
    """The values guard_sql compares with the rows as they are now, for a grant of
    `token` to submit to `queue` of `team` (`slug`: the team was named)."""
    return SubmitGuard(token.pk, token.user.row_version, queue.row_version, team.row_version, slug)


def guard_sql(row: str, team: str, queue: str, roles: Sequence[str]) -> str:
    """SQL true while authenticate_for_submit would still grant what a SubmitGuard in
    the columns `{row}.g_token`, `g_user`, `g_queue`, `g_team`, `g_slug` recorded, for
    the team and queue ids in the columns `team` and `queue`: the token usable
    (access.token_usable) and still its user's, the user unchanged (active, not staff,
    the same name for the receipt), a member in one of `roles` (access.SUBMIT_ROLES)
    of the team, the team in the token's scope (and, with no team named, the user's
    only one there), the team and the queue unchanged (row_version). PostgreSQL only
    (row_version, statement_timestamp()): insert_jobs_with_events checks it inside
    the insert.

    Replaces running token_by_digest_orm and access.get_submit_target again and
    comparing their answers with the remembered grant (tests/api/test_submit_route.py,
    the grant-invalidation table, is its parity test)."""
    User = get_user_model()
    mine = Membership._meta.db_table
    # The roles are constants written into the text, not parameters: an array costs a
    # dumper each time, and the insert must stay within psycopg's 50 parameters.
    listed = ", ".join(f"'{role}'" for role in roles)
    scope = f"SELECT st.team_id FROM {ApiToken.teams.through._meta.db_table} st WHERE st.apitoken_id = tk.id"

    def in_scope(column: str) -> str:
        return f"(NOT tk.scoped OR {column} IN ({scope}))"

    only_team = (
        f"({row}.g_slug OR (SELECT count(*) FROM {mine} m2 "
        f"WHERE m2.user_id = u.id AND {in_scope('m2.team_id')}) = 1)"
    )
    return (
        f"EXISTS (SELECT 1 FROM {ApiToken._meta.db_table} tk JOIN {User._meta.db_table} u ON u.id = tk.user_id "
        f"JOIN {mine} m ON m.user_id = u.id AND m.team_id = {team} "
        f"JOIN {Team._meta.db_table} t ON t.id = m.team_id "
        f"JOIN {Queue._meta.db_table} q ON q.team_id = t.id AND q.id = {queue} "
        f"WHERE tk.id = {row}.g_token AND tk.revoked_at IS NULL "
        "AND (tk.expires_at IS NULL OR tk.expires_at > statement_timestamp()) "
        f"AND u.is_active AND NOT u.is_staff AND m.role IN ({listed}) AND {in_scope('m.team_id')} "
        f"AND {row_version('u')} = {row}.g_user AND {row_version('q')} = {row}.g_queue "
        f"AND {row_version('t')} = {row}.g_team AND {only_team})"
    )


# --- storing submitted jobs (actions/store.py) ----------------------------------------


class NewJob(NamedTuple):
    """One job to store: its fields and its `submitted` event's (but the job), and the
    guard of the grant it was submitted with (None: decided just now)."""

    job: dict
    event: dict
    guard: SubmitGuard | None = None


def insert_jobs_with_events(rows: Sequence[NewJob], roles: Sequence[str]) -> list[int | None]:
    """Insert the jobs and their events, each with its queue's room check and its guard
    (guard_sql with `roles`), in a single statement: the one store of every single
    submission on PostgreSQL, for one job or a batch (actions/store.py). Returns each
    row's new id in order, or None where nothing was inserted: an Idempotency-Key
    that exists (ON CONFLICT on the partial unique index; of two rows with one key,
    the first), a full queue (the rows ahead of it in `rows` for the same queue count
    as pending), a guard that no longer holds; the caller tells them apart. The
    statement is atomic: a row that breaks a constraint fails them all (the caller
    then stores each alone). PostgreSQL only (a data-modifying WITH, arrays).

    Replaces actions.jobs._insert_with_orm, once per row: in one transaction, the key
    looked up (`Job.objects.filter(team=…, idempotency_key=…).exists()`), the room
    counted (`Job.objects.filter(queue=…, state="pending").count()`), `job.save()`
    and the JobEvent's `save()`."""
    sql, job_fields, event_fields = submit_statement(tuple(roles), len(rows) == 1)
    guards = [row.guard or _NO_GUARD for row in rows]
    params = [[row.job["queue"].max_pending_jobs for row in rows]]
    params += [list(column) for column in zip(*guards, strict=True)]
    params += row_columns(job_fields, [row.job for row in rows])
    params += row_columns(event_fields, [row.event for row in rows])
    if len(rows) == 1:  # one value a column, not arrays of one: dumping arrays cost more
        params = [column[0] for column in params]
    params.append(Job.State.PENDING)
    with server_binding_cursor() as cursor:
        cursor.execute(sql, params)
        stored = dict(cursor.fetchall())
    return [stored.get(i) for i in range(1, len(rows) + 1)]


_NO_GUARD = SubmitGuard(None, None, None, None, None)


@functools.lru_cache(maxsize=8)
def submit_statement(roles: tuple[str, ...], one: bool = False) -> tuple[str, list, list]:
    """The statement of insert_jobs_with_events and the fields it writes (built once:
    the same text every time is also what lets PostgreSQL keep it prepared). Its
    rows come as arrays, one a column, or (`one`) as one value a column: the same
    statement but for how its one input row is bound."""
    # A single job is never a task of a job array: those columns take their NULL; and a
    # field with a database default is left to the database (a job that needs another
    # value sets it in the same transaction: actions.dependencies). So the statement
    # stays within the 50 parameters psycopg caches the parsing of
    # (tests/api/test_submit_route.py).
    job_fields = [
        f
        for f in insert_fields(Job)
        if f.name not in ("array", "array_index") and f.db_default is NOT_PROVIDED
    ]
    event_fields = [f for f in insert_fields(JobEvent) if f.name != "job"]
    j = [f"j{i}" for i in range(len(job_fields))]
    e = [f"e{i}" for i in range(len(event_fields))]
    by_name = {f.name: name for f, name in zip(job_fields, j, strict=True)}
    team, queue = f"i.{by_name['team']}", f"i.{by_name['queue']}"
    arrays = [
        "%b::bigint[]",
        "%b::bigint[]",
        "%b::text[]",
        "%b::text[]",
        "%b::text[]",
        "%b::bool[]",
    ]
    arrays += [f"%b::{column_cast(f)}[]" for f in [*job_fields, *event_fields]]
    names = ["room", "g_token", "g_user", "g_queue", "g_team", "g_slug", *j, *e, "ord"]
    if one:
        values = [
            f"{a.replace('%b', '%s')[:-2]} AS {n}" for a, n in zip(arrays, names, strict=False)
        ]
        inputs = f"SELECT {', '.join(values)}, 1::bigint AS ord"
    else:
        inputs = (
            f"SELECT * FROM unnest({', '.join(arrays)}) WITH ORDINALITY AS i({', '.join(names)})"
        )
    table, events = Job._meta.db_table, JobEvent._meta.db_table
    sequence = f"pg_get_serial_sequence('{table}', '{Job._meta.pk.column}')"
    sql = f"""
        WITH i AS ({inputs}), allowed AS (
            SELECT i.*, row_number() OVER (PARTITION BY {queue} ORDER BY i.ord) AS nth FROM i
            WHERE i.g_token IS NULL OR {guard_sql("i", team, queue, roles)}
        ), pending AS (
            SELECT a.queue_id, (SELECT count(*) FROM {table} p
                                WHERE p.queue_id = a.queue_id AND p.state = %s) AS n
            FROM (SELECT DISTINCT {queue.replace("i.", "")} AS queue_id FROM allowed) a
        ), fits AS (
            SELECT a.*, nextval({sequence}) AS new_id FROM allowed a
            JOIN pending p ON p.queue_id = a.{queue.replace("i.", "")} WHERE a.nth + p.n <= a.room
        ), job AS (
            INSERT INTO {table} ("{Job._meta.pk.column}", {", ".join(f'"{f.column}"' for f in job_fields)})
            SELECT new_id, {", ".join(j)} FROM fits ORDER BY ord
            ON CONFLICT (team_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING id
        ), event AS (
            INSERT INTO {events} (job_id, {", ".join(f'"{f.column}"' for f in event_fields)})
            SELECT fits.new_id, {", ".join(e)} FROM fits JOIN job ON job.id = fits.new_id
            RETURNING job_id
        )
        SELECT fits.ord, fits.new_id FROM fits JOIN event ON event.job_id = fits.new_id"""
    # One line: psycopg caches a statement's parsing only within 4 KB of text (and 50
    # parameters; tests/api/test_submit_route.py fails if the statement outgrows them).
    return " ".join(sql.split()), job_fields, event_fields


# --- the agent API: which node calls, what it runs (agentapi/) ------------------------


def node_by_token(token_digest: str, now: datetime) -> Node | None:
    """The node this token digest authenticates at `now`: its current token, or its
    previous one while the overlap lasts (Node.authenticated_by says the same as a Q).
    Runs on both backends; the agent API uses it on PostgreSQL, where it is kept prepared
    (it runs for every heartbeat). Both hashes are indexed (the previous one where set),
    so even its generic plan reads two index entries, not the table.

    Replaces node_by_token_orm."""
    if not token_digest:  # never a digest; the empty hash of a reset node matches nothing
        return None
    with server_binding_cursor() as cursor:
        cursor.execute(NODE_BY_TOKEN, [token_digest, token_digest, Node.previous_token_since(now)])
        row = cursor.fetchone()
    return split_row(row, Node)[0][0] if row else None


NODE_BY_TOKEN = (
    f"SELECT {columns(Node, 'n')} FROM {Node._meta.db_table} n WHERE n.token_hash = %s "
    "OR (n.previous_token_hash = %s AND n.previous_token_replaced_at > %s)"
)


def node_by_token_orm(token_digest: str, now: datetime) -> Node | None:
    if not token_digest:
        return None
    return Node.objects.filter(Node.authenticated_by(token_digest, now)).first()


def gpu_uuids(worker_ids: list[int]) -> list[tuple[int, str]]:
    """(worker id, GPU UUID) of the workers' active allocations. PostgreSQL only
    (`= ANY(array)`: one prepared statement for any number of workers).

    Replaces gpu_uuids_orm."""
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"SELECT a.worker_id, g.uuid FROM {Allocation._meta.db_table} a "
            f"JOIN {Gpu._meta.db_table} g ON g.id = a.gpu_id WHERE a.active AND a.worker_id = ANY(%s)",
            [worker_ids],
        )
        return cursor.fetchall()


def gpu_uuids_orm(worker_ids: list[int]) -> list[tuple[int, str]]:
    return list(
        Allocation.objects.filter(worker__in=worker_ids, active=True).values_list(
            "worker_id", "gpu__uuid"
        )
    )


# --- recording a heartbeat (actions/heartbeat.py) -------------------------------------


# What a heartbeat and its reply read of a worker's job (actions.workers.is_desired,
# agentapi.desired's run and stop entries): building the job's other 28 fields for every
# live worker of every beat was a seventh of a busy web process's CPU (docs/benchmarks.md,
# "H"). The others are deferred: reading one asks the database.
NODE_JOB_FIELDS = (
    "id",
    "image",
    "command",
    "env",
    "workers",
    "max_runtime_seconds",
    "checkpoint_signal",
    "grace_period_seconds",
    "state",
    "reason_code",
    "attempt",
)


def node_workers(node: Node, ended: list[str], job_ids: set[int]) -> list[Worker]:
    """The node's workers not in `ended` and its workers of `job_ids`, each with its
    job (NODE_JOB_FIELDS) and `gpu_uuids`, the UUIDs of its active allocations (the
    heartbeat's reply needs them; asking here saves it a round trip). PostgreSQL only
    (ARRAY(…), ANY).

    Replaces node_workers_orm (which leaves `gpu_uuids` unset: the reply then reads
    them with gpu_uuids_orm)."""
    sql = (
        f"SELECT {columns(Worker, 'w')}, {columns(Job, 'j', NODE_JOB_FIELDS)}, "
        f"ARRAY(SELECT g.uuid FROM {Allocation._meta.db_table} a "
        f"JOIN {Gpu._meta.db_table} g ON g.id = a.gpu_id WHERE a.active AND a.worker_id = w.id) "
        f"FROM {Worker._meta.db_table} w JOIN {Job._meta.db_table} j ON j.id = w.job_id "
        "WHERE w.node_id = %s AND (w.state <> ALL(%s) OR w.job_id = ANY(%s))"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [node.pk, ended, list(job_ids)])
        rows = cursor.fetchall()
    workers = []
    for row in rows:
        (worker, job), (uuids,) = split_row(row, Worker, (Job, NODE_JOB_FIELDS))
        worker.job, worker.gpu_uuids = job, uuids
        workers.append(worker)
    return workers


def node_workers_orm(node: Node, ended: list[str], job_ids: set[int]) -> list[Worker]:
    live = ~Q(state__in=ended)
    return list(
        Worker.objects.filter(node=node).filter(live | Q(job_id__in=job_ids)).select_related("job")
    )


TELEMETRY_FIELDS = ("memory_used_mib", "utilization_pct", "temperature_c", "power_w")


def write_telemetry(node: Node, reports: Sequence, now) -> bool:
    """Write the reported GPUs' telemetry (`reports`: objects with `uuid` and the
    TELEMETRY_FIELDS) onto the node's GPU rows in one UPDATE from arrays; whether
    every report found its row. PostgreSQL only (UPDATE … FROM unnest).

    Replaces write_telemetry_orm (one UPDATE per GPU)."""
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"UPDATE {Gpu._meta.db_table} g SET memory_used_mib = t.mem, "
            "utilization_pct = t.util, temperature_c = t.temp, power_w = t.power, updated_at = %s "
            "FROM unnest(%s::varchar[], %s::int[], %s::float8[], %s::float8[], %s::float8[]) "
            "AS t(uuid, mem, util, temp, power) WHERE g.uuid = t.uuid AND g.node_id = %s",
            [
                now,
                [r.uuid for r in reports],
                *([getattr(r, f) for r in reports] for f in TELEMETRY_FIELDS),
                node.pk,
            ],
        )
        return cursor.rowcount == len(reports)


def write_telemetry_orm(node: Node, reports: Sequence, now) -> bool:
    found = 0
    for r in reports:
        values = {f: getattr(r, f) for f in TELEMETRY_FIELDS}
        found += Gpu.objects.filter(node=node, uuid=r.uuid).update(updated_at=now, **values)
    return found == len(reports)


# --- Settling workers' reports (actions/workers.py, actions/jobs.py) ------------------
#
# A heartbeat that reports exits settles their gangs: it releases the GPUs, locks the
# jobs, reads their gangs, moves them on (actions.jobs.transition, which asks who is
# notified and which held jobs depend on them). Built by the ORM these were half of a
# busy web process's CPU (docs/benchmarks.md, "H"). PostgreSQL only; `*_orm` beside each.

JOB, WORKER, ALLOCATION = Job._meta.db_table, Worker._meta.db_table, Allocation._meta.db_table


def lock_jobs(job_ids: Sequence[int], states: Sequence[str] | None = None) -> list[tuple]:
    """`(id, state, attempt)` of these jobs (those in `states`, if given), locked FOR
    UPDATE in id order: one lock order for every caller, so they cannot deadlock."""
    sql = f"SELECT id, state, attempt FROM {JOB} WHERE id = ANY(%s)"
    params: list = [list(job_ids)]
    if states is not None:
        sql += " AND state = ANY(%s)"
        params.append(list(states))
    with server_binding_cursor() as cursor:
        cursor.execute(sql + " ORDER BY id FOR UPDATE", params)
        return [tuple(row) for row in cursor.fetchall()]


def lock_jobs_orm(job_ids: Sequence[int], states: Sequence[str] | None = None) -> list[tuple]:
    jobs = Job.objects.select_for_update().filter(pk__in=list(job_ids))
    if states is not None:
        jobs = jobs.filter(state__in=list(states))
    return list(jobs.order_by("pk").values_list("pk", "state", "attempt"))


def _schedulable_sql(alias: str = "") -> tuple[str, list]:
    return " AND ".join(f"{alias}{name} = %s" for name in SCHEDULABLE), [
        v.value for v in SCHEDULABLE.values()
    ]


def lock_schedulable_nodes(node_ids: Sequence[int]) -> set[int]:
    """Those of these nodes that are still schedulable, locked FOR KEY SHARE in id order:
    an admin's cordon, drain or identity reset (FOR UPDATE) and the pass then wait for
    each other, while a heartbeat's UPDATE of its node does not wait."""
    where, params = _schedulable_sql()
    sql = (
        f"SELECT id FROM {Node._meta.db_table} WHERE id = ANY(%s) AND {where} "
        "ORDER BY id FOR KEY SHARE"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [list(node_ids), *params])
        return {pk for (pk,) in cursor.fetchall()}


def lock_schedulable_nodes_orm(node_ids: Sequence[int]) -> set[int]:
    """SQLite: no row locks (one writer at a time), the same question."""
    nodes = Node.objects.filter(pk__in=list(node_ids), **SCHEDULABLE)
    return set(nodes.values_list("pk", flat=True))


class GangWorker(NamedTuple):
    """What settling a gang reads of each of its workers."""

    pk: int
    job_id: int
    attempt: int
    rank: int
    state: str
    exit_code: int | None


def gang_workers(job_ids: Sequence[int]) -> list[GangWorker]:
    """The workers of these jobs' current attempts."""
    sql = (
        f"SELECT w.id, w.job_id, w.attempt, w.rank, w.state, w.exit_code FROM {WORKER} w "
        f"JOIN {JOB} j ON j.id = w.job_id WHERE w.job_id = ANY(%s) AND w.attempt = j.attempt"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [list(job_ids)])
        return [GangWorker(*row) for row in cursor.fetchall()]


def gang_workers_orm(job_ids: Sequence[int]) -> list[GangWorker]:
    from django.db.models import F

    rows = Worker.objects.filter(job_id__in=list(job_ids), attempt=F("job__attempt"))
    fields = ("pk", "job_id", "attempt", "rank", "state", "exit_code")
    return [GangWorker(*row) for row in rows.values_list(*fields)]


def release_allocations(worker_ids: Sequence[int], now) -> int:
    """End the active allocations of these workers; how many ended."""
    sql = (
        f"UPDATE {ALLOCATION} SET active = false, released_at = %s "
        "WHERE worker_id = ANY(%s) AND active"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [now, list(worker_ids)])
        return cursor.rowcount


def release_allocations_orm(worker_ids: Sequence[int], now) -> int:
    allocations = Allocation.objects.filter(worker__in=list(worker_ids), active=True)
    return allocations.update(active=False, released_at=now)


def notified_jobs(job_ids: Sequence[int]) -> list[int]:
    """Which of these jobs anyone is told of: a `notify` of their own, or an active
    webhook of their team (actions.notifications)."""
    from portal.core.models import JobNotify, TeamWebhook

    sql = (
        f"SELECT j.id FROM {JOB} j WHERE j.id = ANY(%s) AND ("
        f"EXISTS (SELECT 1 FROM {JobNotify._meta.db_table} n WHERE n.job_id = j.id) OR "
        f"EXISTS (SELECT 1 FROM {TeamWebhook._meta.db_table} h "
        "WHERE h.team_id = j.team_id AND h.active))"
    )
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [list(job_ids)])
        return [pk for (pk,) in cursor.fetchall()]


def notified_jobs_orm(job_ids: Sequence[int]) -> list[int]:
    from django.db.models import Exists, OuterRef

    from portal.core.models import TeamWebhook

    hooked = Exists(TeamWebhook.objects.filter(team_id=OuterRef("team_id"), active=True))
    jobs = Job.objects.filter(pk__in=list(job_ids)).filter(Q(notify__isnull=False) | hooked)
    return list(jobs.order_by().values_list("pk", flat=True))


def held_dependents(job_ids: Sequence[int], ended: bool, singleton: str) -> list[int]:
    """Held jobs with one of `job_ids` as a parent, and, when those `ended`, the held
    jobs whose dependency names `singleton` of their team, user and name (scheduler's
    rule; actions.dependencies). Sorted ids."""
    from portal.core.models import JobDependency

    sql = (
        f"SELECT d.child_id FROM {JobDependency._meta.db_table} d "
        f"JOIN {JOB} c ON c.id = d.child_id "
        "WHERE d.parent_id = ANY(%s) AND c.state = %s AND c.awaiting_dependency"
    )
    params: list = [list(job_ids), Job.State.PENDING]
    if ended:
        sql += (
            f" UNION SELECT s.id FROM {JOB} s WHERE s.state = %s AND s.awaiting_dependency "
            "AND s.dependency LIKE %s "
            f"AND s.team_id IN (SELECT e.team_id FROM {JOB} e WHERE e.id = ANY(%s)) "
            f"AND s.submitted_by_id IN (SELECT e.submitted_by_id FROM {JOB} e WHERE e.id = ANY(%s)) "
            f"AND s.name IN (SELECT e.name FROM {JOB} e WHERE e.id = ANY(%s))"
        )
        like = "%" + singleton.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        params += [Job.State.PENDING, like, list(job_ids), list(job_ids), list(job_ids)]
    with server_binding_cursor() as cursor:
        cursor.execute(sql, params)
        return sorted({pk for (pk,) in cursor.fetchall()})


def held_dependents_orm(job_ids: Sequence[int], ended: bool, singleton: str) -> list[int]:
    from portal.core.models import JobDependency

    children = (
        JobDependency.objects.filter(
            parent_id__in=list(job_ids),
            child__state=Job.State.PENDING,
            child__awaiting_dependency=True,
        )
        .values_list("child_id")
        .order_by()
    )
    if ended:
        parents = Job.objects.filter(pk__in=list(job_ids))
        singletons = (
            Job.objects.filter(
                state=Job.State.PENDING,
                awaiting_dependency=True,
                team_id__in=parents.values("team_id"),
                submitted_by_id__in=parents.values("submitted_by_id"),
                name__in=parents.values("name"),
                dependency__contains=singleton,
            )
            .values_list("pk")
            .order_by()
        )
        children = children.union(singletons)
    return sorted({pk for (pk,) in children})


# --- the scheduling snapshot (scheduling/snapshot.py) ---------------------------------
#
# The pass reads every pending and every running job; built through the ORM, a row
# costs a dict, a datetime per time column and its conversion to seconds, more Python
# than the scheduler core spends on the job (docs/benchmarks.md, "the pass's CPU").
# These return plain tuples with times already in seconds since the epoch.


def _binary_results(cursor) -> None:
    """Have the cursor's results sent in binary (psycopg loads numbers and arrays of
    them without parsing text: a third less for the pending jobs)."""
    from psycopg import pq

    cursor.cursor.format = pq.Format.BINARY


def _epoch(column: str) -> str:
    """SQL for a timestamp column as float seconds since the epoch (NULL stays NULL):
    the same float as datetime.timestamp() of the value, both rounded once from its
    exact microseconds."""
    return f"extract(epoch FROM {column})::float8"


class NodeRow(NamedTuple):
    """One schedulable node as the pass reads it (schedulable_nodes)."""

    pk: int
    hostname: str
    flavor_id: int
    flavor: str
    rack: str
    block: str
    total_gpus: int  # healthy GPUs
    free_gpus: tuple[int, ...]  # healthy GPUs no active allocation holds, by index


def schedulable_nodes() -> list[NodeRow]:
    """Ready, uncordoned nodes, each with its healthy GPUs counted and those no active
    allocation holds, in one query. PostgreSQL only (array_agg … FILTER).

    Replaces schedulable_nodes_orm (two queries: the nodes, then their GPUs)."""
    gpu, alloc = Gpu._meta.db_table, Allocation._meta.db_table
    held = f"EXISTS (SELECT 1 FROM {alloc} a WHERE a.gpu_id = g.id AND a.active)"
    schedulable, schedulable_params = _schedulable_sql("n.")
    sql = (
        "SELECT n.id, n.hostname, n.flavor_id, f.name, n.rack, n.block, count(g.id), "
        f"array_agg(g.id ORDER BY g.index) FILTER (WHERE g.id IS NOT NULL AND NOT {held}) "
        f"FROM {Node._meta.db_table} n JOIN {GpuFlavor._meta.db_table} f ON f.id = n.flavor_id "
        f"LEFT JOIN {gpu} g ON g.node_id = n.id AND g.health = %s "
        f"WHERE {schedulable} GROUP BY n.id, f.name ORDER BY n.id"
    )
    params = [Gpu.Health.HEALTHY.value, *schedulable_params]
    with server_binding_cursor() as cursor:
        _binary_results(cursor)
        cursor.execute(sql, params)
        return [NodeRow(*row[:7], tuple(row[7] or ())) for row in cursor.fetchall()]


def schedulable_nodes_orm() -> list[NodeRow]:
    rows = list(
        Node.objects.filter(**SCHEDULABLE)
        .values_list("pk", "hostname", "flavor_id", "flavor__name", "rack", "block")
        .order_by("pk")
    )
    held = Allocation.objects.filter(gpu=OuterRef("pk"), active=True)
    gpus = (
        Gpu.objects.filter(node_id__in=[r[0] for r in rows], health=Gpu.Health.HEALTHY)
        .annotate(held=Exists(held))
        .values_list("pk", "node_id", "held")
        .order_by("node_id", "index")
    )
    free: dict[int, list[int]] = {}
    total: dict[int, int] = {}
    for gpu_id, node_id, is_held in gpus:
        total[node_id] = total.get(node_id, 0) + 1
        if not is_held:
            free.setdefault(node_id, []).append(gpu_id)
    return [NodeRow(*row, total.get(row[0], 0), tuple(free.get(row[0], ()))) for row in rows]


class PendingRow(NamedTuple):
    """One pending job as the pass reads it (pending_jobs): the scheduler's facts, then
    the verdict it shows now (reason, position, estimated start) for the write-back."""

    pk: int
    team: str
    queue: str
    flavor: str
    flavor_id: int
    workers: int
    gpus_per_worker: int
    priority: int
    submitted_at: float
    max_runtime: float
    preemptible: bool
    restart_count: int
    eligible_at: float  # 0.0 when eligible since submitted (never requeued nor held)
    preempted_by: int | None
    draining: bool  # a worker of an earlier attempt has not ended (actions.workers.ENDED)
    array_id: int | None
    array_limit: int | None
    reason_code: str
    reason: str
    queue_position: int | None
    estimated_start: float | None
    attempt: int
    grace_period: float
    reserved_until: float | None  # the horizon its claim counted on (with reserved_on)
    reserved_ending: list  # the ids of the jobs reaching their max runtime it counted on
    reserved_on: list  # [[hostname, GPUs], ...] of a preemptor waiting for its victims


def pending_jobs(ended: Sequence[str]) -> list[PendingRow]:
    """Every pending job not held for its dependencies, with whether a worker of it not
    in an `ended` state is left (its previous attempt still stopping). PostgreSQL only
    (extract(epoch) as float8, `<> ALL(array)`).

    Replaces pending_jobs_orm."""
    job, worker = Job._meta.db_table, Worker._meta.db_table
    sql = (
        f"SELECT j.id, t.slug, q.name, f.name, j.flavor_id, j.workers, j.gpus_per_worker, "
        f"j.priority, {_epoch('j.submitted_at')}, j.max_runtime_seconds::float8, j.preemptible, "
        f"j.restart_count, coalesce({_epoch('j.eligible_at')}, 0), j.preempted_by, "
        f"EXISTS (SELECT 1 FROM {worker} w WHERE w.job_id = j.id AND w.state <> ALL(%s)), "
        f"j.array_id, a.task_limit, j.reason_code, j.reason, j.queue_position, "
        f"{_epoch('j.estimated_start_at')}, j.attempt, j.grace_period_seconds::float8, "
        f"{_epoch('j.reserved_until')}, j.reserved_ending::text, j.reserved_on::text "
        f"FROM {job} j JOIN {Team._meta.db_table} t ON t.id = j.team_id "
        f"JOIN {Queue._meta.db_table} q ON q.id = j.queue_id "
        f"JOIN {GpuFlavor._meta.db_table} f ON f.id = j.flavor_id "
        f"LEFT JOIN {JobArray._meta.db_table} a ON a.id = j.array_id "
        "WHERE j.state = %s AND NOT j.awaiting_dependency"
    )
    with server_binding_cursor() as cursor:
        _binary_results(cursor)
        cursor.execute(sql, [list(ended), Job.State.PENDING])
        return [
            PendingRow(*row[:-2], _reserved_on(row[-2]), _reserved_on(row[-1]))
            for row in cursor.fetchall()
        ]


def _reserved_on(text: str) -> list:
    """A stored reservation's list ('[]' for nearly every job: no parsing)."""
    return [] if text == "[]" else json.loads(text)


def pending_jobs_orm(ended: Sequence[str]) -> list[PendingRow]:
    old_workers = Worker.objects.filter(job=OuterRef("pk")).exclude(state__in=list(ended))
    rows = (
        Job.objects.filter(state=Job.State.PENDING, awaiting_dependency=False)
        .annotate(draining=Exists(old_workers))
        .values_list(
            "pk",
            "team__slug",
            "queue__name",
            "flavor__name",
            "flavor_id",
            "workers",
            "gpus_per_worker",
            "priority",
            "submitted_at",
            "max_runtime_seconds",
            "preemptible",
            "restart_count",
            "eligible_at",
            "preempted_by",
            "draining",
            "array_id",
            "array__task_limit",
            "reason_code",
            "reason",
            "queue_position",
            "estimated_start_at",
            "attempt",
            "grace_period_seconds",
            "reserved_until",
            "reserved_ending",
            "reserved_on",
        )
    )
    return [
        PendingRow(
            *row[:8],
            row[8].timestamp(),
            float(row[9]),
            *row[10:12],
            row[12].timestamp() if row[12] else 0.0,
            *row[13:20],
            row[20].timestamp() if row[20] else None,
            row[21],
            float(row[22]),
            row[23].timestamp() if row[23] else None,
            row[24] or [],
            row[25] or [],
        )
        for row in rows
    ]


class RunningRow(NamedTuple):
    """One job holding GPUs as the pass reads it (running_jobs): whatever its state,
    with its active allocations as (worker rank, hostname, GPU ids sorted), sorted."""

    pk: int
    team: str
    queue: str
    flavor: str
    flavor_id: int
    priority: int
    submitted_at: float
    started_at: float  # admitted_at, or submitted_at if it has none
    max_runtime: float
    preemptible: bool
    state: str
    checkpointed_at: float | None
    grace_period: float
    preempted_by: int | None
    array_id: int | None
    stop_requested_at: float | None
    placement: tuple[tuple[int, str, tuple[int, ...]], ...]


def running_jobs() -> list[RunningRow]:
    """Every job with an active allocation, by id. PostgreSQL only (array_agg,
    extract(epoch) as float8).

    Replaces running_jobs_orm (two queries: the allocations, then their jobs)."""
    alloc, node = Allocation._meta.db_table, Node._meta.db_table
    sql = (
        f"SELECT j.id, t.slug, q.name, f.name, j.flavor_id, j.priority, "
        f"{_epoch('j.submitted_at')}, {_epoch('coalesce(j.admitted_at, j.submitted_at)')}, "
        f"j.max_runtime_seconds::float8, j.preemptible, j.state, {_epoch('j.last_checkpoint_at')}, "
        f"j.grace_period_seconds::float8, j.preempted_by, j.array_id, "
        f"{_epoch('j.stop_requested_at')}, h.ranks, h.hosts, h.gpus "
        f"FROM (SELECT a.job_id, array_agg(a.worker_rank) AS ranks, array_agg(n.hostname) AS hosts, "
        f"array_agg(a.gpu_id) AS gpus FROM {alloc} a JOIN {node} n ON n.id = a.node_id "
        f"WHERE a.active GROUP BY a.job_id) h JOIN {Job._meta.db_table} j ON j.id = h.job_id "
        f"JOIN {Team._meta.db_table} t ON t.id = j.team_id "
        f"JOIN {Queue._meta.db_table} q ON q.id = j.queue_id "
        f"JOIN {GpuFlavor._meta.db_table} f ON f.id = j.flavor_id ORDER BY j.id"
    )
    with server_binding_cursor() as cursor:
        _binary_results(cursor)
        cursor.execute(sql)
        rows = cursor.fetchall()
    return [RunningRow(*row[:16], _placement(zip(*row[16:], strict=True))) for row in rows]


def _placement(allocations) -> tuple[tuple[int, str, tuple[int, ...]], ...]:
    """(rank, hostname, GPU ids) of each worker, sorted, from (rank, hostname, GPU id)."""
    workers: dict[tuple[int, str], list[int]] = {}
    for rank, host, gpu in allocations:
        workers.setdefault((rank, host), []).append(gpu)
    return tuple(
        (rank, host, tuple(sorted(gpus))) for (rank, host), gpus in sorted(workers.items())
    )


def running_jobs_orm() -> list[RunningRow]:
    held: dict[int, list[tuple[int, str, int]]] = {}
    allocations = Allocation.objects.filter(active=True).values_list(
        "job_id", "worker_rank", "node__hostname", "gpu_id"
    )
    for job_id, rank, hostname, gpu_id in allocations:
        held.setdefault(job_id, []).append((rank, hostname, gpu_id))
    jobs = (
        Job.objects.filter(pk__in=list(held))
        .values_list(
            "pk",
            "team__slug",
            "queue__name",
            "flavor__name",
            "flavor_id",
            "priority",
            "submitted_at",
            "admitted_at",
            "max_runtime_seconds",
            "preemptible",
            "state",
            "last_checkpoint_at",
            "grace_period_seconds",
            "preempted_by",
            "array_id",
            "stop_requested_at",
        )
        .order_by("pk")
    )
    return [
        RunningRow(
            *row[:6],
            row[6].timestamp(),
            (row[7] or row[6]).timestamp(),
            float(row[8]),
            row[9],
            row[10],
            row[11].timestamp() if row[11] else None,
            float(row[12]),
            row[13],
            row[14],
            row[15].timestamp() if row[15] else None,
            _placement(held[row[0]]),
        )
        for row in jobs
    ]


# --- the pass's verdicts (scheduling/apply.py) ----------------------------------------

VERDICT_FIELDS = ("reason_code", "reason", "queue_position", "estimated_start_at")


def write_verdicts(
    pks: Sequence[int],
    codes: Sequence[str],
    reasons: Sequence[str],
    positions: Sequence[int | None],
    starts: Sequence[datetime | None],
) -> None:
    """Write each job's verdict (VERDICT_FIELDS: one value a job in each column) where
    the job is still pending, in one UPDATE … FROM unnest. PostgreSQL only (arrays,
    bound as binary parameters: a pass writes up to a row per pending job, and quoting
    10,000 reasons into the text of the statement costs the client four times more).

    Replaces write_verdicts_orm (Django's bulk_update where the job is pending)."""
    sql = (
        f"UPDATE {Job._meta.db_table} AS t SET reason_code = v.code, reason = v.reason, "
        "queue_position = v.position, estimated_start_at = v.start "
        "FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::int[], %b::timestamptz[]) "
        "AS v(id, code, reason, position, start) WHERE t.id = v.id AND t.state = %b"
    )
    params = [list(pks), list(codes), list(reasons), list(positions), list(starts)]
    with server_binding_cursor() as cursor:
        cursor.execute(sql, [*params, Job.State.PENDING.value])


def write_verdicts_orm(pks, codes, reasons, positions, starts) -> None:
    jobs = [
        Job(pk=pk, **dict(zip(VERDICT_FIELDS, values, strict=True)))
        for pk, *values in zip(pks, codes, reasons, positions, starts, strict=True)
    ]
    bulk_set(Job, jobs, VERDICT_FIELDS, where="t.state = %s", params=[Job.State.PENDING])


def name_preemptors(pks: Sequence[int], preemptors: Sequence[int]) -> None:
    """Set each job's `preempted_by` to its preemptor, in one UPDATE … FROM unnest.
    PostgreSQL only (arrays as binary parameters).

    Replaces name_preemptors_orm (an UPDATE with a CASE WHEN a job, which Django
    compiles in Python: 90 ms for the 250 victims of bench_pass.py's first pass)."""
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} AS t SET preempted_by = v.preemptor "
            "FROM unnest(%b::bigint[], %b::bigint[]) AS v(id, preemptor) WHERE t.id = v.id",
            [list(pks), list(preemptors)],
        )


def name_preemptors_orm(pks: Sequence[int], preemptors: Sequence[int]) -> None:
    whens = [When(pk=pk, then=Value(by)) for pk, by in zip(pks, preemptors, strict=True)]
    Job.objects.filter(pk__in=list(pks)).update(
        preempted_by=Case(*whens, output_field=BigIntegerField())
    )


def store_reservations(
    pks: Sequence[int],
    nodes: Sequence[list],
    until: Sequence[datetime | None],
    ending: Sequence[list],
) -> None:
    """Set each pending job's `reserved_on` ([[hostname, GPUs], ...], [] to clear),
    `reserved_until` (None to clear) and `reserved_ending` (job ids, [] to clear) in one
    UPDATE … FROM unnest. PostgreSQL only (arrays as binary parameters, the JSON as
    text cast to jsonb): a pass may name hundreds of waiting preemptors.

    Replaces store_reservations_orm (an UPDATE a job)."""
    with server_binding_cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} AS t SET reserved_on = v.nodes::jsonb, "
            "reserved_until = v.until, reserved_ending = v.ending::jsonb "
            "FROM unnest(%b::bigint[], %b::text[], %b::timestamptz[], %b::text[]) "
            "AS v(id, nodes, until, ending) WHERE t.id = v.id AND t.state = %b",
            [
                list(pks),
                [json.dumps(n) for n in nodes],
                list(until),
                [json.dumps(e) for e in ending],
                Job.State.PENDING.value,
            ],
        )


def store_reservations_orm(
    pks: Sequence[int],
    nodes: Sequence[list],
    until: Sequence[datetime | None],
    ending: Sequence[list],
) -> None:
    for pk, value, t, e in zip(pks, nodes, until, ending, strict=True):
        Job.objects.filter(pk=pk, state=Job.State.PENDING).update(
            reserved_on=value, reserved_until=t, reserved_ending=e
        )


def lock_names(space: int, names: Sequence[str]) -> None:
    """Hold a transaction-scoped advisory lock on each name (PostgreSQL; its two-key
    space, apart from the pass's one-key lock), in the order given: callers sort."""
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [space, name])

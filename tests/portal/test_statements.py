"""Parity of the hand-written statements (portal/core/statements.py) with the ORM
queries they replace, on the backend the suite runs on (make test: PostgreSQL, then
SQLite, where this module is in SQLITE_TESTS): the same answer for every persona,
token, target, node and worker, so a rule changed in one is caught in the other.
The statements that are PostgreSQL's by design (statements.py says which) are
compared on PostgreSQL only."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.utils import timezone

from portal.core import access, statements
from portal.core.actions import jobs
from portal.core.actions.heartbeat import GpuReport
from portal.core.actions.tokens import authenticate_token, create_api_token, token_scope
from portal.core.actions.workers import ENDED
from portal.core.jobspec import clean_job_spec
from portal.core.models import (
    ApiToken,
    Gpu,
    Job,
    JobArray,
    JobEvent,
    Membership,
    Node,
    Queue,
    Worker,
)
from portal.core.secrets import digest
from tests.portal.agent_helpers import admit, make_job, node_token

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the statement is PostgreSQL's by design"
)


def _by_orm(plaintext: str):
    """authenticate_token's answer through the ORM: the usable token, its user, its scope."""
    found = statements.token_by_digest_orm(digest(plaintext))
    if found is None or not access.token_usable(found[0], found[0].user):
        return None
    token, scope = found
    return token.pk, token.user.pk, scope


def _fields(obj) -> dict | None:
    """Every concrete field's value of a model instance, as loaded."""
    if obj is None:
        return None
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def test_token_statement_answers_as_the_orm(cluster, personas):
    now = timezone.now()
    made = {
        "plain": create_api_token(personas.member_a, name="a")[1],
        "scoped": create_api_token(personas.lead_a, name="b", teams=[cluster.team_a])[1],
        "expiring": create_api_token(personas.lead_b, name="c", expires_at=now + timedelta(1))[1],
        "revoked": create_api_token(personas.lead_a, name="d")[1],
        "expired": create_api_token(personas.viewer_a, name="e", expires_at=now + timedelta(1))[1],
        "inactive user": create_api_token(personas.lead_b, name="f")[1],
    }
    ApiToken.objects.filter(name="d").update(revoked_at=now)
    ApiToken.objects.filter(name="e").update(expires_at=now - timedelta(seconds=1))
    ApiToken.objects.filter(name="f").update(user=personas.admin)
    personas.admin.is_active = False
    personas.admin.save()

    for name, plaintext in [*made.items(), ("unknown", "bat_nope")]:
        token = authenticate_token(plaintext)
        by_sql = None
        if token is not None:
            by_sql = (token.pk, token.user.pk, token_scope(token))
        assert by_sql == _by_orm(plaintext), name
    assert _by_orm(made["plain"]) is not None and _by_orm(made["revoked"]) is None


def _answer(find, *args):
    try:
        team, queue = find(*args) or (None, None)
    except access.NotFound as exc:
        return ("not found", exc.what)
    except access.MultipleTeams as exc:
        return ("which team", tuple(exc.slugs))
    except PermissionDenied:
        return ("denied",)
    if team is None:
        return (None,)
    return (team.pk, queue.pk if queue else None, queue.team_id if queue else None)


@postgresql_only
def test_submit_target_statement_answers_as_the_orm(cluster, personas):
    Membership.objects.create(user=personas.lead_b, team=cluster.team_a, role="viewer")
    Queue.objects.create(team=cluster.team_a, name="night", max_runtime_seconds=3600)
    users = [personas.lead_a, personas.member_a, personas.viewer_a, personas.lead_b]
    slugs = [None, "alpha", "beta", "nope"]
    queues = ["default", "night", "nope"]
    scopes = [
        None,
        {cluster.team_a.pk},
        {cluster.team_b.pk},
        {cluster.team_a.pk, cluster.team_b.pk},
    ]
    compared = 0
    for user, slug, queue, scope in itertools.product(users, slugs, queues, scopes):
        fast = _answer(access._member_queue, user, slug, queue, scope)
        slow = _answer(access._slow_submit_target, user, slug, queue, scope)
        if fast[0] is None:  # the statement leaves this one to the ORM path
            continue
        assert fast == slow, (user.username, slug, queue, scope)
        compared += 1
    assert compared >= 20


def test_node_statement_answers_as_the_orm(cluster, settings):
    """Both backends: the agent API runs the ORM query on SQLite, the statement elsewhere.
    Current tokens, a previous token inside and one past the overlap, a reset node's empty
    hashes (which no digest, not even an empty one, matches)."""
    settings.BERTH = settings.BERTH | {"NODE_TOKEN_OVERLAP_S": 3600.0}
    now = timezone.now()
    tokens = [node_token(node) for node in cluster.nodes[:4]]
    Node.objects.filter(pk=cluster.nodes[1].pk).update(last_heartbeat_at=now)
    inside, past = "bnt_replaced_inside", "bnt_replaced_past"
    for node, old, at in [(cluster.nodes[2], inside, 3599), (cluster.nodes[3], past, 3601)]:
        replaced = now - timedelta(seconds=at)
        Node.objects.filter(pk=node.pk).update(
            previous_token_hash=digest(old), previous_token_replaced_at=replaced
        )
    reset = cluster.nodes[4]
    Node.objects.filter(pk=reset.pk).update(token_hash="", previous_token_hash=None)
    digests = [digest(t) for t in [*tokens, inside, past, "bnt_unknown", ""]] + [""]
    for token_digest in digests:
        by_sql, by_orm = (
            statements.node_by_token(token_digest, now),
            statements.node_by_token_orm(token_digest, now),
        )
        assert _fields(by_sql) == _fields(by_orm), token_digest
    assert statements.node_by_token(digest(tokens[1]), now).pk == cluster.nodes[1].pk
    assert statements.node_by_token(digest(inside), now).pk == cluster.nodes[2].pk
    assert statements.node_by_token(digest(tokens[3]), now).pk == cluster.nodes[3].pk
    assert statements.node_by_token(digest(past), now) is None
    assert statements.node_by_token("", now) is None


def _two_admitted_jobs(cluster):
    """Job 1 on nodes 0 and 1, job 2 on node 0 (then its allocations released), job 3
    pending: workers with, without and of no active allocations."""
    one = make_job(cluster, workers=2, gpus_per_worker=2)
    admit(one, cluster.nodes[:2])
    two = make_job(cluster, workers=1, gpus_per_worker=2)
    admit(two, cluster.nodes[:1], first_gpu=2)
    Worker.objects.filter(job=two).update(state=Worker.State.EXITED)
    two.allocations.update(active=False)
    make_job(cluster)
    return one, two


@postgresql_only
def test_gpu_uuid_statement_answers_as_the_orm(cluster):
    one, two = _two_admitted_jobs(cluster)
    ids = list(Worker.objects.values_list("pk", flat=True)) + [10**9]
    assert sorted(statements.gpu_uuids(ids)) == sorted(statements.gpu_uuids_orm(ids))
    assert len(statements.gpu_uuids(ids)) == 4  # job 1's two workers x 2 GPUs
    assert statements.gpu_uuids([]) == statements.gpu_uuids_orm([]) == []


@postgresql_only
def test_node_workers_statement_answers_as_the_orm(cluster):
    one, two = _two_admitted_jobs(cluster)
    node = cluster.nodes[0]
    ended = list(ENDED)
    for job_ids in [set(), {two.pk}, {one.pk, two.pk, 10**9}]:
        by_sql = statements.node_workers(node, ended, job_ids)
        by_orm = statements.node_workers_orm(node, ended, job_ids)
        key = lambda w: w.pk  # noqa: E731
        job = lambda w: {f: getattr(w.job, f) for f in statements.NODE_JOB_FIELDS}  # noqa: E731
        assert [(_fields(w), job(w)) for w in sorted(by_sql, key=key)] == [
            (_fields(w), job(w)) for w in sorted(by_orm, key=key)
        ], job_ids
        assert all(w.job.get_deferred_fields() for w in by_sql)  # only what the beat reads
        uuids = dict.fromkeys((w.pk for w in by_orm), [])
        for worker_id, uuid in statements.gpu_uuids_orm([w.pk for w in by_orm]):
            uuids[worker_id] = [*uuids[worker_id], uuid]
        assert {w.pk: sorted(w.gpu_uuids) for w in by_sql} == {
            pk: sorted(u) for pk, u in uuids.items()
        }
    assert len(statements.node_workers(node, ended, {two.pk})) == 2  # live, and ended of job 2


@postgresql_only
def test_telemetry_statement_writes_as_the_orm(cluster):
    node, other = cluster.nodes[:2]
    now = timezone.now()
    mine = [
        GpuReport(
            index=g.index,
            uuid=g.uuid,
            name="x",
            memory_used_mib=7 * g.index,
            utilization_pct=g.index + 0.5,
            temperature_c=40.0,
            power_w=None,
        )
        for g in node.gpus.all()
    ]
    stray = GpuReport(index=9, uuid=other.gpus.first().uuid, name="x", memory_used_mib=1)

    def written():
        return sorted(Gpu.objects.values_list("uuid", *statements.TELEMETRY_FIELDS, "updated_at"))

    before = written()
    results = {}
    for write in (statements.write_telemetry, statements.write_telemetry_orm):
        Gpu.objects.all().update(memory_used_mib=None, utilization_pct=None, updated_at=now)
        results[write] = (write(node, mine, now), write(node, [*mine[:2], stray], now), written())
    by_sql, by_orm = results.values()
    assert by_sql == by_orm
    assert by_sql[:2] == (True, False)  # another node's GPU is not this node's to write
    assert by_sql[2] != before


def _stored(pk: int) -> tuple[dict, list[dict]]:
    skip = {"id", "job_id", "at", "submitted_at"}
    job = {k: v for k, v in Job.objects.filter(pk=pk).values()[0].items() if k not in skip}
    events = [
        {k: v for k, v in e.items() if k not in skip}
        for e in JobEvent.objects.filter(job_id=pk).values()
    ]
    return job, events


@postgresql_only
def test_submit_statement_stores_as_the_orm(cluster, personas):
    """The one-statement insert stores the job and its event as _insert_with_orm does,
    and stores nothing where it does not: a used Idempotency-Key, a full queue."""
    team, user = cluster.team_a, personas.member_a
    spec = clean_job_spec(
        team,
        {
            "name": "j",
            "image": "img",
            "command": ["true"],
            "flavor": "h100-80gb",
            "max_runtime_seconds": 600,
            "workers": 2,
            "gpus_per_worker": 4,
            "env": {"A": "1"},
        },
    )
    now = timezone.now()

    def fields(key):
        row = jobs._job_fields(team, spec, user, key, spec.fingerprint() if key else "", now)
        return row, jobs._submitted_event_fields(team, spec, user, now)

    def by_sql(key):
        return statements.insert_jobs_with_events(
            [statements.NewJob(*fields(key))], access.SUBMIT_ROLES
        )[0]

    def by_orm(key):
        job = Job(**fields(key)[0])
        return job.pk if jobs._insert_with_orm(job, user, spec) else None

    first, second = by_sql("k1"), by_orm("k2")
    assert first and second
    assert _stored(first) == (
        _stored(second)[0] | {"idempotency_key": "k1"},
        _stored(second)[1],
    )
    assert (by_sql("k2"), by_orm("k1")) == (None, None)  # the key of the other one
    Queue.objects.filter(pk=cluster.queue_a.pk).update(max_pending_jobs=2)
    cluster.queue_a.refresh_from_db()
    spec.queue.max_pending_jobs = 2
    assert (by_sql(None), by_orm(None)) == (None, None)  # full: 2 pending of 2
    assert Job.objects.count() == 2


@postgresql_only
def test_one_statement_stores_a_batch_row_by_row(cluster, personas):
    """In one batch each row is judged alone, in order: of two rows with one key the
    first is stored, a row the queue has no room for is not (rows ahead of it in the
    batch count as pending), a row whose guard fails is not; the others are, each
    with its event."""
    team, user = cluster.team_a, personas.member_a
    spec = clean_job_spec(
        team,
        {"name": "j", "image": "img", "command": ["true"], "flavor": "h100-80gb",
         "max_runtime_seconds": 600, "workers": 1, "gpus_per_worker": 1},
    )  # fmt: skip
    now = timezone.now()
    Queue.objects.filter(pk=cluster.queue_a.pk).update(max_pending_jobs=4)
    spec.queue.max_pending_jobs = 4
    stale = statements.SubmitGuard(0, "x", "x", "x", True)  # no such token: never holds

    def row(key, guard=None):
        fields = jobs._job_fields(team, spec, user, key, spec.fingerprint() if key else "", now)
        return statements.NewJob(fields, jobs._submitted_event_fields(team, spec, user, now), guard)

    rows = [row("a"), row("a"), row(None, stale), row("b"), row(None), row(None), row("c")]
    ids = statements.insert_jobs_with_events(rows, access.SUBMIT_ROLES)
    assert [i is not None for i in ids] == [True, False, False, True, True, False, False]
    # the duplicate "a" counted as pending within the batch: 4 rows ahead fill the queue
    assert sorted(Job.objects.values_list("idempotency_key", flat=True), key=str) == sorted(
        ["a", "b", None], key=str
    )
    assert JobEvent.objects.filter(job_id__in=[i for i in ids if i]).count() == 3


@postgresql_only
def test_settling_statements_answer_as_the_orm(cluster):
    """Locking jobs, reading their gangs, releasing allocations (actions.workers.settle_jobs,
    actions.jobs.transition)."""
    one, two = _two_admitted_jobs(cluster)
    pending = Job.objects.get(state=Job.State.PENDING)
    ids = [pending.pk, two.pk, one.pk, 10**9]
    for states in [None, [Job.State.ADMITTED], [Job.State.PENDING, Job.State.ADMITTED], []]:
        assert statements.lock_jobs(ids, states) == statements.lock_jobs_orm(ids, states), states
    assert [row[0] for row in statements.lock_jobs(ids)] == sorted(ids[:3])

    Job.objects.filter(pk=two.pk).update(attempt=1)  # its workers are of attempt 0 now
    by_sql, by_orm = statements.gang_workers(ids), statements.gang_workers_orm(ids)
    assert sorted(by_sql) == sorted(by_orm)
    assert {(w.job_id, w.rank) for w in by_sql} == {(one.pk, 0), (one.pk, 1)}

    now = timezone.now()
    workers = list(Worker.objects.filter(job=one).order_by("rank").values_list("pk", flat=True))
    assert statements.release_allocations([workers[0], 10**9], now) == 2  # its 2 GPUs
    assert statements.release_allocations_orm([workers[0]], now) == 0  # already released
    assert statements.release_allocations_orm([workers[1]], now) == 2
    assert not one.allocations.filter(active=True).exists()
    assert set(one.allocations.values_list("released_at", flat=True)) == {now}


@postgresql_only
def test_notified_jobs_statement_answers_as_the_orm(cluster, personas):
    from portal.core.models import JobNotify, TeamWebhook

    plain, own, hooked, unhooked = (make_job(cluster) for _ in range(4))
    JobNotify.objects.create(job=own, url="https://hooks.example.com/x", on=["ended"])
    Job.objects.filter(pk=hooked.pk).update(team=cluster.team_b, queue=cluster.queue_b)
    TeamWebhook.objects.create(team=cluster.team_b, url="https://hooks.example.com/b")
    ids = [plain.pk, own.pk, hooked.pk, unhooked.pk, 10**9]
    assert sorted(statements.notified_jobs(ids)) == [own.pk, hooked.pk]
    assert sorted(statements.notified_jobs_orm(ids)) == [own.pk, hooked.pk]
    TeamWebhook.objects.update(active=False)
    assert statements.notified_jobs(ids) == statements.notified_jobs_orm(ids) == [own.pk]


@postgresql_only
def test_held_dependents_statement_answers_as_the_orm(cluster, personas):
    from portal.core.models import JobDependency

    user, other = personas.member_a, personas.lead_a

    def job(name: str, **kw) -> Job:
        made = make_job(cluster, **kw)
        Job.objects.filter(pk=made.pk).update(name=name)
        return made

    parent = job("train", submitted_by=user)
    held = dict(state=Job.State.PENDING, awaiting_dependency=True)
    child = job("eval", dependency=f"afterok:{parent.pk}", **held)
    JobDependency.objects.create(child=child, parent=parent, type="afterok")
    done_child = job("eval2", dependency=f"afterok:{parent.pk}")
    JobDependency.objects.create(child=done_child, parent=parent, type="afterok")
    namesake = job("train", submitted_by=user, dependency="singleton", **held)
    job("train", submitted_by=other, dependency="singleton", **held)
    job("train_", submitted_by=user, dependency="singleton", **held)
    job("train", submitted_by=user, dependency="singletons%", **held)
    for job_ids in [[parent.pk], [parent.pk, child.pk, 10**9], [10**9], []]:
        for ended in (False, True):
            by_sql = statements.held_dependents(job_ids, ended, "singleton")
            assert by_sql == statements.held_dependents_orm(job_ids, ended, "singleton")
    assert statements.held_dependents([parent.pk], False, "singleton") == [child.pk]
    ended = statements.held_dependents([parent.pk], True, "singleton")
    assert child.pk in ended and namesake.pk in ended
    assert statements.held_dependents([parent.pk], True, "single%") == [child.pk]


def _pass_jobs(cluster):
    """Jobs of every kind the snapshot tells apart: pending plain, requeued with a
    backoff and a verdict, with an attempt still stopping, held for a dependency, a
    task of an array with a limit, of team B on A100s; admitted on two nodes, one
    preempting (checkpointed, naming its preemptor), one whose allocations ended."""
    now = timezone.now()
    plain = make_job(
        cluster,
        reserved_on=[["h100-0", 4], ["h100-1", 4]],
        reserved_until=now + timedelta(seconds=270, microseconds=11),
        reserved_ending=[7, 9],
    )
    make_job(
        cluster,
        priority=5,
        restart_count=2,
        eligible_at=now + timedelta(seconds=90),
        reason_code="backoff",
        reason="waits",
        queue_position=2,
        estimated_start_at=now + timedelta(minutes=3, microseconds=7),
    )
    draining = make_job(cluster, preempted_by=plain.pk)
    Worker.objects.create(
        job=draining, attempt=0, rank=0, node=cluster.nodes[3], state=Worker.State.STOPPING
    )
    stopped = make_job(cluster)
    Worker.objects.create(
        job=stopped, attempt=0, rank=0, node=cluster.nodes[3], state=Worker.State.EXITED
    )
    make_job(cluster, awaiting_dependency=True)
    array = JobArray.objects.create(
        team=cluster.team_a, name="t", spec="0-1%1", size=2, task_limit=1
    )
    make_job(cluster, array=array, array_index=0)
    Job.objects.create(
        team=cluster.team_b,
        queue=cluster.queue_b,
        flavor=cluster.a100,
        name="b",
        image="img",
        command=["true"],
        workers=1,
        gpus_per_worker=8,
        max_runtime_seconds=60,
        preemptible=False,
    )
    one, two = _two_admitted_jobs(cluster)  # 2 on 2 nodes; 1 released; 1 more pending
    victim = make_job(cluster, workers=1, gpus_per_worker=1, array=array, array_index=1)
    admit(victim, cluster.nodes[2:3])
    Job.objects.filter(pk=victim.pk).update(
        state=Job.State.PREEMPTING,
        preempted_by=plain.pk,
        last_checkpoint_at=now - timedelta(minutes=5),
        grace_period_seconds=45,
        stop_requested_at=now - timedelta(seconds=20, microseconds=3),
    )
    return one, victim


@postgresql_only
def test_pass_snapshot_statements_read_as_the_orm(cluster):
    one, victim = _pass_jobs(cluster)
    longer = Job.objects.filter(state=Job.State.PENDING).order_by("pk").first()
    Job.objects.filter(pk=longer.pk).update(grace_period_seconds=90)
    pending = statements.pending_jobs(ENDED)
    assert sorted(pending) == sorted(statements.pending_jobs_orm(ENDED))
    assert len(pending) == 7  # not the held job, nor the three admitted
    assert {row.pk: row.grace_period for row in pending if row.grace_period != 30.0} == {
        longer.pk: 90.0
    }  # a requeued victim's grace is its preemptor's horizon (scheduler.state.mark_ending)
    by_name = {(row.restart_count, row.priority, row.draining, row.array_limit) for row in pending}
    assert {(2, 5, False, None), (0, 0, True, None), (0, 0, False, 1)} <= by_name
    assert [row.reserved_on for row in pending if row.reserved_on] == [
        [["h100-0", 4], ["h100-1", 4]]
    ]
    [stored] = [
        (row.reserved_until, row.reserved_ending)
        for row in pending
        if row.reserved_until is not None
    ]
    row = Job.objects.exclude(reserved_until=None).get()
    assert stored == (row.reserved_until.timestamp(), [7, 9])
    assert {tuple(row.reserved_ending) for row in pending} == {(7, 9), ()}
    running = statements.running_jobs()
    assert running == statements.running_jobs_orm()
    assert [row.pk for row in running] == [one.pk, victim.pk]
    assert len(running[0].placement) == 2 and running[1].checkpointed_at is not None
    assert running[0].stop_requested_at is None and running[1].stop_requested_at is not None
    Node.objects.filter(pk=cluster.nodes[5].pk).update(cordon=Node.Cordon.DRAINING)
    Gpu.objects.filter(node=cluster.nodes[1], index=3).update(health=Gpu.Health.UNHEALTHY)
    Gpu.objects.filter(node=cluster.nodes[4]).update(health=Gpu.Health.UNHEALTHY)
    nodes = statements.schedulable_nodes()
    assert nodes == statements.schedulable_nodes_orm()
    by_host = {row.hostname: row for row in nodes}
    assert len(nodes) == 5 and by_host["a100-0"].total_gpus == 0  # drained, unhealthy
    assert by_host["h100-1"].total_gpus == 7 and len(by_host["h100-1"].free_gpus) == 5


@postgresql_only
def test_pass_write_statements_write_as_the_orm(cluster):
    one, victim = _pass_jobs(cluster)
    jobs = list(Job.objects.order_by("pk").values_list("pk", flat=True))
    now = timezone.now()

    def shown():
        return list(
            Job.objects.order_by("pk").values_list(
                "pk",
                *statements.VERDICT_FIELDS,
                "preempted_by",
                "reserved_on",
                "reserved_until",
                "reserved_ending",
            )
        )

    results = []
    for write, name, store in (
        (statements.write_verdicts, statements.name_preemptors, statements.store_reservations),
        (
            statements.write_verdicts_orm,
            statements.name_preemptors_orm,
            statements.store_reservations_orm,
        ),
    ):
        Job.objects.update(reason_code="", reason="", queue_position=None, estimated_start_at=None)
        Job.objects.update(
            preempted_by=None, reserved_on=[["x", 1]], reserved_until=now, reserved_ending=[3]
        )
        write(
            jobs,
            ["no_capacity"] * len(jobs),
            [f"needs {pk}" for pk in jobs],
            [i if i % 3 else None for i in range(len(jobs))],
            [
                now + timedelta(seconds=i, microseconds=i) if i % 2 else None
                for i in range(len(jobs))
            ],
        )
        name([one.pk, victim.pk], [jobs[0], jobs[1]])
        horizon = now + timedelta(seconds=600, microseconds=9)
        store(
            [jobs[1], jobs[2], one.pk],
            [[["h100-0", 4], ["h100-1", 4]], [], [["h100-2", 8]]],
            [horizon, None, horizon],
            [[4, 5], [], [6]],
        )
        results.append(shown())
    assert results[0] == results[1]
    written = {row[0]: row for row in results[0]}
    assert written[jobs[1]][6] == [["h100-0", 4], ["h100-1", 4]] and written[jobs[2]][6] == []
    assert written[jobs[1]][7:] == (horizon, [4, 5]) and written[jobs[2]][7:] == (None, [])
    assert written[one.pk][6:] == ([["x", 1]], now, [3])  # pending only
    assert written[one.pk][1] == "" and written[jobs[1]][1] == "no_capacity"  # pending only
    assert (written[one.pk][5], written[victim.pk][5]) == (jobs[0], jobs[1])

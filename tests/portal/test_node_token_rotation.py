"""Node token rotation (docs/protocol.md, section 1 "Rotation"; docs/security.md): the token
that was current keeps authenticating until the node first uses the new one or the overlap
window passes, so a rotation whose reply is lost, or an agent that dies before it saved the
new token, does not lock the node out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.agentapi.auth import authenticated_node
from portal.core.actions.nodes import reset_node_identity
from portal.core.models import AuditEntry, Node, NodeBootstrapToken, Worker
from portal.core.secrets import digest
from tests.portal.agent_helpers import admit, beat, inventory, make_job, node_token, report

OVERLAP_S = 3600.0


def rotate(client, node, token):
    """The agent's rotation request: the registration body, the node token as Bearer."""
    body = {"hostname": node.hostname, "rack": node.rack, "block": node.block}
    body["gpus"] = inventory(node)
    return client.post(
        "/api/agent/v1/register",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def rotated(client, node, token) -> str:
    response = rotate(client, node, token)
    assert response.status_code == 201, response.content
    return response.json()["node_token"]


@pytest.fixture
def busy(client, cluster, settings):
    """A ready node running one worker, an overlap of an hour; returns (node, token, job)."""
    settings.BERTH = settings.BERTH | {"NODE_TOKEN_OVERLAP_S": OVERLAP_S}
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster)
    admit(job, [node])
    assert beat(client, node, token, [report(job, 0, "running")]).status_code == 200
    return node, token, job


@pytest.fixture
def clock(monkeypatch):
    """A fixed clock for the whole portal (every `timezone.now()`), moved by hand."""

    class Clock:
        now = timezone.now()

        def advance(self, seconds: float) -> None:
            self.now += timedelta(seconds=seconds)

    fixed = Clock()
    monkeypatch.setattr(timezone, "now", lambda: fixed.now)
    return fixed


def test_a_rotation_whose_reply_is_lost_does_not_lock_the_node_out(client, busy):
    """The portal commits the rotation, the reply never reaches the agent (or the agent dies
    before it saved the new token): the agent still holds only the old token."""
    node, old, job = busy
    assert rotate(client, node, old).status_code == 201  # the reply is lost on its way
    reply = beat(client, node, old, [report(job, 0, "running")])
    assert reply.status_code == 200, reply.content
    assert [r["key"] for r in reply.json()["run"]] == [f"{job.pk}.0.0"]


def test_the_old_token_works_until_the_new_one_is_used_then_never_again(client, busy):
    node, old, job = busy
    new = rotated(client, node, old)
    running = [report(job, 0, "running")]
    assert beat(client, node, old, running).status_code == 200
    assert beat(client, node, old, running).status_code == 200  # not retired by its own use
    assert not AuditEntry.objects.filter(action="retire_token").exists()

    assert beat(client, node, new, running).status_code == 200
    assert beat(client, node, old, running).status_code == 401
    assert rotate(client, node, old).status_code == 401  # nor may it rotate any more
    assert beat(client, node, new, running).status_code == 200
    node.refresh_from_db()
    assert node.previous_token_hash is None and node.previous_token_replaced_at is None
    retired = AuditEntry.objects.get(target_type="node", action="retire_token")
    assert retired.target_id == str(node.pk) and retired.actor is None


def test_the_old_token_is_refused_once_the_overlap_has_passed(client, busy, clock):
    node, old, job = busy
    new = rotated(client, node, old)
    clock.advance(OVERLAP_S - 1)
    assert beat(client, node, old).status_code == 200
    clock.advance(2)
    assert beat(client, node, old).status_code == 401
    assert rotate(client, node, old).status_code == 401
    assert beat(client, node, new, [report(job, 0, "running")]).status_code == 200


def test_a_rotation_by_the_previous_token_keeps_the_nodes_identity_and_workers(client, busy, clock):
    """The agent lost the reply and tries again with the token it still has: it gets a
    fresh token for the same node and work; the unproven one in between stops working,
    the previous token stays as it was, deadline included."""
    node, old, job = busy
    lost = rotated(client, node, old)
    replaced_at = Node.objects.get(pk=node.pk).previous_token_replaced_at
    clock.advance(60)
    fresh = rotated(client, node, old)

    assert beat(client, node, lost).status_code == 401
    mine = Node.objects.get(pk=node.pk)
    assert mine.previous_token_hash == digest(old)
    assert mine.previous_token_replaced_at == replaced_at
    reply = beat(client, node, fresh, [report(job, 0, "running")])
    assert reply.status_code == 200
    assert reply.json()["node"]["id"] == node.pk
    assert [r["key"] for r in reply.json()["run"]] == [f"{job.pk}.0.0"]
    assert Worker.objects.get(job=job).node_id == node.pk
    assert Worker.objects.get(job=job).state == Worker.State.RUNNING
    assert beat(client, node, old).status_code == 401  # the fresh one was used: retired
    notes = AuditEntry.objects.filter(action="rotate_token").order_by("at", "id")
    assert [n.note.split(" from ")[0] for n in notes] == [
        "by its current token",
        "by its previous token",
    ]
    assert NodeBootstrapToken.objects.count() == 0  # no bootstrap token was ever needed


def test_rotating_again_by_the_previous_token_does_not_extend_its_overlap(client, busy, clock):
    node, old, _ = busy
    rotated(client, node, old)
    clock.advance(OVERLAP_S - 10)
    fresh = rotated(client, node, old)  # the agent retried for almost the whole window
    clock.advance(11)
    assert beat(client, node, old).status_code == 401
    assert beat(client, node, fresh).status_code == 200


def test_an_identity_reset_refuses_both_tokens(client, busy, personas):
    node, old, _ = busy
    new = rotated(client, node, old)
    reset_node_identity(node, acting_user=personas.admin, reason="node stolen")
    assert beat(client, node, old).status_code == 401
    assert beat(client, node, new).status_code == 401
    assert rotate(client, node, old).status_code == 401
    node.refresh_from_db()
    assert (node.token_hash, node.previous_token_hash) == ("", None)


def test_a_new_identity_ends_the_old_identitys_previous_token(client, busy, clock):
    """A machine reinstalled and registered anew with a bootstrap token is a new identity:
    the token the old one was rotating away from must not beat (and so read the new
    identity's jobs) nor rotate it out."""
    from tests.portal.test_node_identity import bootstrap_token, register

    node, old, job = busy
    rotated(client, node, old)  # the reply is lost; then the machine is reinstalled
    Worker.objects.filter(node=node).delete()
    Node.objects.filter(pk=node.pk).update(condition=Node.Condition.NOT_READY)
    answer = register(client, bootstrap_token(), node.hostname, inventory(node), rack=node.rack)
    assert answer.status_code == 201, answer.content
    fresh = answer.json()["node_token"]
    assert beat(client, node, old).status_code == 401
    assert rotate(client, node, old).status_code == 401
    assert beat(client, node, fresh).status_code == 200
    node.refresh_from_db()
    assert (node.previous_token_hash, node.previous_token_replaced_at) == (None, None)


def test_a_rotation_changes_the_token_not_the_labels_an_admin_edited(client, busy, personas):
    """Agents rotate by themselves every few weeks: an admin's rack and block must stay."""
    from portal.core.actions.nodes import edit_node

    node, old, _ = busy
    agents = Node.objects.get(pk=node.pk)  # what the agent's configuration says
    edit_node(node, acting_user=personas.admin, rack="r-admin", block="b-admin")
    new = rotated(client, agents, old)  # the body says the agent's own rack and block
    node.refresh_from_db()
    assert (node.rack, node.block) == ("r-admin", "b-admin")
    assert beat(client, node, new).status_code == 200


def test_of_two_beats_with_the_new_token_at_once_one_retires_the_previous(client, busy):
    """retire_previous_token is a conditional update: two beats that both read the
    pending previous token retire it once, with one audit row."""
    from portal.core.actions.nodes import retire_previous_token

    node, old, _ = busy
    rotated(client, node, old)
    first, second = Node.objects.get(pk=node.pk), Node.objects.get(pk=node.pk)
    assert first.previous_token_hash == digest(old)
    assert retire_previous_token(first) is True
    assert retire_previous_token(second) is False
    assert AuditEntry.objects.filter(action="retire_token", target_id=str(node.pk)).count() == 1
    assert beat(client, node, old).status_code == 401


@pytest.mark.parametrize("pending", [False, True], ids=["steady", "rotation pending"])
def test_the_node_is_found_in_one_query_with_or_without_a_rotation_pending(client, busy, pending):
    """Both backends: the lookup is one statement (both hashes indexed), the old token's
    beats during the overlap cost no more, and nothing is written until the new one is used."""
    node, token, _ = busy
    if pending:
        rotated(client, node, token)
    with CaptureQueriesContext(connection) as queries:
        found = authenticated_node(token)
    assert found.pk == node.pk
    assert len(queries) == 1, [q["sql"] for q in queries]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts prepared statements")
def test_a_beat_by_the_old_token_costs_what_a_steady_beat_costs(
    client, busy, django_assert_num_queries
):
    node, old, job = busy
    new = rotated(client, node, old)
    running, gpus = [report(job, 0, "running")], inventory(node)
    # token, workers with their GPUs' UUIDs, node update, savepoint and its release
    with django_assert_num_queries(5):
        assert beat(client, node, old, running, gpus=gpus).status_code == 200
    beat(client, node, new, running, gpus=gpus)  # the first use retires the old token
    with django_assert_num_queries(5):
        assert beat(client, node, new, running, gpus=gpus).status_code == 200


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's generic plan")
def test_the_heartbeats_lookup_reads_indexes_not_every_node_even_as_a_generic_plan(cluster):
    """The lookup is prepared, and the settings force generic plans: PostgreSQL plans it
    once without the token. With '' for "no previous token" in every row it estimated
    "previous_token_hash = $2" to match half the table and scanned every node on every
    beat (0.7 ms at 2,000 nodes, growing with the cluster); NULL and a partial index keep
    it two index probes."""
    from portal.core import statements

    flavor = cluster.nodes[0].flavor
    Node.objects.bulk_create(
        Node(hostname=f"many-{i:04d}", flavor=flavor, token_hash=f"{i:064x}") for i in range(2000)
    )
    one = Node.objects.get(hostname="many-0001")
    Node.objects.filter(pk=one.pk).update(
        previous_token_hash="f" * 64, previous_token_replaced_at=timezone.now()
    )
    sql = statements.NODE_BY_TOKEN
    for n in (1, 2, 3):
        sql = sql.replace("%s", f"${n}", 1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE core_node")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE node_by_token_plan (text, text, timestamptz) AS {sql}")
        try:
            cursor.execute("EXPLAIN EXECUTE node_by_token_plan ('x', 'x', now())")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE node_by_token_plan")
    assert "Seq Scan" not in plan, plan
    assert "node_previous_token_hash" in plan, plan

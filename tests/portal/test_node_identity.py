"""Node identity (docs/protocol.md, "Threat model"): a bootstrap token is single-use or
bound to a hostname pattern and a use count; a node that is ready or holds work keeps
its identity unless its current token rotates it or an admin resets it; every
registration and rotation is audited; a job's env goes only to its workers' nodes."""

from __future__ import annotations

import pytest

from portal.core.models import AuditEntry, Node, NodeBootstrapToken, Worker
from portal.core.secrets import new_secret
from tests.portal.agent_helpers import admit, beat, inventory, make_job, node_token, report


def bootstrap_token(**fields) -> str:
    secret = new_secret("bbt")
    NodeBootstrapToken.objects.create(prefix=secret.prefix, token_hash=secret.digest, **fields)
    return secret.plaintext


def register(client, token, hostname, gpus, *, node_token=None, rack="r1"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {node_token}"} if node_token else {}
    body = {"hostname": hostname, "rack": rack, "block": "b1", "gpus": gpus}
    if token is not None:
        body["bootstrap_token"] = token
    return client.post("/api/agent/v1/register", body, content_type="application/json", **headers)


def new_gpus(prefix: str, n: int = 2) -> list[dict]:
    return [
        {"index": i, "uuid": f"GPU-{prefix}-{i}", "name": "NVIDIA H100 80GB HBM3"} for i in range(n)
    ]


@pytest.fixture
def busy(client, cluster):
    """A ready node running a job whose env holds a secret; returns (node, its token, job)."""
    node = cluster.nodes[0]
    token = node_token(node)
    job = make_job(cluster, env={"WANDB_API_KEY": "secret-of-team-alpha"})
    admit(job, [node])
    assert beat(client, node, token, [report(job, 0, "running")]).status_code == 200
    return node, token, job


def test_a_bootstrap_token_cannot_take_over_a_node_that_runs_work(client, cluster, busy):
    """The probe's attack: another bootstrap token re-registers a busy node's hostname."""
    node, token, job = busy
    other = bootstrap_token(description="for other nodes")
    response = register(client, other, node.hostname, inventory(node))
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "node_identity"
    assert "node_token" not in response.json()
    # The real node keeps its identity and its work; nothing went to the impostor.
    reply = beat(client, node, token, [report(job, 0, "running")])
    assert reply.status_code == 200
    assert [r["env"] for r in reply.json()["run"]] == [{"WANDB_API_KEY": "secret-of-team-alpha"}]
    assert NodeBootstrapToken.objects.get().uses == 0


def test_a_ready_idle_node_cannot_be_taken_over_either(client, cluster):
    node = cluster.nodes[1]
    token = node_token(node)
    assert beat(client, node, token).status_code == 200
    response = register(client, bootstrap_token(), node.hostname, inventory(node))
    assert response.status_code == 409
    assert beat(client, node, token).status_code == 200


def test_a_not_ready_node_without_work_is_registered_again(client, cluster):
    """A reinstalled node (its token file lost) comes back once its old identity is idle."""
    node = cluster.nodes[2]
    Node.objects.filter(pk=node.pk).update(condition=Node.Condition.NOT_READY)
    old = node_token(node)
    response = register(client, bootstrap_token(), node.hostname, inventory(node))
    assert response.status_code == 201, response.content
    assert beat(client, node, old).status_code == 401
    assert beat(client, node, response.json()["node_token"]).status_code == 200


def test_the_current_token_rotates_without_spending_a_bootstrap_token(client, cluster, busy):
    node, token, job = busy
    response = register(client, None, node.hostname, inventory(node), node_token=token)
    assert response.status_code == 201, response.content
    fresh = response.json()["node_token"]
    reply = beat(client, node, fresh, [report(job, 0, "running")]).json()
    assert [r["key"] for r in reply["run"]] == [f"{job.pk}.0.0"]  # same identity, same work
    assert beat(client, node, token).status_code == 401  # retired once the new one was used
    rotated = AuditEntry.objects.get(target_type="node", action="rotate_token")
    assert rotated.target_id == str(node.pk) and rotated.actor is None


def test_another_nodes_token_cannot_rotate_this_node(client, cluster, busy):
    node, token, _ = busy
    intruder = cluster.nodes[1]
    response = register(
        client, None, node.hostname, inventory(node), node_token=node_token(intruder)
    )
    assert response.status_code == 409
    assert beat(client, node, token).status_code == 200


def test_a_bootstrap_token_is_single_use_by_default(client, cluster):
    token = bootstrap_token()
    assert register(client, token, "gpu-new-1", new_gpus("n1")).status_code == 201
    response = register(client, token, "gpu-new-2", new_gpus("n2"))
    assert response.status_code == 401
    assert not Node.objects.filter(hostname="gpu-new-2").exists()


def test_a_bootstrap_token_bound_to_a_pattern_and_a_count(client, cluster):
    token = bootstrap_token(hostname_pattern="rack9-*", max_uses=2)
    assert register(client, token, "gpu-x", new_gpus("x")).status_code == 401
    assert register(client, token, "rack9-a", new_gpus("a")).status_code == 201
    assert register(client, token, "rack9-b", new_gpus("b")).status_code == 201
    assert register(client, token, "rack9-c", new_gpus("c")).status_code == 401
    assert NodeBootstrapToken.objects.get().uses == 2


def test_every_registration_is_audited_with_the_bootstrap_tokens_prefix(client, cluster):
    token = bootstrap_token(description="rack 9")
    response = register(client, token, "gpu-audited", new_gpus("au"))
    node = Node.objects.get(hostname="gpu-audited")
    entry = AuditEntry.objects.get(target_type="node", action="register")
    assert entry.target_id == str(node.pk) == str(response.json()["node_id"])
    assert NodeBootstrapToken.objects.get().prefix in entry.note


def test_after_an_admin_reset_the_new_identity_gets_none_of_the_old_work(
    client, cluster, busy, personas
):
    from portal.core.actions.nodes import reset_node_identity

    node, token, job = busy
    reset_node_identity(node, acting_user=personas.admin, reason="reinstalled from scratch")
    assert beat(client, node, token).status_code == 401
    assert Worker.objects.get(job=job).state == Worker.State.LOST
    response = register(client, bootstrap_token(), node.hostname, inventory(node))
    assert response.status_code == 201, response.content
    reply = beat(client, node, response.json()["node_token"]).json()
    assert reply["run"] == [] and "secret-of-team-alpha" not in str(reply)
    reset = AuditEntry.objects.get(target_type="node", action="reset_identity")
    assert reset.actor == personas.admin and reset.note == "reinstalled from scratch"


def test_a_gangs_env_goes_only_to_the_nodes_of_its_workers(client, cluster):
    a, b, c = cluster.nodes[0], cluster.nodes[1], cluster.nodes[2]
    job = make_job(cluster, workers=2, env={"HF_TOKEN": "hf_secret"})
    admit(job, [a, b])
    for node in (a, b):
        (entry,) = beat(client, node, node_token(node)).json()["run"]
        assert entry["env"] == {"HF_TOKEN": "hf_secret"}
    assert "hf_secret" not in beat(client, c, node_token(c)).content.decode()


def test_the_demos_bootstrap_token_registers_its_simulated_nodes_only(
    client, db, settings, tmp_path
):
    import io
    import json

    from django.core.management import call_command

    from portal.devstack import DEMO_NODES

    settings.VAR_DIR = tmp_path
    call_command("seed_demo", "--no-jobs", stdout=io.StringIO())
    token = json.loads((tmp_path / "demo.json").read_text())["bootstrap_token"]
    assert register(client, token, "evil-1", new_gpus("e")).status_code == 401
    for i, (host, *_rest) in enumerate(DEMO_NODES):
        assert register(client, token, host, new_gpus(f"d{i}")).status_code == 201, host
    assert register(client, token, "demo-h100-9", new_gpus("d9")).status_code == 401  # used up

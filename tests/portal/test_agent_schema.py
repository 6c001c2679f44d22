"""Every field of the agent protocol is checked by one schema (portal/agentapi/schema.py):
a bad value is a 400 that names the field and changes nothing, never a 500 (which the
agent retries until its node goes not ready). Runs on PostgreSQL and on SQLite."""

from __future__ import annotations

import copy
import json

import pytest

from portal.core.models import Gpu, Node, NodeBootstrapToken, Worker
from portal.core.secrets import new_secret
from tests.portal.agent_helpers import admit, inventory, make_job, node_token

BIG = 2**40


def _set(body: dict, path: str, value) -> dict:
    """A copy of `body` with the value at a dotted path ("gpus.0.uuid") replaced."""
    body = copy.deepcopy(body)
    *parents, last = path.split(".")
    target = body
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return body


def field_name(path: str) -> str:
    """ "gpus.0.uuid" as the error names it: "gpus[0].uuid"."""
    out = ""
    for part in path.split("."):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


@pytest.fixture
def node(cluster):
    return cluster.nodes[0]


@pytest.fixture
def heartbeat_body(cluster, node):
    job = make_job(cluster)
    admit(job, [node])
    worker = {
        "key": f"{job.pk}.0.0",
        "state": "running",
        "exit_code": None,
        "started_at": "2026-11-30T10:00:00Z",
        "finished_at": None,
        "log_tail": "step 1\n",
    }
    return {"agent_version": "1.0", "gpus": inventory(node), "workers": [worker]}


def post_heartbeat(client, node, token, body):
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(
        "/api/agent/v1/heartbeat",
        raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


HEARTBEAT_CASES = [
    ("workers.0.key", "¹.0.0"),
    ("workers.0.key", "1.0.0\x00"),
    ("workers.0.exit_code", BIG),
    ("workers.0.exit_code", -BIG),
    ("workers.0.started_at", "2026-13-45T00:00:00Z"),
    ("workers.0.finished_at", "2026-11-30T10:00:00\x00Z"),
    ("workers.0.log_tail", "oops\x00"),
    ("workers.0.log_tail", 7),
    ("gpus.0.index", 2**31),
    ("gpus.0.index", -1),
    ("gpus.0.memory_total_mib", BIG),
    ("gpus.0.memory_used_mib", BIG),
    ("gpus.0.memory_used_mib", -5),
    ("gpus.0.uuid", "GPU-" + "a" * 93),
    ("gpus.0.uuid", "GPU-h100-0-0\x00"),
    ("gpus.0.name", "NVIDIA\x00H100"),
    ("gpus.0.name", "NVIDIA\ud800H100"),
    ("gpus.0.uuid", "GPU-\u202e0-0"),
    ("gpus.0.health_reason", "XID\x0079"),
    ("gpus.0.utilization_pct", float("nan")),
    ("gpus.0.power_w", float("inf")),
    ("gpus.0.utilization_pct", "97"),
    ("gpus.0.temperature_c", True),
    ("gpus.0.health", "sick"),
    ("agent_version", "1.0\x00"),
    ("agent_version", "v" * 41),
]


@pytest.mark.parametrize(("path", "value"), HEARTBEAT_CASES)
def test_a_bad_heartbeat_field_is_a_400_naming_it_and_changes_nothing(
    client, node, heartbeat_body, path, value
):
    token = node_token(node)
    response = post_heartbeat(client, node, token, _set(heartbeat_body, path, value))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field_name(path) in error["fields"], error
    node.refresh_from_db()
    assert node.last_heartbeat_at is None
    assert Worker.objects.get(node=node).state == Worker.State.ASSIGNED
    assert not Gpu.objects.filter(node=node).exclude(health="healthy").exists()


def test_a_good_heartbeat_with_every_field_is_accepted(client, node, heartbeat_body):
    response = post_heartbeat(client, node, node_token(node), heartbeat_body)
    assert response.status_code == 200, response.content
    assert Worker.objects.get(node=node).state == Worker.State.RUNNING


def registration(token: str) -> dict:
    return {
        "bootstrap_token": token,
        "hostname": "gpu-new",
        "rack": "r9",
        "block": "b9",
        "agent_version": "1.0",
        "gpus": [
            {"index": i, "uuid": f"GPU-new-{i}", "name": "NVIDIA H100 80GB HBM3"} for i in range(2)
        ],
    }


@pytest.fixture
def bootstrap(cluster):
    secret = new_secret("bbt")
    NodeBootstrapToken.objects.create(prefix=secret.prefix, token_hash=secret.digest)
    return secret.plaintext


REGISTER_CASES = [
    ("hostname", "gpu\x00new"),
    ("hostname", "g" * 254),
    ("hostname", ""),
    ("rack", "r\x009"),
    ("rack", "r" * 65),
    ("rack", "r\n9"),
    ("hostname", "gpu new"),
    ("block", 9),
    ("agent_version", "\x00"),
    ("gpus.0.index", 2**31),
    ("gpus.0.uuid", "GPU-\x00"),
    ("gpus.1.name", "H100\x00"),
    ("gpus.0.memory_total_mib", BIG),
    ("bootstrap_token", "bbt_\x00"),
]


@pytest.mark.parametrize(("path", "value"), REGISTER_CASES)
def test_a_bad_registration_field_is_a_400_naming_it(client, bootstrap, path, value):
    response = client.post(
        "/api/agent/v1/register",
        _set(registration(bootstrap), path, value),
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert field_name(path) in response.json()["error"]["fields"]
    assert not Node.objects.filter(hostname__startswith="gpu").exists()
    assert NodeBootstrapToken.objects.get().uses == 0


def test_deeply_nested_json_is_a_parse_error_without_credentials(client, cluster):
    body = "[" * 950 + "]" * 950
    assert len(body) < 2048
    for path in ("/api/agent/v1/register", "/api/agent/v1/heartbeat"):
        response = client.post(path, body, content_type="application/json")
        assert response.status_code in (400, 401), response.content
        assert response.json()["error"]["code"] in ("parse_error", "unauthenticated")
    response = client.post(
        "/api/agent/v1/register", '{"gpus": ' + body + "}", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_nested_json_on_a_heartbeat_is_a_parse_error(client, node):
    body = '{"gpus": ' + "[" * 950 + "]" * 950 + "}"
    response = post_heartbeat(client, node, node_token(node), body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_a_3_mb_heartbeat_is_a_json_413(client, node, heartbeat_body):
    big = _set(heartbeat_body, "workers.0.log_tail", "x" * (3 * 1024 * 1024))
    response = post_heartbeat(client, node, node_token(node), big)
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "too_large"
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


def test_a_bad_host_header_on_the_agent_api_is_a_json_400(client, node):
    response = client.post(
        "/api/agent/v1/heartbeat",
        "{}",
        content_type="application/json",
        HTTP_HOST="evil.example",
        HTTP_AUTHORIZATION=f"Bearer {node_token(node)}",
    )
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "bad_request"
    assert "Host header" in response.json()["error"]["message"]

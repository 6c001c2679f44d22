"""Request size and Host limits answer in the one error format on API paths (issue 18 item 7)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from portal.core.models import Job, Queue
from tests.api.conftest import error_of, job_body
from tests.portal.test_agent_protocol import node_token

BULK = "/api/v1/jobs/bulk/"


def test_a_bulk_of_5000_jobs_and_3_3_mib_is_accepted(personas, cluster, as_lead_a):
    """docs/api.md: up to 5,000 jobs per bulk, and 413 only above 16 MiB."""
    Queue.objects.filter(team=cluster.team_a).update(max_pending_jobs=5000)
    job = job_body(command=["python", "train.py", "--config", "c" * 460])
    body = {"team": "alpha", "jobs": [job] * 5000}
    assert 3.2e6 < len(json.dumps(body)) < 3.5e6

    response = as_lead_a.post(BULK, body)

    assert response.status_code == 201, response.content[:500]
    assert response.json()["count"] == 5000 == Job.objects.filter(team=cluster.team_a).count()


@pytest.mark.parametrize(
    "path", [BULK, "/api/agent/v1/heartbeat", "/api/agent/v1/register", "/api/v1/tokens/"]
)
def test_a_body_over_16_mib_is_a_413_in_the_error_format(path, cluster, as_lead_a):
    headers = as_lead_a.headers
    if path.startswith("/api/agent/"):  # a node's own token; register needs none
        headers = {"Authorization": f"Bearer {node_token(cluster.nodes[0])}"}
    body = b'{"pad": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    response = Client().post(path, body, content_type="application/json", headers=headers)
    error_of(response, 413, "too_large")


@pytest.mark.parametrize("debug", [False, True])
def test_a_bad_host_header_is_a_400_in_the_error_format_on_api_paths(debug, settings, cluster):
    settings.DEBUG = debug
    client = Client(HTTP_HOST="evil.example.net")
    for path in ("/api/v1/me/", "/api/agent/v1/heartbeat"):
        error_of(client.post(path, "{}", content_type="application/json"), 400, "bad_request")
    page = client.get("/login/")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "Berth" in page.content.decode() and "ALLOWED_HOSTS" not in page.content.decode()


# A command and an environment are measured as the JSON they are stored as: 16 KiB and
# 32 KiB, escapes included ("😀" is 12 bytes there, "\ud83d\ude00"). Each table row is
# one byte under or at the limit, or one over; short ones are cleared without writing
# the JSON (jobspec._json_surely_within), long ones are measured.
LIMITS = [
    ("command", {"command": ["a" * 16380]}, None),  # ["…"]: 16,384 bytes
    ("command", {"command": ["a" * 16381]}, "The command is longer than 16 KiB."),
    ("command", {"command": ["😀" * 1365]}, None),  # 4 + 12 × 1,365 = 16,384
    ("command", {"command": ["😀" * 1366]}, "The command is longer than 16 KiB."),
    ("command", {"command": ["x", "😀" * 1364]}, None),  # ["x", "…"]: 16,379
    ("env", {"env": {"E": "😀" * 2729}}, None),  # {"E": "…"}: 9 + 12 × 2,729 = 32,757
    ("env", {"env": {"E": "😀" * 2730}}, "At most 200 variables and 32 KiB."),
    ("env", {"env": {"E": "e" * 32759}}, None),  # 32,768
    ("env", {"env": {"E": "e" * 32760}}, "At most 200 variables and 32 KiB."),
    ("env", {"env": {f"V{i}": "1" for i in range(200)}}, None),
    ("env", {"env": {f"V{i}": "1" for i in range(201)}}, "At most 200 variables and 32 KiB."),
]


@pytest.mark.parametrize("path", ["/api/v1/jobs/", BULK])
@pytest.mark.parametrize(("field", "overrides", "refused"), LIMITS)
def test_a_command_or_env_is_measured_as_the_json_it_is_stored_as(
    path, field, overrides, refused, as_lead_a
):
    job = job_body(gpus_per_worker=1, **overrides)
    bulk = path == BULK
    response = as_lead_a.post(path, {"jobs": [job_body(gpus_per_worker=1), job]} if bulk else job)

    if refused is None:
        assert response.status_code == 201, response.content[:500]
        return
    error = error_of(response, 400, "invalid")
    assert error["fields"] == {f"jobs[1].{field}" if bulk else field: [refused]}
    assert not Job.objects.exists()

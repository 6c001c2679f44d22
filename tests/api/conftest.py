"""HTTP-level helpers: each persona calls the API through the real routes with its own token."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from django.test import Client

from portal.core.actions.jobs import submit_job, transition
from portal.core.actions.tokens import create_api_token
from portal.core.jobspec import clean_job_spec
from portal.core.models import Allocation, Job, Worker


@dataclass
class Api:
    """A client that sends JSON with a persona's headers (a Bearer token by default)."""

    client: Client
    headers: dict = field(default_factory=dict)

    def get(self, path: str, params: dict | None = None, **headers):
        return self.client.get(path, params or {}, headers=self.headers | headers)

    def post(self, path: str, body=None, **headers):
        data = "" if body is None else json.dumps(body)
        return self.client.post(
            path, data, content_type="application/json", headers=self.headers | headers
        )

    def delete(self, path: str, **headers):
        return self.client.delete(path, headers=self.headers | headers)


def bearer(user, teams=None, **kwargs) -> Api:
    _, secret = create_api_token(user, name="test", teams=teams, **kwargs)
    return Api(Client(), {"Authorization": f"Bearer {secret}"})


def error_of(response, status: int, code: str | None = None) -> dict:
    """Assert the response is an error in the API's one format; return its `error`."""
    assert response.status_code == status, response.content[:1000]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "fields"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


def job_body(**overrides) -> dict:
    body = {
        "name": "train-llm",
        "image": "registry.example.com/pytorch:2.4",
        "command": ["python", "train.py", "--epochs", "3"],
        "flavor": "h100-80gb",
        "workers": 1,
        "gpus_per_worker": 8,
        "max_runtime_seconds": 3600,
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


@pytest.fixture
def as_lead_a(personas):
    return bearer(personas.lead_a)


@pytest.fixture
def as_member_a(personas):
    return bearer(personas.member_a)


@pytest.fixture
def as_viewer_a(personas):
    return bearer(personas.viewer_a)


@pytest.fixture
def as_lead_b(personas):
    return bearer(personas.lead_b)


def submit(team, user, **overrides) -> Job:
    """A pending job, submitted the way the API does it."""
    spec = clean_job_spec(team, job_body(**overrides))
    return submit_job(team=team, spec=spec, user=user).job


def run_on(job: Job, *nodes, log: str = "") -> Job:
    """Stand in for a scheduling pass and the agent: the job runs on `nodes`, filled in order."""
    transition([job.pk], from_states=["pending"], to_state="running", kind="admitted")
    free = [gpu for node in nodes for gpu in node.gpus.order_by("index")]
    for rank in range(job.workers):
        gpus, free = free[: job.gpus_per_worker], free[job.gpus_per_worker :]
        worker = Worker.objects.create(
            job=job,
            attempt=job.attempt,
            rank=rank,
            node=gpus[0].node,
            state="running",
            log_tail=log,
        )
        Allocation.objects.bulk_create(
            Allocation(job=job, worker=worker, worker_rank=rank, node=gpu.node, gpu=gpu)
            for gpu in gpus
        )
    job.refresh_from_db()
    return job

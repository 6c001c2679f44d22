"""Scenario: a web worker is SIGKILLed while a batch of single submissions waits to
commit (portal/core/actions/store.py). Nobody in that batch may get a 201, and a
client that retries with its Idempotency-Key must end with exactly one job.

The batch's statement is held before it commits: the test holds the queue's row
FOR UPDATE, and the statement's foreign-key check (done at its commit) waits for
it. Then the gunicorn worker is killed. PostgreSQL may still commit the statement
once the row is released (it notices the dead client only when it answers): that
is a job stored without a 201, which the client's retry finds as its replay.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psycopg
import pytest
import requests

from tests.faults.clients import job_body
from tests.faults.harness import query, wait_for

pytestmark = pytest.mark.faults(timeout=300)

WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND query LIKE 'WITH i AS%%'"
)


def test_a_worker_killed_before_its_batch_commits_answers_no_201(
    make_stack, shared_db_url, shared_redis_url
):
    stack = make_stack(shared_db_url, shared_redis_url)
    seeded = stack.seed({"teams": [{"slug": "t0", "nominal": 8}], "nodes": {"count": 1, "gpus": 8}})
    headers = {"Authorization": f"Bearer {seeded['tokens']['t0']}"}
    web = stack.gunicorn(workers=1, threads=4).start()
    stack.wait_web()
    keys = [f"kill-{i}" for i in range(3)]
    answers: dict[str, object] = {}

    def send(key: str) -> None:
        try:
            answers[key] = requests.post(
                f"{stack.url}/api/v1/jobs/",
                json=job_body(key),
                headers=headers | {"Idempotency-Key": key},
                timeout=60,
            ).status_code
        except requests.RequestException as exc:
            answers[key] = exc

    with psycopg.connect(shared_db_url) as hold:  # a transaction until the block ends
        hold.execute("SELECT id FROM core_queue FOR UPDATE")
        clients = [threading.Thread(target=send, args=(key,)) for key in keys]
        for client in clients:
            client.start()
        wait_for(lambda: query(shared_db_url, WAITING)[0][0] >= 1, 60, "the batch to wait")
        children = Path(f"/proc/{web.pid}/task/{web.pid}/children").read_text().split()
        for child in children:  # the worker(s); the master starts a new one
            os.kill(int(child), signal.SIGKILL)
        for client in clients:
            client.join(60)
        hold.rollback()

    assert all(isinstance(a, requests.RequestException) for a in answers.values()), answers
    stack.wait_web()
    retried = {
        key: requests.post(
            f"{stack.url}/api/v1/jobs/",
            json=job_body(key),
            headers=headers | {"Idempotency-Key": key},
            timeout=60,
        ).status_code
        for key in keys
    }
    assert set(retried.values()) <= {200, 201}, retried
    stored = query(
        shared_db_url,
        "SELECT idempotency_key, count(*) FROM core_job GROUP BY idempotency_key ORDER BY 1",
    )
    assert stored == [(key, 1) for key in keys]

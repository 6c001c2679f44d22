"""The agents' watch (docs/protocol.md section 2a): a heartbeat reply names the version
of the node's desired state it reflects; a change bumps it after its commit, and a
watch waiting on that version answers at once; with no change it answers at its
timeout. The watch is the real ASGI application, called in an event loop here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time

import pytest

from portal.agentapi.watch import Watch
from portal.core import wake
from tests.portal.agent_helpers import admit, beat, make_job, node_token

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="the watch keeps versions and wake messages in Redis"
)


@pytest.fixture
def watching(settings):
    settings.BERTH = {
        **settings.BERTH,
        "WATCH_URL": "/api/agent/v1/watch",
        "WATCH_TIMEOUT_S": 5.0,
    }
    redis = wake.client()
    keys = list(redis.scan_iter(wake.VERSION_KEY.format("*")))
    if keys:
        redis.delete(*keys)


def run(coroutine_fn):
    """Run `coroutine_fn(app)` against a started watch application."""

    async def main():
        app = Watch()
        await app._start()
        await asyncio.wait_for(app.listening.wait(), 5)
        try:
            return await coroutine_fn(app)
        finally:
            await app.close()

    # in a thread of its own: a browser test's Playwright (sync API) may have left an
    # event loop running in this one, and asyncio.run refuses to nest
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


async def call(app, *, ticket=None, query=b"", method="GET"):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    headers = [(b"authorization", f"Bearer {ticket}".encode())] if ticket else []
    scope = {"type": "http", "method": method, "path": "/api/agent/v1/watch",
             "query_string": query, "headers": headers}  # fmt: skip
    await app(scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


def test_the_heartbeat_reply_names_the_version_and_a_ticket(
    client, cluster, watching, django_capture_on_commit_callbacks
):
    node = cluster.nodes[0]
    token = node_token(node)
    watch = beat(client, node, token).json()["watch"]
    assert watch["url"] == "/api/agent/v1/watch" and watch["timeout_s"] == 5.0
    assert watch["version"] == 0 and wake.ticket_node(watch["ticket"]) == node.pk

    with django_capture_on_commit_callbacks(execute=True):
        admit(make_job(cluster), [node])
    reply = beat(client, node, token).json()
    assert reply["watch"]["version"] == 1 and len(reply["run"]) == 1
    other = cluster.nodes[1]
    assert beat(client, other, node_token(other)).json()["watch"]["version"] == 0


def test_without_a_watch_url_the_reply_has_no_watch(client, cluster, settings):
    settings.BERTH = {**settings.BERTH, "WATCH_URL": ""}
    node = cluster.nodes[0]
    assert "watch" not in beat(client, node, node_token(node)).json()


def test_a_waiting_watch_answers_as_soon_as_an_assignment_commits(
    cluster, watching, django_capture_on_commit_callbacks
):
    node = cluster.nodes[0]
    seen = wake.version(node.pk)
    with django_capture_on_commit_callbacks() as commit:
        admit(make_job(cluster), [node])
    assert wake.version(node.pk) == seen  # nothing before the commit

    async def scenario(app):
        waiter = asyncio.create_task(app.wait(node.pk, seen, 10.0))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        committed = time.monotonic()
        await asyncio.to_thread(lambda: [callback() for callback in commit])
        changed, version = await asyncio.wait_for(waiter, 5)
        return changed, version, time.monotonic() - committed

    changed, version, after = run(scenario)
    assert changed and version == seen + 1
    assert after < 2  # well before the wait's 10 s


def test_a_watch_with_no_change_answers_unchanged_at_its_timeout(cluster, watching):
    node, other = cluster.nodes[0], cluster.nodes[1]

    async def scenario(app):
        started = time.monotonic()
        waiter = asyncio.create_task(app.wait(node.pk, 0, 0.5))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(wake.wake_nodes, [other.pk])  # another node's change
        return await waiter, time.monotonic() - started

    (changed, version), took = run(scenario)
    assert (changed, version) == (False, 0)
    assert took >= 0.5


def test_a_version_moved_before_the_watch_began_answers_at_once(cluster, watching):
    node = cluster.nodes[0]
    wake.wake_nodes([node.pk])  # the reply the agent holds said 0; the change came since
    ticket = wake.watch_reply(node.pk, 0)["ticket"]

    async def scenario(app):
        started = time.monotonic()
        answer = await call(app, ticket=ticket, query=b"since=0")
        return answer, time.monotonic() - started

    (status, body), took = run(scenario)
    assert (status, body) == (200, {"changed": True, "version": 1})
    assert took < 1


def test_the_watch_refuses_forged_tickets_bad_versions_and_other_methods(cluster, watching):
    node = cluster.nodes[0]
    ticket = wake.watch_reply(node.pk, 0)["ticket"]

    async def scenario(app):
        return [
            await call(app, query=b"since=0"),
            await call(app, ticket=ticket[:-2] + "xx", query=b"since=0"),
            await call(app, ticket=ticket, query=b"since=-1"),
            await call(app, ticket=ticket, query=b"since=abc"),
            await call(app, ticket=ticket, method="POST"),
        ]

    answers = run(scenario)
    assert [status for status, _ in answers] == [401, 401, 400, 400, 405]
    assert all(set(body["error"]) == {"code", "message", "detail"} for _, body in answers)


def test_a_watch_still_waiting_when_the_server_stops_is_answered_not_crashed(cluster, watching):
    """uvicorn cancels the requests still waiting once its graceful shutdown time is up
    (--timeout-graceful-shutdown, deploy/): each is answered 503 so its agent heartbeats,
    and none ends in an exception (a traceback per waiting agent in the log)."""
    node = cluster.nodes[0]
    ticket = wake.watch_reply(node.pk, 0)["ticket"]

    async def scenario(app):
        waiting = asyncio.create_task(call(app, ticket=ticket, query=b"since=0"))
        await asyncio.sleep(0.3)
        assert not waiting.done() and app.waiters.get(node.pk)
        waiting.cancel()
        answer = await asyncio.wait_for(waiting, 5)
        return answer, dict(app.waiters)

    (status, body), waiters = run(scenario)
    assert status == 503 and body["error"]["code"] == "unavailable"
    assert waiters == {}  # its waiter is gone with it


def test_cancelling_an_admitted_job_wakes_its_node(
    cluster, watching, django_capture_on_commit_callbacks
):
    from portal.core.actions.jobs import cancel_job

    node, other = cluster.nodes[0], cluster.nodes[1]
    job = make_job(cluster)
    with django_capture_on_commit_callbacks(execute=True):
        admit(job, [node])
    seen = wake.version(node.pk)
    with django_capture_on_commit_callbacks(execute=True):
        cancel_job(job, actor=cluster.personas.lead_a)
    assert wake.version(node.pk) == seen + 1
    assert wake.version(other.pk) == 0


def test_cancelling_an_array_wakes_the_nodes_of_its_running_tasks(
    cluster, watching, django_capture_on_commit_callbacks
):
    from portal.core.actions.arrays import cancel_array
    from portal.core.models import JobArray

    node = cluster.nodes[0]
    array = JobArray.objects.create(team=cluster.team_a, name="t{index}", spec="0-0", size=1)
    job = make_job(cluster, array=array, array_index=0)
    with django_capture_on_commit_callbacks(execute=True):
        admit(job, [node])
    seen = wake.version(node.pk)
    with django_capture_on_commit_callbacks(execute=True):
        cancel_array(array, actor=cluster.personas.lead_a)
    job.refresh_from_db()
    assert job.state == "cancelled" and wake.version(node.pk) == seen + 1


def test_with_redis_away_replies_carry_no_watch_and_redis_is_left_alone(
    client, cluster, settings, monkeypatch
):
    settings.BERTH = {
        **settings.BERTH,
        "WATCH_URL": "/api/agent/v1/watch",
        "REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
    }
    monkeypatch.setattr(wake, "_client", None)
    monkeypatch.setattr(wake, "_away_until", float("-inf"))
    node = cluster.nodes[0]
    token = node_token(node)

    reply = beat(client, node, token)
    assert reply.status_code == 200 and "watch" not in reply.json()
    assert wake._away_until > time.monotonic()  # the next beats do not try Redis again
    assert wake.version(node.pk) is None
    assert "watch" not in beat(client, node, token).json()
    wake.wake_nodes([node.pk])  # a commit's wake gives way too

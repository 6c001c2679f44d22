"""Waking node agents when their desired state changes (docs/protocol.md, section 2a).

Each node has a *desired-state version* in Redis (`berth:desired:<node id>`): a counter
that a change to what the node should run or stop bumps after it commits, with a
message on one channel (`berth:desired`) naming the node. The heartbeat reply carries
the version the node has seen and a signed ticket; the agent then waits on the watch
endpoint (portal.agentapi.watch, an asyncio process) until the version moves, and
heartbeats at once instead of at its next beat.

Why a counter and not only the message: the heartbeat reads the version *before* it
reads the node's workers, and a change bumps it only *after* its commit, so a change
the reply missed always shows as a newer version on the watch, even if its message
went out before the agent started watching.

Without Redis (the zero-setup demo) there is no watch: replies carry none, waking is a
no-op, and agents learn of changes at their next beat as before. Redis being away
never fails the write that asked for a wake, nor slows the heartbeats: after a failure
this process leaves Redis alone for `BACK_OFF_S` and its replies carry no watch (the
agents beat as before); the next beat carries every change.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable

import redis
from django.conf import settings
from django.core import signing
from django.db import transaction

log = logging.getLogger(__name__)

CHANNEL = "berth:desired"
VERSION_KEY = "berth:desired:{}"
TICKET_SALT = "berth.agent-watch"
# A ticket outlives many beats (a reply re-issues it), so a node whose heartbeat fails
# for a while can still watch; an old ticket only ever tells "changed" or "not".
TICKET_MAX_AGE_S = 3600

# Short timeouts (Redis is on the local network) and a pause after a failure: with 2,000
# agents a heartbeat that waited seconds on a Redis that is away would hold a web thread
# each, and the nodes would go not ready for want of answered beats.
TIMEOUT_S = 0.5
BACK_OFF_S = 10.0

_client: redis.Redis | None = None
_away_until = float("-inf")


def client() -> redis.Redis | None:
    """This process's Redis client for versions and wake messages; None without Redis."""
    global _client
    url = settings.BERTH["REDIS_URL"]
    if not url:
        return None
    if _client is None:
        _client = redis.Redis.from_url(
            url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S
        )
    return _client


def _reachable() -> redis.Redis | None:
    """The client, unless Redis failed in this process within the last BACK_OFF_S."""
    return client() if time.monotonic() >= _away_until else None


def _failed(what: str) -> None:
    global _away_until
    _away_until = time.monotonic() + BACK_OFF_S
    log.warning("%s; leaving Redis alone for %.0f s", what, BACK_OFF_S, exc_info=True)


def enabled() -> bool:
    return bool(settings.BERTH["WATCH_URL"] and settings.BERTH["REDIS_URL"])


def version(node_id: int) -> int | None:
    """The node's desired-state version now (0 if never bumped); None when Redis is away."""
    redis_ = _reachable()
    if redis_ is None:
        return None
    try:
        return int(redis_.get(VERSION_KEY.format(node_id)) or 0)
    except (redis.RedisError, ValueError):
        _failed(f"cannot read node {node_id}'s desired-state version")
        return None


def wake_nodes(node_ids: Iterable[int]) -> None:
    """Bump each node's version and tell the watchers (one round trip). Call after commit."""
    ids = sorted(set(node_ids))
    redis_ = _reachable()
    if not ids or redis_ is None:
        return
    try:
        pipe = redis_.pipeline(transaction=False)
        for node_id in ids:
            pipe.incr(VERSION_KEY.format(node_id))
        pipe.publish(CHANNEL, ",".join(map(str, ids)))
        pipe.execute()
    except redis.RedisError:
        _failed(f"could not wake nodes {ids}; they learn at their next beat")


def wake_nodes_on_commit(node_ids: Iterable[int]) -> None:
    """Wake the nodes once the current transaction commits (at once outside one)."""
    ids = set(node_ids)
    if ids:
        transaction.on_commit(lambda: wake_nodes(ids))


def wake_job_nodes_on_commit(job_ids: Iterable[int]) -> None:
    """Wake, on commit, the nodes holding live workers of these jobs (their stop orders)."""
    from portal.core.actions.workers import LIVE
    from portal.core.models import Worker

    live = Worker.objects.filter(job_id__in=list(job_ids), state__in=LIVE)
    wake_nodes_on_commit(live.values_list("node_id", flat=True))


def watch_reply(node_id: int, seen: int | None) -> dict | None:
    """The heartbeat reply's `watch` entry: where to wait, for how long, the version this
    reply reflects (`seen`, None when Redis was away) and the ticket that names the node;
    None when there is no watch."""
    if not enabled() or seen is None:
        return None
    return {
        "url": settings.BERTH["WATCH_URL"],
        "version": seen,
        "ticket": signing.dumps(node_id, salt=TICKET_SALT, compress=False),
        "timeout_s": settings.BERTH["WATCH_TIMEOUT_S"],
    }


def ticket_node(ticket: str) -> int | None:
    """The node a watch ticket names, or None if it is forged or too old."""
    with contextlib.suppress(signing.BadSignature):
        node_id = signing.loads(ticket, salt=TICKET_SALT, max_age=TICKET_MAX_AGE_S)
        if type(node_id) is int:
            return node_id
    return None

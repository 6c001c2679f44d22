"""The agents' watch (docs/protocol.md, section 2a): one request per agent that waits
until the node's desired state changes, so an assignment reaches the node at once
instead of at its next beat.

`GET <BERTH_WATCH_URL>?since=<version>` with `Authorization: Bearer <ticket>` (both
from the agent's last heartbeat reply) answers `{"changed": true, "version": n}` as
soon as the node's version differs from `since`, or `{"changed": false, ...}` after
`BERTH_WATCH_TIMEOUT_S`. The agent then heartbeats (the reply is still the one
complete desired state) or watches again.

Why a separate asyncio process (`uvicorn portal.agentapi.watch:app`) rather than a
view: a waiting request holds a gunicorn thread for its whole wait, and 2,000
agents would need 2,000 threads (and as many database connections once those
threads served other requests). Here a wait is a coroutine and an Event: no thread,
no database (the ticket is signed, the version is in Redis). One Redis subscription
per process wakes every waiter of a node. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from urllib.parse import parse_qs

log = logging.getLogger("portal.agentapi.watch")

MAX_SINCE = 2**63 - 1
REDIS_CONNECTIONS = 16


class Watch:
    """The ASGI application; started lazily on the first request (or the lifespan)."""

    def __init__(self) -> None:
        self.waiters: dict[int, set[asyncio.Event]] = {}
        self._redis = None
        self._listener: asyncio.Task | None = None
        self._started = False
        self.listening = asyncio.Event()  # subscribed to the wake channel

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._start()
            try:
                status, body = await self._answer(scope)
            except asyncio.CancelledError:
                # The server is stopping: uvicorn cancels the watches still waiting when
                # its --timeout-graceful-shutdown is up. Each is answered as when Redis is
                # away (the agent heartbeats, then watches the next process), instead of
                # ending in a traceback per waiting agent in the log.
                status, body = (
                    503,
                    _error("unavailable", "The watch is restarting; heartbeat instead."),
                )
            await _send_json(send, status, body)

    # -- life -----------------------------------------------------------------------

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self._start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        import django
        import redis.asyncio as aioredis
        from django.conf import settings

        django.setup()
        url = settings.BERTH["REDIS_URL"]
        if not url:
            raise RuntimeError("the agents' watch needs Redis: set REDIS_URL")
        # A bounded pool that makes a request wait for a connection: 2,000 agents watching
        # again at once must queue for Redis, not fail (an unbounded burst hit redis-py's
        # connection limit and answered 503s).
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=REDIS_CONNECTIONS, timeout=10, socket_connect_timeout=2
        )
        self._redis = aioredis.Redis(connection_pool=pool)
        self._timeout_s = settings.BERTH["WATCH_TIMEOUT_S"]
        self._listener = asyncio.create_task(self._listen())

    async def close(self) -> None:
        if self._listener:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        if self._redis is not None:
            await self._redis.aclose()

    # -- one request ----------------------------------------------------------------

    async def _answer(self, scope) -> tuple[int, dict]:
        from portal.core.wake import ticket_node

        if scope["method"] != "GET":
            return 405, _error("method_not_allowed", "The watch answers GET only.")
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        node_id = ticket_node(auth[7:].strip()) if auth.startswith("Bearer ") else None
        if node_id is None:
            return 401, _error("unauthenticated", "Missing, forged or expired watch ticket.")
        since = _since(scope.get("query_string", b""))
        if since is None:
            return 400, _error("invalid", "`since` must be a version (an integer ≥ 0).")
        try:
            changed, version = await self.wait(node_id, since, self._timeout_s)
        except Exception:  # noqa: BLE001 — Redis away: the agent falls back to its beat
            log.warning("cannot read node %s's version", node_id, exc_info=True)
            return 503, _error("unavailable", "The watch cannot reach Redis; heartbeat instead.")
        return 200, {"changed": changed, "version": version}

    async def wait(self, node_id: int, since: int, timeout_s: float) -> tuple[bool, int]:
        """Return (changed, version) once the node's version differs from `since`, or
        (False, version) after `timeout_s`. The waiter is registered before the version
        is read, so a bump between the two still wakes it."""
        event = asyncio.Event()
        self.waiters.setdefault(node_id, set()).add(event)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                event.clear()
                version = await self._version(node_id)
                left = deadline - loop.time()
                if version != since or left <= 0:
                    return version != since, version
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            waiting = self.waiters.get(node_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.waiters[node_id]

    async def _version(self, node_id: int) -> int:
        from portal.core.wake import VERSION_KEY

        return int(await self._redis.get(VERSION_KEY.format(node_id)) or 0)

    # -- wake messages --------------------------------------------------------------

    async def _listen(self) -> None:
        """Follow the wake channel for good; after a lost subscription wake every waiter
        (each re-reads its version, so a message missed meanwhile is not lost)."""
        from portal.core.wake import CHANNEL

        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self.listening.set()
                    self._wake_all()
                    async for message in pubsub.listen():
                        if message["type"] == "message":
                            self._wake(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 — keep following; waiters time out meanwhile
                self.listening.clear()
                log.warning("lost the wake channel; subscribing again", exc_info=True)
                await asyncio.sleep(1.0)

    def _wake(self, data: bytes) -> None:
        for part in data.split(b","):
            if part.strip().isdigit():
                for event in self.waiters.get(int(part), ()):
                    event.set()

    def _wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()


def _since(query: bytes) -> int | None:
    values = parse_qs(query.decode("latin-1")).get("since", ["0"])
    text = values[0]
    if not text.isascii() or not text.isdigit() or int(text) > MAX_SINCE:
        return None
    return int(text)


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "detail": {}}}


async def _send_json(send, status: int, body: dict) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


app = Watch()

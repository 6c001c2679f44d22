"""A small portal speaking the agent protocol over real HTTP, with a scripted desired state.

Tests set ``run`` / ``stop`` entries, queue failing replies, revoke tokens,
or shut the server down, and read back every request the agent made.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


@dataclass
class Scripted:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class FakePortal:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.run: dict[str, dict[str, Any]] = {}
        self.stop: dict[str, dict[str, Any]] = {}
        self.auto_ack = True
        self.heartbeat_interval_s = 0.1
        self.disconnect_limit_s = 60.0
        self.node_tokens = {"bnt_good"}
        self.bootstrap_tokens = {"bbt_ok"}
        self.scripted: deque[Scripted] = deque()
        # Rotation as the portal does it (docs/protocol.md, "Rotation"): the token a rotation
        # replaced keeps working until the new one is used; a rotation by it replaces only
        # the unproven new one. Scripted answers go to rotations; "lost" commits the
        # rotation and answers 502, as a proxy whose backend's reply was lost would.
        self.previous_token: str | None = None
        self.unproven_token: str | None = None
        self.rotation_scripted: deque[Scripted | str] = deque()
        self.issued = 0
        self.requests: list[Request] = []
        self.unknown_keys: set[str] = set()
        self.closed = False
        # The watch (docs/protocol.md 2a): None answers heartbeats as a portal without one.
        self.watch_version: int | None = None
        self.watch_timeout_s = 2.0
        self._watch_changed = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    # -- test helpers -------------------------------------------------------

    def script(self, status: int, body: dict[str, Any] | None = None, **headers: str) -> None:
        """Answer the next heartbeat with this instead of the desired state."""
        self.scripted.append(
            Scripted(status, body or {"error": {"code": "x", "message": "scripted"}}, headers)
        )

    def script_rotation(self, status: int | str, **headers: str) -> None:
        """Answer the next rotation with this status (or "lost": rotate, then answer 502)."""
        if isinstance(status, str):
            self.rotation_scripted.append(status)
        else:
            body = {"error": {"code": "x", "message": "scripted"}}
            self.rotation_scripted.append(Scripted(status, body, headers))

    def bump_watch(self) -> None:
        """The node's desired state changed: answer the waiting watch now."""
        with self._watch_changed:
            self.watch_version = (self.watch_version or 0) + 1
            self._watch_changed.notify_all()

    def watches(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if "/watch" in r.path]

    def heartbeats(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith("/heartbeat")]

    def accepted_heartbeats(self) -> list[Request]:
        return [r for r in self.heartbeats() if r.headers.get("X-Fake-Status") == "200"]

    def last_report(self, key: str) -> dict[str, Any] | None:
        """The latest accepted report of one worker."""
        for request in reversed(self.accepted_heartbeats()):
            for worker in request.body.get("workers", []):
                if worker["key"] == key:
                    return worker
        return None

    def close(self) -> None:
        """Take the portal away: later requests get "connection refused"."""
        if not self.closed:
            self.closed = True
            self._server.shutdown()
            self._server.server_close()

    # -- protocol -----------------------------------------------------------

    def handle(
        self, path: str, headers: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, dict, dict]:
        if path == "/api/agent/v1/register":
            if headers.get("Authorization", "").startswith("Bearer "):
                return self._rotate(headers, body)
            return self._register(body)
        if path == "/api/agent/v1/heartbeat":
            return self._heartbeat(headers, body)
        return 404, {"error": {"code": "not_found", "message": path}}, {}

    def _register(self, body: dict[str, Any]) -> tuple[int, dict, dict]:
        if body.get("bootstrap_token") not in self.bootstrap_tokens:
            return 401, {"error": {"code": "bad_token", "message": "unknown bootstrap token"}}, {}
        token = f"bnt_{body['hostname']}"
        self.node_tokens.add(token)
        reply = {
            "node_id": 7,
            "node_token": token,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "disconnect_limit_s": self.disconnect_limit_s,
        }
        return 201, reply, {}

    def _rotate(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict, dict]:
        token = headers["Authorization"].removeprefix("Bearer ")
        if token not in self.node_tokens:
            return 401, {"error": {"code": "bad_token", "message": "unknown node token"}}, {}
        scripted = self.rotation_scripted.popleft() if self.rotation_scripted else None
        if isinstance(scripted, Scripted):
            return scripted.status, scripted.body, scripted.headers
        if token == self.previous_token:  # the agent never got the last reply
            self.node_tokens.discard(self.unproven_token)
        else:
            self.previous_token = token
        self.issued += 1
        self.unproven_token = f"bnt_rotated_{self.issued}"
        self.node_tokens.add(self.unproven_token)
        if scripted == "lost":
            return 502, {"error": {"code": "bad_gateway", "message": "reply lost"}}, {}
        reply = {"node_id": 7, "node_token": self.unproven_token, "heartbeat_interval_s": 0.1}
        return 201, reply, {}

    def rotations(self) -> list[Request]:
        with self.lock:
            return [
                r
                for r in self.requests
                if r.path.endswith("/register") and "Authorization" in r.headers
            ]

    def _heartbeat(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict, dict]:
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.node_tokens:
            return 401, {"error": {"code": "bad_token", "message": "invalid node token"}}, {}
        if token == self.unproven_token:  # its first use retires the one it replaced
            self.node_tokens.discard(self.previous_token)
            self.previous_token = self.unproven_token = None
        unknown = [w["key"] for w in body["workers"] if w["key"] in self.unknown_keys]
        if unknown:
            # The portal's own wording (portal/core/actions/heartbeat.py).
            error = {
                "code": "protocol",
                "message": "The heartbeat reports workers that are not assigned to this node.",
                "fields": {"workers": [f"Not this node's worker: {key}" for key in unknown]},
            }
            return 400, {"error": error}, {}
        if self.scripted:
            scripted = self.scripted.popleft()
            return scripted.status, scripted.body, scripted.headers
        ack = [w["key"] for w in body["workers"] if w["state"] in ("exited", "failed_to_start")]
        reply = {
            "node": {"id": 7, "state": "ready", "cordon": "none"},
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "disconnect_limit_s": self.disconnect_limit_s,
            "run": list(self.run.values()),
            "stop": list(self.stop.values()),
            "ack": ack if self.auto_ack else [],
        }
        if self.watch_version is not None:
            reply["watch"] = {
                "url": "/api/agent/v1/watch",
                "ticket": "wt_good",
                "version": self.watch_version,
                "timeout_s": self.watch_timeout_s,
            }
        return 200, reply, {}

    def watch(self, since: int) -> tuple[int, dict]:
        """Wait until the version moves past `since` or the timeout passes (not under `lock`)."""
        with self._watch_changed:
            self._watch_changed.wait_for(
                lambda: self.watch_version != since, timeout=self.watch_timeout_s
            )
            return 200, {"changed": self.watch_version != since, "version": self.watch_version}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"{}")
                headers = dict(self.headers.items())
                with portal.lock:
                    status, reply, extra = portal.handle(self.path, headers, body)
                    headers["X-Fake-Status"] = str(status)
                    portal.requests.append(Request(self.path, headers, body, time.monotonic()))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                since = int(query.removeprefix("since=") or 0)
                headers = dict(self.headers.items())
                with portal.lock:
                    portal.requests.append(
                        Request(path, headers, {"since": since}, time.monotonic())
                    )
                status, reply = portal.watch(since) if path.endswith("/watch") else (404, {})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def run_entry(
    key: str, command: list[str], *, gpus: list[str] = (), world_size: int = 1, **extra: Any
) -> dict:
    job, attempt, rank = (int(part) for part in key.split("."))
    entry = {
        "key": key,
        "job_id": job,
        "attempt": attempt,
        "rank": rank,
        "world_size": max(world_size, rank + 1),
        "image": "busybox",
        "command": command,
        "env": {},
        "gpu_uuids": list(gpus),
        "master_addr": "gpu-node-05",
        "master_port": 29500,
        "max_runtime_s": 3600,
    }
    entry.update(extra)
    return entry

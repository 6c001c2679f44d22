"""A real local HTTP server that receives webhooks: what it was sent, and answers
scripted per request (a status code, or a delay longer than the sender waits)."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    answers: deque = field(default_factory=deque)  # (status, delay_s) per request; then 200

    def answer(self, *statuses: int, delay: float = 0.0) -> None:
        self.answers.extend((status, delay) for status in statuses)


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self):  # noqa: N802 — the name http.server calls
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        self.receiver.received.append(Received(self.path, dict(self.headers.items()), body))
        status, delay = self.receiver.answers.popleft() if self.receiver.answers else (200, 0.0)
        time.sleep(delay)
        payload = b"ok" if status < 300 else b"receiver says no"
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the sender gave up waiting

    def log_message(self, *args):
        pass


def start_receiver():
    """Start a receiver on 127.0.0.1; return (receiver, stop)."""
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_port}/hooks/berth")
    handler.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()

    return receiver, stop

"""What the CLI retries, against a stub portal that fails on purpose: reads and
keyed submissions are retried, a bulk submission that may have been processed is not."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from berthcli import exitcodes
from berthcli.commands import _local


class Stub(BaseHTTPRequestHandler):
    """Answers every request with the next (status, body, headers) of `script`."""

    script: list = []
    seen: list = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.seen.append((self.command, self.path, dict(self.headers), body))
        status, payload, headers = self.script.pop(0) if self.script else (500, {}, {})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def stub(monkeypatch, home):
    Stub.script, Stub.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("BERTH_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("BERTH_TOKEN", "bat_stub")
    monkeypatch.setenv("BERTH_RETRIES", "3")
    yield Stub
    server.shutdown()


RECEIPT = {"id": 7, "team": "alpha"}


def test_a_submission_is_retried_with_the_same_idempotency_key(berth, stub, waits):
    stub.script = [(502, {}, {}), (503, {}, {"Retry-After": "4"}), (201, RECEIPT, {})]

    result = berth("submit", "--parsable", "--flavor", "x", "--image", "i", "--", "run")

    assert result.code == 0 and result.out == "7\n"
    keys = {headers["Idempotency-Key"] for _, _, headers, _ in stub.seen}
    assert len(stub.seen) == 3 and len(keys) == 1  # one key: the server can dedupe
    assert waits[1] >= 4  # Retry-After honoured


def test_a_bulk_submission_is_retried_under_one_idempotency_key(berth, stub, tmp_path, waits):
    """An ambiguous failure (500) may have stored the sweep: the retries carry the same
    Idempotency-Key, so the server answers with the first attempt's jobs, never a copy."""
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps([{"name": "a"}, {"name": "b"}]))
    stub.script = [(500, {}, {}), (200, {"team": "alpha", "count": 2, "ids": [7, 8]}, {})]

    result = berth("submit", "-f", spec, "--parsable")

    assert result.code == 0 and result.out == "7\n8\n"
    keys = {headers["Idempotency-Key"] for _, _, headers, _ in stub.seen}
    assert len(stub.seen) == 2 and len(keys) == 1


def test_a_bulk_submission_refused_with_429_is_retried(berth, stub, tmp_path, waits):
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps([{"name": "a"}]))
    full = {"error": {"code": "queue_full", "message": "Queue full.", "fields": {}}}
    stub.script = [
        (429, full, {"Retry-After": "30"}),
        (201, {"team": "alpha", "count": 1, "ids": [9]}, {}),
    ]

    result = berth("submit", "-f", spec, "--parsable")

    assert result.code == 0 and result.out == "9\n"
    assert waits[0] >= 30


def test_reads_give_up_after_the_retries(berth, stub, waits):
    result = berth("status", "1")
    assert result.code == exitcodes.UNAVAILABLE
    assert len(stub.seen) == 4 and len(waits) == 3  # first try + BERTH_RETRIES
    assert "500" in result.err


def test_errors_are_not_retried(berth, stub, waits):
    invalid = {
        "error": {"code": "invalid", "message": "Bad.", "fields": {"workers": ["Too many."]}}
    }
    stub.script = [(400, invalid, {})]
    result = berth("submit", "--flavor", "x", "--", "run")
    assert result.code == exitcodes.REFUSED and len(stub.seen) == 1
    assert "workers: Too many." in result.err


def test_next_links_are_followed_on_the_configured_url():
    assert (
        _local("http://internal:8000/api/v1/jobs/?limit=3&offset=3")
        == "/api/v1/jobs/?limit=3&offset=3"
    )
    assert _local(None) is None


def test_a_jobs_shape_counts_one_gpu_as_one_gpu():
    from berthcli.output import shape

    one = {"workers": 1, "gpus_per_worker": 1, "flavor": "h100", "gpus": 1}
    assert shape(one) == "1 × 1 h100 (1 GPU)"
    assert shape(one | {"workers": 2, "gpus": 2}) == "2 × 1 h100 (2 GPUs)"

"""`make run` (portal.devstack) on the zero-setup default: SQLite, the embedded broker and six
simulated nodes come up, demo jobs run, and Ctrl-C stops every process."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.services


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def rows(db: Path, sql: str) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def call(port: int, method: str, path: str, body=None, **headers) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status, json.loads(r.read())


def the_api_works_for_a_demo_user(port: int, var: Path) -> None:
    """A token made with a demo login, then used again and again: on SQLite too the
    token's times come back as the ORM reads them (it once answered 500 here)."""
    password = json.loads((var / "demo.json").read_text())["passwords"]["bob"]
    basic = "Basic " + base64.b64encode(f"bob:{password}".encode()).decode()
    status, created = call(
        port, "POST", "/api/v1/tokens/", {"name": "devstack"}, Authorization=basic
    )
    assert status == 201
    bearer = {"Authorization": f"Bearer {created['token']}"}
    for _ in range(2):
        assert call(port, "GET", "/api/v1/me/", **bearer)[1]["username"] == "bob"
    job = {"name": "smoke", "image": "busybox", "command": ["true"], "flavor": "a100-40gb"}
    for _ in range(2):
        status, receipt = call(port, "POST", "/api/v1/jobs/", job, **bearer)
        assert (status, receipt["team"], receipt["submitted_by"]) == (201, "vision", "bob")


def the_logins_say_who_is_who(text: str, var: Path) -> None:
    """Each printed login names its teams and roles, with no log line in between."""
    passwords = json.loads((var / "demo.json").read_text())["passwords"]
    block = text.split("Demo logins", 1)[1].split("Berth is running", 1)[0]
    lines = [line.split() for line in block.strip().splitlines()[1:] if line.strip()]
    logins = {words[0]: " ".join(words[2:]) for words in lines}
    assert set(logins) == set(passwords), block  # nothing else printed among them
    assert logins["alice"] == "lead of vision, viewer of nlp"
    assert logins["bob"] == "member of vision"
    assert logins["admin"].startswith("staff")
    assert "No hostname" not in text


def no_command_line_shows_the_bootstrap_token(var: Path) -> None:
    """`ps` shows every process's argv to every user: the agents get the token otherwise."""
    token = json.loads((var / "demo.json").read_text())["bootstrap_token"]
    agents = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(var).encode() in arg for arg in argv):
            agents += any(b"berth-agent" in arg for arg in argv)
            assert token.encode() not in b" ".join(argv), argv
    assert agents == 6


def test_make_run_starts_everything_on_sqlite_and_ctrl_c_stops_it(tmp_path):
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    }
    env |= {"BERTH_VAR_DIR": str(tmp_path), "BERTH_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    out = open(tmp_path / "devstack.out", "w+b")  # noqa: SIM115 — read after the process ends
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal.devstack"],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # As a shell starts a background job: SIGINT ignored. Ctrl-C must still stop it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    db = tmp_path / "berth.sqlite3"
    try:
        printed = wait_for(
            lambda: (
                b"Berth is running" in (tmp_path / "devstack.out").read_bytes()
                or proc.poll() is not None
            ),
            120,
            "the stack to come up",
        )
        text = (tmp_path / "devstack.out").read_text()
        assert printed and proc.poll() is None, text
        assert f"http://127.0.0.1:{port}/" in text and "admin" in text  # the URL and logins
        the_logins_say_who_is_who(text, tmp_path)

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10) as r:
            assert r.status == 200 and b"password" in r.read().lower()
        the_api_works_for_a_demo_user(port, tmp_path)

        ready = "SELECT count(*) FROM core_node WHERE condition = 'ready'"
        wait_for(lambda: rows(db, ready) == [(6,)], 90, "six ready demo nodes")
        no_command_line_shows_the_bootstrap_token(tmp_path)
        # The seeded history's jobs have no workers: a worker that started ran on an agent.
        started = "SELECT count(*) FROM core_worker WHERE started_at IS NOT NULL"
        wait_for(lambda: rows(db, started)[0][0] > 0, 90, "a demo job to start on an agent")
        history = "SELECT count(*) FROM core_job WHERE state IN ('succeeded', 'failed')"
        assert rows(db, history)[0][0] > 1000  # 30 days of finished jobs, seeded
        busy = "SELECT max(utilization_pct) FROM core_gpu"
        wait_for(lambda: (rows(db, busy)[0][0] or 0) > 50, 60, "a busy GPU's telemetry")
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = (tmp_path / "devstack.out").read_text()
    assert code == 0, text
    assert "stopped." in text
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert leftovers == [], f"processes still running: {leftovers}"

"""`berth` against a live test server: commands run in-process through
berthcli.main.main, as a user would type them, with their exit codes."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from berthcli import client as http
from berthcli import commands
from berthcli.main import main
from portal.core.actions.tokens import create_api_token


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty config location and no BERTH_* variables from the outside."""
    for name in ("BERTH_URL", "BERTH_TOKEN", "BERTH_RETRIES", "BERTH_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config" / "berth" / "config.json"
    monkeypatch.setenv("BERTH_CONFIG", str(path))
    return path


@pytest.fixture
def waits(monkeypatch):
    """Every sleep the CLI asks for (retry backoff, wait polling), without sleeping:
    a fake clock advances by each. A test may append callables to `waits.then`;
    each runs at the next sleep (the world changing while the CLI waits)."""

    class Waits(list):
        then: list
        clock: float = 0.0

    recorded = Waits()
    recorded.then = []

    def sleep(seconds):
        recorded.append(seconds)
        recorded.clock += seconds
        if recorded.then:
            recorded.then.pop(0)()

    monkeypatch.setattr(http, "_sleep", sleep)
    monkeypatch.setattr(commands, "_sleep", sleep)
    monkeypatch.setattr(commands, "_clock", lambda: recorded.clock)
    return recorded


@pytest.fixture
def berth(capsys, home, waits):
    def run(*args: str, stdin: str | None = None) -> Result:
        capsys.readouterr()
        if stdin is not None:
            import sys

            saved, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            code = main([str(a) for a in args])
        finally:
            if stdin is not None:
                sys.stdin = saved
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def logged_in(live_server, cluster, monkeypatch, home):
    """BERTH_URL / BERTH_TOKEN for a persona, as a CI job would set them."""

    def as_user(user, teams=None):
        _, secret = create_api_token(user, name="ci", teams=teams)
        monkeypatch.setenv("BERTH_URL", live_server.url)
        monkeypatch.setenv("BERTH_TOKEN", secret)
        return secret

    return as_user

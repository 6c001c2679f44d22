"""Fixtures of the fault-injection suite (docs/reliability.md).

The suite runs only when selected: `pytest -m faults tests/faults` (`make faults`).
Each scenario is bounded by the `timeout` of its `faults` marker (SIGALRM fails it,
and the finalizers still stop every process it started), and writes its figures
to test-artifacts/faults/<scenario>.json. On failure the logs of its processes are
copied next to them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.faults.harness import (
    ROOT,
    PgCluster,
    Processes,
    RedisServer,
    Stack,
    drop_database,
    pg_bindir,
    recreate_database,
)

ARTIFACTS = ROOT / "test-artifacts" / "faults"
DEFAULT_TIMEOUT_S = 300
_FIGURES: dict[str, dict] = {}


class ScenarioTimeout(Exception):
    pass


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    selected = "faults" in (config.option.markexpr or "")
    skip = pytest.mark.skip(reason="fault-injection suite: run with -m faults (make faults)")
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here) and not selected:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _scenario_deadline(request):
    """Fail a scenario that runs past its marker's timeout instead of hanging the suite."""
    marker = request.node.get_closest_marker("faults")
    limit = int(marker.kwargs.get("timeout", DEFAULT_TIMEOUT_S)) if marker else DEFAULT_TIMEOUT_S

    def expired(signum, frame):
        raise ScenarioTimeout(f"scenario ran past its {limit} s limit")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.failed_call = report.failed
    return report


@pytest.fixture
def procs(request, tmp_path):
    """Every process the scenario starts; all of them are stopped at the end."""
    processes = Processes()
    yield processes
    processes.close()
    if getattr(request.node, "failed_call", False):
        target = ARTIFACTS / request.node.name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True, exist_ok=True)
        for log in tmp_path.glob("*.log"):
            shutil.copy(log, target / log.name)
        for log in (tmp_path / "agents").glob("*/workers/*/output.log"):
            shutil.copy(log, target / f"worker-{log.parent.name}.log")


@pytest.fixture
def figures(request):
    """What the scenario measured; written to test-artifacts/faults/<name>.json."""
    data: dict = {"scenario": request.node.name}
    started = time.monotonic()
    yield data
    data["wall_s"] = round(time.monotonic() - started, 1)
    data["passed"] = not getattr(request.node, "failed_call", True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{request.node.name}.json").write_text(json.dumps(data, indent=2, default=str))
    _FIGURES[request.node.name] = data


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("fault scenarios: figures")
    for name, data in _FIGURES.items():
        shown = {k: v for k, v in data.items() if k != "scenario"}
        terminalreporter.write_line(f"{name}: {json.dumps(shown, default=str)}")


# --- services ------------------------------------------------------------------------------


@pytest.fixture
def shared_db_url(procs):
    """DATABASE_URL's server and database name; the database is recreated for the
    scenario and dropped after it (set BERTH_FAULTS_KEEP=1 to keep it for a look)."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_faults")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("the fault suite needs DATABASE_URL on PostgreSQL")
    yield url
    procs.close()  # nothing may still use the database
    if not os.environ.get("BERTH_FAULTS_KEEP"):
        drop_database(url)


@pytest.fixture
def shared_redis_url():
    """REDIS_URL (a database of the shared server that the suite owns: it is flushed)."""
    import redis

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/11")
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def pg_cluster(procs):
    """A PostgreSQL cluster of our own, for scenarios that stop the database."""
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    cluster = PgCluster(bindir)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        procs.close()
        cluster.destroy()


@pytest.fixture
def redis_server(procs, tmp_path):
    """A redis-server of our own, for scenarios that stop the broker."""
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server on this machine")
    server = RedisServer(procs, tmp_path)
    server.start()
    return server


@pytest.fixture
def make_stack(procs, tmp_path):
    """make_stack(db_url, redis_url, **settings): a fresh, migrated database and the
    environment of the portal's processes (BERTH_* settings as keyword arguments)."""

    def make(db_url: str, redis_url: str, **settings: str) -> Stack:
        recreate_database(db_url)
        stack = Stack(procs, tmp_path, db_url, redis_url, {k: str(v) for k, v in settings.items()})
        stack.migrate()
        return stack

    return make

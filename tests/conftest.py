"""Shared fixtures: a small cluster and named personas.

Team A ("alpha") has a lead, a member and a viewer; team B ("beta") has its own
lead, who is the outsider for everything of team A. Both teams share a cohort.
Imports of Django code stay inside the fixtures so that the scheduler and agent
tests also run without Django (`-p no:django`).
"""

from __future__ import annotations

import contextlib

import pytest

# The identity providers the SSO tests start, shared with the browser tests.
pytest_plugins = ["tests.sso.fixtures"]


@pytest.fixture
def cluster(db):
    """A fresh cluster; what web processes remember of the last one (cluster facts,
    submit grants) is forgotten, as it would be FACT_TTL_S / GRANT_TTL_S later."""
    from portal.core import grants, lookups
    from tests.factories import make_cluster

    lookups.forget()
    grants.forget()
    return make_cluster()


@pytest.fixture
def personas(cluster):
    return cluster.personas


def pytest_configure(config):
    """Fast password hashing for the test users (PBKDF2 costs ~1 s per test here)."""
    if config.pluginmanager.hasplugin("django"):
        from django.conf import settings

        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def docker_engine():
    """A real Docker engine with the busybox test image (tests/dockerd.py); skips, naming the
    cause, where none answers and none can be started."""
    from tests.dockerd import NoEngine, engine_session

    try:
        with engine_session() as engine:
            yield engine
    except NoEngine as exc:
        pytest.skip(f"no Docker engine: {exc}")


def _forget_login_failures() -> None:
    from django.core.cache import cache

    backend = getattr(cache, "_cache", None)
    if backend is not None and hasattr(backend, "get_client"):
        client = backend.get_client(write=True)
        for key in client.scan_iter(match="*berth:login-failures:*"):
            client.delete(key)
    else:
        cache.clear()


@pytest.fixture(scope="session", autouse=True)
def _no_lockouts_from_earlier_runs(request):
    """Login-failure counters live in the cache for a window (15 minutes by default):
    the personas of an earlier run within it must not start locked out."""
    if request.config.pluginmanager.hasplugin("django"):
        from django.conf import settings

        if settings.configured:
            with contextlib.suppress(Exception):  # no cache reachable: nothing to forget
                _forget_login_failures()
    yield


@pytest.fixture
def login_throttle(settings):
    """A small login-failure limit, and counters forgotten afterwards: the cache outlives
    the test's rollback, and a persona locked out here must not be locked out in the next."""
    settings.BERTH = settings.BERTH | {"LOGIN_FAILURES": "3/15min"}
    _forget_login_failures()
    yield 3
    _forget_login_failures()

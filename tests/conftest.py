"""Shared fixtures: a small cluster and named personas.

Team A ("alpha") has a lead, a member and a viewer; team B ("beta") has its own
lead, who is the outsider for everything of team A. Both teams share a cohort.
Imports of Django code stay inside the fixtures so that the scheduler and agent
tests also run without Django (`-p no:django`).
"""

from __future__ import annotations

import pytest

# The identity providers the SSO tests start, shared with the browser tests.
pytest_plugins = ["tests.sso.fixtures"]


@pytest.fixture
def cluster(db):
    from tests.factories import make_cluster

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

"""Shared fixtures: a small cluster and named personas.

Team A ("alpha") has a lead, a member and a viewer; team B ("beta") has its own
lead, who is the outsider for everything of team A. Both teams share a cohort.
Imports of Django code stay inside the fixtures so that the scheduler and agent
tests also run without Django (`-p no:django`).
"""

from __future__ import annotations

import pytest


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

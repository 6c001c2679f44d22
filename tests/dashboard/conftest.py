"""Fixtures for the dashboard's page tests: the lived-in story and logged-in clients."""

from __future__ import annotations

import pytest

from tests.dashboard.story import Story, build_story


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The personas' passwords are hashed once per test; PBKDF2 would dominate the run."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def story(cluster) -> Story:
    return build_story(cluster)


@pytest.fixture
def login(client):
    """login(user) → the test client, logged in as that persona."""

    def _login(user):
        client.force_login(user)
        return client

    return _login

"""tests/workers.py: the second and later test processes get a Redis database and a
var/ folder of their own; the first keeps what it was given."""

from __future__ import annotations

import pytest

from tests.workers import _own

ENV = {"REDIS_URL": "redis://127.0.0.1:6379/15", "BERTH_VAR_DIR": "/srv/var"}


def test_the_first_process_and_a_run_without_xdist_keep_their_environment():
    assert _own("gw0", ENV) == {}
    assert _own("", ENV) == {}


def test_later_processes_get_their_own_redis_database_and_var_folder():
    assert _own("gw1", ENV) == {
        "REDIS_URL": "redis://127.0.0.1:6379/14",
        "BERTH_VAR_DIR": "/srv/var/xdist-gw1",
    }
    both = ENV | {"CELERY_BROKER_URL": "redis://broker:6380"}
    changed = _own("gw3", both)
    assert changed["REDIS_URL"] == "redis://127.0.0.1:6379/12"
    assert changed["CELERY_BROKER_URL"] == "redis://broker:6380/13"  # no number: database 0
    # on the same server, the broker shares the process's database: shifted apart, gw1's
    # broker (0 - 1) would land on gw0's cache (15), which the Celery tests flush
    same = ENV | {"CELERY_BROKER_URL": "redis://localhost:6379/"}
    assert _own("gw1", same)["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/14"


def test_a_url_it_cannot_read_is_left_shared_with_a_warning():
    with pytest.warns(UserWarning, match="shared by every test process"):
        changed = _own("gw1", {"REDIS_URL": "unix:///run/redis.sock?db=3"})
    assert "REDIS_URL" not in changed


def test_without_redis_only_the_var_folder_changes():
    assert set(_own("gw1", {})) == {"BERTH_VAR_DIR"}
    assert _own("gw1", {})["BERTH_VAR_DIR"].endswith("/var/xdist-gw1")

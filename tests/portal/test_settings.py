"""Configuration fails loudly, naming the variable; production settings pass check --deploy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROD_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "x7$k2!vQ9#pL4@wZ8^nR1&bT6*yU3(eI5)oA0_sD-fG+hJ=kL-m2n3b4v5c6",
    "DJANGO_ALLOWED_HOSTS": "berth.example.com",
}


def _django(env: dict, *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "BERTH_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DJANGO_DEBUG", "maybe", "DJANGO_DEBUG must be a boolean"),
        ("BERTH_SCHEDULE_INTERVAL_S", "fast", "BERTH_SCHEDULE_INTERVAL_S must be a number"),
        ("BERTH_SCHEDULE_INTERVAL_S", "0.1", "BERTH_SCHEDULE_INTERVAL_S must be ≥ 0.5"),
        ("BERTH_POLICY", "lottery", "BERTH_POLICY must be one of"),
        ("BERTH_DEFAULT_MAX_RESTARTS", "-2", "BERTH_DEFAULT_MAX_RESTARTS must be ≥ 0"),
        ("DATABASE_URL", "nosuchdb://x", "DATABASE_URL is not a valid database URL"),
        ("BERTH_AGENT_DISCONNECT_LIMIT_S", "500", "BERTH_AGENT_DISCONNECT_LIMIT_S must be below"),
        ("BERTH_NODE_TOKEN_OVERLAP_S", "0", "BERTH_NODE_TOKEN_OVERLAP_S must be ≥ 300"),
        ("BERTH_NODE_TOKEN_OVERLAP_S", "1e11", "BERTH_NODE_TOKEN_OVERLAP_S must be ≤ 2592000"),
        ("BERTH_NODE_TOKEN_OVERLAP_S", "inf", "BERTH_NODE_TOKEN_OVERLAP_S must be a finite number"),
        ("BERTH_HEARTBEAT_INTERVAL_S", "nan", "BERTH_HEARTBEAT_INTERVAL_S must be a finite number"),
    ],
)
def test_bad_environment_value_fails_with_the_variable_named(name, value, message):
    result = _django({name: value}, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_production_needs_a_real_secret_key():
    result = _django(PROD_ENV | {"DJANGO_SECRET_KEY": "short"}, "check")
    assert result.returncode != 0 and "DJANGO_SECRET_KEY" in result.stderr


def test_production_settings_pass_check_deploy_without_warnings():
    result = _django(PROD_ENV, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_makemigrations_is_clean():
    result = _django({}, "makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("value", "threshold"), [("1", 5), ("0", None)])
def test_prepared_statements_can_be_turned_off_for_old_pgbouncers(value, threshold):
    show = "from django.conf import settings; print(settings.DATABASES['default']['OPTIONS'])"
    result = _django(
        {"DATABASE_URL": "postgres://u@db.example:5432/berth", "DB_PREPARED_STATEMENTS": value},
        "shell",
        "-c",
        show,
    )
    assert result.returncode == 0, result.stderr
    assert f"'prepare_threshold': {threshold}" in result.stdout or (
        threshold is None and "prepare_threshold" not in result.stdout
    )


def test_the_token_overlap_must_outlast_ten_beats():
    result = _django(
        {"BERTH_HEARTBEAT_INTERVAL_S": "60", "BERTH_NODE_TOKEN_OVERLAP_S": "500"}, "check"
    )
    assert result.returncode != 0
    assert "BERTH_NODE_TOKEN_OVERLAP_S must be at least 10 x BERTH_HEARTBEAT_INTERVAL_S" in (
        result.stderr
    )
    assert (
        _django(
            {"BERTH_HEARTBEAT_INTERVAL_S": "60", "BERTH_NODE_TOKEN_OVERLAP_S": "600"}, "check"
        ).returncode
        == 0
    )

"""``berth-agent`` as an operator meets it: one clear line and a meaningful exit code, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.config import ConfigError, parse_config
from tests.agents.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def agent(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "agents", *args],
        env=full_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def run_agent(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = agent(*args, env=env)
    _, stderr = proc.communicate(timeout=30)
    return proc.returncode, stderr


def test_config_comes_from_flags_over_environment(tmp_path):
    env = {
        "BERTH_PORTAL_URL": "https://portal.example/",
        "BERTH_HEARTBEAT_INTERVAL": "10",
        "BERTH_RUNTIME": "docker",
        "BERTH_STOP_WORKERS_ON_EXIT": "yes",
        "BERTH_RACK": "r1",
        "BERTH_PULL": "always",
    }
    argv = ["--heartbeat-interval", "2.5", "--state-dir", str(tmp_path), "--pull", "never"]
    config = parse_config([*argv, "--docker-gpus", "none"], env)
    assert config.portal_url == "https://portal.example"
    assert config.heartbeat_interval_s == 2.5
    assert config.runtime == "docker"
    assert (config.pull, config.docker_gpus) == ("never", "none")
    assert parse_config([], env).pull == "always"
    assert parse_config([], env).docker_gpus == "request"
    assert config.stop_workers_on_exit is True
    assert config.rack == "r1"
    assert config.token_path == tmp_path / "node_token"
    assert config.hostname  # defaults to this host's name


def test_the_token_max_age_defaults_to_30_days_and_0_turns_rotation_off():
    env = {"BERTH_PORTAL_URL": "https://portal.example"}
    assert parse_config([], env).token_max_age_s == 30 * 24 * 3600
    assert parse_config([], env | {"BERTH_TOKEN_MAX_AGE": "0"}).token_max_age_s == 0
    assert parse_config(["--token-max-age", "3600"], env).token_max_age_s == 3600


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {}, "the portal URL is required"),
        (["--portal-url", "portal:8000"], {}, "invalid --portal-url / BERTH_PORTAL_URL"),
        (
            [],
            {"BERTH_PORTAL_URL": "http://p:1", "BERTH_HEARTBEAT_INTERVAL": "abc"},
            "BERTH_HEARTBEAT_INTERVAL: 'abc'",
        ),
        (
            [],
            {"BERTH_PORTAL_URL": "http://p:1", "BERTH_DISCONNECT_LIMIT": "-5"},
            "must be a number > 0",
        ),
        (
            ["--runtime", "podman"],
            {"BERTH_PORTAL_URL": "http://p:1"},
            "must be one of process, docker, fake",
        ),
        (["--max-starts", "0"], {"BERTH_PORTAL_URL": "http://p:1"}, "invalid --max-starts"),
        (
            ["--pull", "sometimes"],
            {"BERTH_PORTAL_URL": "http://p:1"},
            "invalid --pull / BERTH_PULL: 'sometimes': must be one of missing, always, never",
        ),
        (
            [],
            {"BERTH_PORTAL_URL": "http://p:1", "BERTH_DOCKER_GPUS": "cdi"},
            "must be one of request, none",
        ),
        (
            ["--token-max-age", "-1"],
            {"BERTH_PORTAL_URL": "http://p:1"},
            "invalid --token-max-age / BERTH_TOKEN_MAX_AGE: '-1': must be a number >= 0",
        ),
        (
            [],
            {"BERTH_PORTAL_URL": "http://p:1", "BERTH_TOKEN_MAX_AGE": "monthly"},
            "invalid --token-max-age / BERTH_TOKEN_MAX_AGE: 'monthly'",
        ),
        (
            [],
            {"BERTH_PORTAL_URL": "http://p:1", "BERTH_STOP_WORKERS_ON_EXIT": "maybe"},
            "BERTH_STOP_WORKERS_ON_EXIT",
        ),
    ],
)
def test_bad_settings_raise_one_clear_error(args, env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_config(args, env)


def test_bad_setting_exits_2_with_one_line(tmp_path):
    code, stderr = run_agent(
        "--portal-url", "http://p:1", "--heartbeat-interval", "soon", "--state-dir", str(tmp_path)
    )
    assert code == 2
    assert stderr.strip().splitlines() == [
        "berth-agent: error: invalid --heartbeat-interval / BERTH_HEARTBEAT_INTERVAL: 'soon': "
        "could not convert string to float: 'soon'"
    ]


def test_no_token_and_no_bootstrap_token_exits_2(tmp_path):
    code, stderr = run_agent("--portal-url", "http://p:1", "--state-dir", str(tmp_path))
    assert code == 2
    assert "no node token" in stderr and "Traceback" not in stderr


def test_unusable_state_dir_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, stderr = run_agent(
        "--portal-url", "http://p:1", "--state-dir", str(blocker / "state"), "--node-token", "t"
    )
    assert code == 2
    assert "cannot use the state directory" in stderr and "Traceback" not in stderr


def test_missing_nvml_exits_3_with_a_clear_message(tmp_path):
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has a working NVIDIA driver")
    except pynvml.NVMLError:
        pass
    code, stderr = run_agent(
        "--portal-url", "http://p:1", "--state-dir", str(tmp_path), "--node-token", "t"
    )
    assert code == 3
    assert (
        "NVML unavailable: libnvidia-ml.so.1 not found — is the NVIDIA driver installed?" in stderr
    )
    assert "--nvml fake" in stderr and "Traceback" not in stderr


def test_missing_docker_engine_exits_3(tmp_path):
    code, stderr = run_agent(
        "--portal-url",
        "http://p:1",
        "--state-dir",
        str(tmp_path),
        "--node-token",
        "t",
        "--nvml",
        "fake",
        "--runtime",
        "docker",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )
    assert code == 3
    assert "Docker engine unavailable" in stderr and "Traceback" not in stderr


def test_registers_heartbeats_logs_json_and_exits_0_on_sigterm(portal, tmp_path):
    proc = agent(
        "--nvml",
        "fake",
        "--runtime",
        "fake",
        "--fake-gpus",
        "4",
        "--log-format",
        "json",
        "--state-dir",
        str(tmp_path),
        "--hostname",
        "gpu-node-09",
        env={"BERTH_PORTAL_URL": portal.url, "BERTH_BOOTSTRAP_TOKEN": "bbt_ok"},
    )
    try:
        wait_until(lambda: portal.accepted_heartbeats(), 20, "the agent to heartbeat")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert len(portal.accepted_heartbeats()[0].body["gpus"]) == 4
    lines = [json.loads(line) for line in stderr.splitlines()]
    assert {"ts", "level", "logger", "msg"} <= set(lines[0])
    assert any("registered as node 7" in line["msg"] for line in lines)
    assert any("received SIGTERM" in line["msg"] for line in lines)

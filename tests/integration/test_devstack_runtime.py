"""`make run` with BERTH_DEMO_RUNTIME=docker: the demo nodes' agents use the Docker runtime
when an engine answers (the real one of tests/dockerd.py), else the process runtime. And the
torchrun example job of docs/agent.md is a job the portal accepts."""

from __future__ import annotations

import os

import pytest

from portal.devstack import PROCESS_RUNTIME, ROOT, agent_argv, demo_runtime

# One Docker engine serves the test processes (make test: pytest-xdist); its tests run in
# one of them, in turn, so containers named by job id and labelled by node never meet
# (tests/workers.py).
pytestmark = pytest.mark.xdist_group("docker")

NODE = ("demo-h100-1", "rack-1", "block-1", "NVIDIA H100 80GB HBM3", 81559)


def test_the_process_runtime_stays_the_default(tmp_path):
    assert demo_runtime({}) == PROCESS_RUNTIME
    argv = agent_argv("http://127.0.0.1:8000", NODE, tmp_path)
    assert argv[argv.index("--runtime") + 1] == "process"


def test_docker_is_used_when_an_engine_answers(docker_engine, tmp_path):
    runtime = demo_runtime({"BERTH_DEMO_RUNTIME": "docker", "DOCKER_HOST": docker_engine.host})
    argv = agent_argv("http://127.0.0.1:8000", NODE, tmp_path, runtime)
    assert argv[argv.index("--runtime") + 1] == "docker"
    assert argv[argv.index("--docker-gpus") + 1] == "none"  # simulated GPUs are not devices


def test_without_an_engine_the_demo_says_so_and_uses_processes(tmp_path, capsys):
    nowhere = {"BERTH_DEMO_RUNTIME": "docker", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    assert demo_runtime(nowhere) == PROCESS_RUNTIME
    assert "no Docker engine answers" in capsys.readouterr().out


def test_an_unknown_demo_runtime_is_refused():
    with pytest.raises(SystemExit, match="must be process or docker"):
        demo_runtime({**os.environ, "BERTH_DEMO_RUNTIME": "podman"})


def test_the_torchrun_example_is_a_valid_gang(cluster):
    from berthcli.jobfile import load_file, normalise
    from portal.core.jobspec import clean_job_spec

    _, (job,), _ = load_file(str(ROOT / "docs" / "examples" / "torchrun-gang.yaml"))
    spec = clean_job_spec(cluster.team_a, normalise(job))
    assert (spec.workers, spec.gpus_per_worker, spec.checkpoint_signal) == (2, 8, "SIGTERM")
    assert spec.command[:2] == ["sh", "-c"] and '--node-rank="$RANK"' in spec.command[2]

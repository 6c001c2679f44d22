"""The agent stays standalone: no Django, portal or scheduler imports, and the GPU check needs no requests."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT_FILES = sorted((ROOT / "agents").rglob("*.py"))


@pytest.mark.parametrize("path", AGENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_agents_never_import_the_portal_side(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in {"django", "rest_framework", "portal", "scheduler"}, (
                name
            )


def test_shim_is_posix_sh_and_ships_with_the_agent():
    """agents/shim.sh runs under /bin/sh (dash here, no bashisms it would reject) and is
    package data, so `pip install` puts it next to the runtime that starts it."""
    shim = ROOT / "agents" / "shim.sh"
    subprocess.run(["/bin/sh", "-n", str(shim)], check=True)
    if shutil.which("dash"):
        subprocess.run(["dash", "-n", str(shim)], check=True)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "shim.sh" in pyproject["tool"]["setuptools"]["package-data"]["agents"]


def test_gpu_check_runs_without_requests_or_docker():
    code = "import sys; sys.modules['requests'] = None; sys.modules['docker'] = None; import agents.selfcheck"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_gpu_check_fails_cleanly_without_a_gpu():
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has a working NVIDIA driver")
    except pynvml.NVMLError:
        pass
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "NVML unavailable: libnvidia-ml.so.1 not found" in result.stderr
    assert "Traceback" not in result.stderr

"""The agent stays standalone: no Django, portal or scheduler imports, and the GPU check needs no requests."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def test_shim_uses_only_the_standard_library():
    tree = ast.parse((ROOT / "agents" / "shim.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


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

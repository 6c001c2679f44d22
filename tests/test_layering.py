"""The folders are the dependency graph: scheduler/, agents/, berthcli/ and berthtext/
never import Django or the portal, and the portal never imports its CLI."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules(package: str) -> list[str]:
    path = ROOT / package
    return [package] + [
        f"{package}.{m.name}"
        for m in pkgutil.walk_packages([str(path)])
        if not m.name.startswith("_")
    ]


@pytest.mark.parametrize("package", ["scheduler", "agents", "berthcli", "berthtext"])
def test_package_imports_no_django_or_portal(package):
    modules = _modules(package)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('django', 'portal', 'rest_framework', 'celery'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={"PATH": ""}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"


def test_the_portal_never_imports_the_cli():
    """What both say alike is berthtext/, what only the server knows goes over the API."""
    found = []
    for path in sorted((ROOT / "portal").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}"
                for n in names
                if n.split(".")[0] == "berthcli"
            ]
    assert found == []


# Where a cursor may run SQL text: the statements module, db.py's generic writers,
# and two one-liners that are no query of the data (readiness, the pass's lock).
SQL_HOMES = {
    "portal/core/statements.py",
    "portal/core/db.py",
    "portal/ops/readiness.py",
    "portal/core/scheduling/__init__.py",
}


def test_hand_written_sql_lives_in_the_statements_module():
    found = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "portal").rglob("*.py")
        if "migrations" not in path.parts
        and ("cursor.execute(" in (text := path.read_text()) or "server_binding_cursor()" in text)
    )
    assert set(found) <= SQL_HOMES, sorted(set(found) - SQL_HOMES)


def test_the_core_sends_tasks_by_name_and_never_imports_them():
    """tasks → scheduling → apply → actions must not close into a circle: the actions
    send the pass by its name, so no core module imports the task module, at any level."""
    found = []
    for path in sorted((ROOT / "portal" / "core").rglob("*.py")):
        if path.name == "tasks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            if "portal.core.tasks" in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []

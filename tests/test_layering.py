"""The folders are the dependency graph: scheduler/ and agents/ never import Django."""

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


@pytest.mark.parametrize("package", ["scheduler", "agents"])
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

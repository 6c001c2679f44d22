"""The scheduler core is pure: no Django, no clock, no I/O, no randomness."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import scheduler

PACKAGE = Path(scheduler.__file__).parent
MODULES = sorted(f"scheduler.{m.name}" for m in pkgutil.iter_modules([str(PACKAGE)]))
FORBIDDEN = {
    "django",
    "portal",
    "rest_framework",
    "celery",
    "time",
    "datetime",
    "random",
    "os",
    "io",
    "socket",
    "pathlib",
    "logging",
    "threading",
    "subprocess",
}


def test_every_module_imports_without_django():
    code = (
        "import importlib, sys\n"
        f"for name in {['scheduler', *MODULES]!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted(n for n in sys.modules if n.split('.')[0] in ('django', 'portal'))))\n"
    )
    root = PACKAGE.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env={"PATH": ""}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"scheduler pulled in {result.stdout.strip()}"
    assert len(MODULES) >= 10, MODULES  # the walk really found the package


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_imports_a_clock_randomness_or_io():
    for path in sorted(PACKAGE.glob("*.py")):
        bad = imported_names(path) & FORBIDDEN
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_forbidden_list_catches_an_offender(tmp_path):
    offender = tmp_path / "bad.py"
    offender.write_text("import time\nfrom django.db import models\n")
    assert imported_names(offender) & FORBIDDEN == {"time", "django"}

"""Each test process of `make test` (pytest-xdist's `-n`) gets its own Redis database
and its own var/ folder; loaded with `-p tests.workers`, before Django reads its settings.

pytest-django gives each process its own test database (``test_berth_gw1``); nothing
gives it the rest. Without this the processes share Redis database 15, where the
Celery tests flush the database and the login tests forget every lockout counter
(a test of the other process then loses what it just wrote), and under SQLite they
share var/'s file cache and filesystem broker. Process gw0 keeps what it was given;
process gwK uses Redis database D - K (mod 16) and var/xdist-gwK; a broker on the
same Redis server uses that database too, and a URL it cannot read is left shared, with a
warning.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path


def _own(worker: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment variables that worker `worker` ("gwK") changes."""
    match = re.fullmatch(r"gw(\d+)", worker)
    k = int(match.group(1)) if match else 0
    if not k:
        return {}
    changed = {}
    own = None  # (server, database) of this process's REDIS_URL
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        url = environ.get(name, "")
        db = re.fullmatch(r"(rediss?://[^/?#]*)(?:/(\d*))?", url.replace("localhost", "127.0.0.1"))
        if db and own is not None and db.group(1) == own[0]:
            changed[name] = f"{own[0]}/{own[1]}"  # the same server: the same database
        elif db:
            changed[name] = f"{db.group(1)}/{(int(db.group(2) or 0) - k) % 16}"
            own = own or (db.group(1), (int(db.group(2) or 0) - k) % 16)
        elif url:
            shared = f"tests/workers.py: {name}={url} is shared by every test process"
            warnings.warn(shared, stacklevel=2)
    base = Path(environ.get("BERTH_VAR_DIR") or Path(__file__).resolve().parent.parent / "var")
    changed["BERTH_VAR_DIR"] = str(base / f"xdist-{worker}")
    return changed


os.environ.update(_own(os.environ.get("PYTEST_XDIST_WORKER", ""), dict(os.environ)))

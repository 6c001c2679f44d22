"""The checks behind /readyz: the database, the Celery broker, a recent scheduling pass.

Each check returns a Check (ok, detail, facts) and never raises: a readiness
probe must answer "no, because …", not fail with a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone
from kombu import Connection

log = logging.getLogger(__name__)


@dataclass
class Check:
    ok: bool
    detail: str
    facts: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "detail": self.detail, **self.facts}


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 — any failure means "not ready"
        return Check(False, f"database unreachable: {_one_line(exc)}")
    return Check(True, "database reachable")


def check_broker() -> Check:
    """Open (and close) a connection to the Celery broker with a short timeout.

    The embedded filesystem transport of the demo has no server: it is
    reachable when its queue folder exists.
    """
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
        folder = options.get("data_folder_in", "")
        if folder and Path(folder).is_dir():
            return Check(True, "filesystem broker folder exists", {"transport": "filesystem"})
        return Check(False, f"filesystem broker folder {folder or '(unset)'} is missing")
    timeout = settings.BERTH["READY_BROKER_TIMEOUT_S"]
    broker = Connection(
        url,
        connect_timeout=timeout,
        transport_options={"socket_timeout": timeout, "socket_connect_timeout": timeout},
    )
    try:
        broker.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
        return Check(True, "broker reachable", {"transport": broker.transport_cls})
    except Exception as exc:  # noqa: BLE001
        return Check(False, f"broker unreachable: {_one_line(exc)}")
    finally:
        broker.release()


def check_scheduling_pass(now: datetime | None = None) -> Check:
    """The last successful pass finished within BERTH["READY_PASS_MAX_AGE_S"]."""
    from portal.core.models import SchedulingPass

    now = now or timezone.now()
    max_age = settings.BERTH["READY_PASS_MAX_AGE_S"]
    try:
        last = (
            SchedulingPass.objects.filter(dry_run=False, error="")
            .order_by("-started_at")
            .values_list("started_at", "duration_ms")
            .first()
        )
    except Exception as exc:  # noqa: BLE001
        return Check(False, f"cannot read the last scheduling pass: {_one_line(exc)}")
    if last is None:
        return Check(False, "no scheduling pass has run yet", {"max_age_s": max_age})
    finished = last[0].timestamp() + last[1] / 1000
    age = round(now.timestamp() - finished, 1)
    facts = {"age_s": age, "max_age_s": max_age, "last_finished_at": _iso(finished)}
    if age > max_age:
        return Check(False, f"the last scheduling pass finished {age:.0f} s ago", facts)
    return Check(True, "scheduling pass recent", facts)


CHECKS: dict[str, Callable[[], Check]] = {
    "database": check_database,
    "broker": check_broker,
    "scheduling_pass": check_scheduling_pass,
}


def readiness(exclude: Iterable[str] = ()) -> tuple[bool, dict]:
    """Run every check not excluded; return (all ok, the JSON body of /readyz)."""
    skipped = set(exclude)
    results = {name: check() for name, check in CHECKS.items() if name not in skipped}
    failing = [name for name, result in results.items() if not result.ok]
    if failing:
        log.warning("not ready: %s", ", ".join(failing), extra={"failing": failing})
    body = {
        "status": "fail" if failing else "ok",
        "failing": failing,
        "checks": {name: result.as_dict() for name, result in results.items()},
    }
    return not failing, body


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]

"""What-if writes: start a run (and queue its replay once the row is committed)."""

from __future__ import annotations

import logging

from django.db import transaction

from portal.whatif.models import WhatIfRun

log = logging.getLogger(__name__)


def start_whatif(
    *, acting_user, team, change, value, period_start, period_end, flavor=None
) -> WhatIfRun:
    """Create a queued run and queue its replay on commit; raises ValidationError on bad values.

    The caller has checked that acting_user may plan for the team
    (portal.whatif.access).
    """
    run = WhatIfRun(
        created_by=acting_user,
        team=team,
        flavor=flavor if change != WhatIfRun.Change.WEIGHT else None,
        change=change,
        value=value,
        period_start=period_start,
        period_end=period_end,
    )
    run.full_clean()
    with transaction.atomic():
        run.save()
        transaction.on_commit(lambda: enqueue(run.pk))
    return run


def restart_whatif(run: WhatIfRun) -> bool:
    """Queue a finished or failed run again; False if it is still queued or running."""
    updated = (
        WhatIfRun.objects.filter(pk=run.pk)
        .exclude(status__in=WhatIfRun.ACTIVE)
        .update(
            status=WhatIfRun.Status.QUEUED,
            progress=0.0,
            results={},
            error="",
            started_at=None,
            finished_at=None,
        )
    )
    if updated:
        transaction.on_commit(lambda: enqueue(run.pk))
    return bool(updated)


def enqueue(run_id: int) -> None:
    """Send the run to a worker; if the broker is down the run stays queued and says so."""
    from portal.whatif.tasks import run_whatif

    try:
        run_whatif.delay(run_id)
    except Exception:  # noqa: BLE001 — the row is committed; a broker outage is not the user's error
        log.warning("could not queue what-if %s", run_id, exc_info=True)
        WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.QUEUED).update(
            error="Could not reach the task queue; ask an admin to run it again."
        )

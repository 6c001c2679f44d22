"""Jobs the cluster can no longer host: noted when it happens, failed if it lasts.

Submission refuses a gang no registered node set can host (portal.core.jobspec),
but nodes can be removed, drained or lose GPUs after a job was accepted. The
scheduling pass then reports it as `never_fits`; this writes a `never_fits`
event the first time, and fails the job once it has stayed so for
BERTH_NEVER_FITS_FAIL_AFTER_S, so a CI `berth wait` ends (exit 10) instead of
hanging until its own timeout. A job that fits again in between keeps waiting;
the clock starts again at its next `never_fits`.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import Max

from portal.core.actions.jobs import transition
from portal.core.models import Job, JobEvent
from scheduler.reasons import NEVER_FITS
from scheduler.timewords import duration


def note_or_fail_unfittable(
    reasons: dict[int, str], previous: dict[int, str], now: datetime
) -> list[int]:
    """Note the jobs that just became unfittable; fail those unfittable for too long.

    `reasons`: job id -> the pass's never_fits sentence; `previous`: job id -> the
    reason code the job had before this pass. Returns the ids failed.
    """
    if not reasons:
        return []
    limit = settings.BERTH["NEVER_FITS_FAIL_AFTER_S"]
    fresh = [pk for pk in reasons if previous.get(pk) != NEVER_FITS]
    since = dict(
        JobEvent.objects.filter(
            job_id__in=[pk for pk in reasons if pk not in fresh], kind=NEVER_FITS
        )
        .values_list("job_id")
        .annotate(at=Max("at"))
    )
    fresh += [pk for pk in reasons if pk not in since and pk not in fresh]
    _note(fresh, reasons, now, limit)
    due = [pk for pk, at in since.items() if (now - at).total_seconds() >= limit]
    return _fail(due, reasons, now, limit)


def _note(ids: list[int], reasons: dict[int, str], now: datetime, limit: float) -> None:
    JobEvent.objects.bulk_create(
        JobEvent(
            job_id=pk,
            at=now,
            kind=NEVER_FITS,
            message=f"The cluster cannot host it as it is now: {reasons[pk]}. It fails if this "
            f"lasts {duration(limit)}.",
        )
        for pk in ids
    )


def _fail(ids: list[int], reasons: dict[int, str], now: datetime, limit: float) -> list[int]:
    """Fail the jobs; each one's event says what it needed, its reason how long it waited."""
    return transition(
        ids,
        from_states=[Job.State.PENDING],
        to_state=Job.State.FAILED,
        kind="failed",
        per_job={pk: (f"The cluster could not host it: {reasons[pk]}.", {}) for pk in ids},
        finished_at=now,
        reason_code=NEVER_FITS,
        reason=f"Failed: the cluster could not host it for {duration(limit)} (never_fits).",
        queue_position=None,
        estimated_start_at=None,
    )

"""One job: spec, why it waits, timeline, allocation, preemptions, logs; and cancelling it."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.core.access import (
    NotFound,
    get_job_for_user,
    may_act_on_job,
    may_manage_notifications,
    visible_teams,
)
from portal.core.actions.jobs import InvalidTransition, cancel_job
from portal.core.models import Delivery, Job, JobNotify
from portal.dashboard import queries
from portal.dashboard.format import command_line, duration, relative
from portal.dashboard.shortcuts import (
    is_fragment,
    login_required_page,
    remember_team,
    render_page,
    team_context,
)
from scheduler.reasons import remedy


@login_required_page
def job_detail(request, job_id: int):
    job = _job(request.user, job_id)
    ctx = team_context(request.user, job.team)
    remember_team(request, job.team)
    now = timezone.now()
    names_of = None if request.user.is_staff else _team_ids(request.user)
    history = queries.job_history(job, names_of)
    context = {
        "job": job,
        "history": history,
        # A cancelled job keeps its GPUs until its workers stop: keep polling until then.
        "polling": not job.is_terminal or any(w.worker.is_live for w in history.workers),
        "stops_by": job.stops_by([w.worker for w in history.workers]),
        "ahead": queries.jobs_ahead(job)
        if job.state == Job.State.PENDING and not job.awaiting_dependency
        else None,
        "can_cancel": not job.is_terminal and may_act_on_job(request.user, ctx.role, job),
        "waited": duration(((job.admitted_at or now) - job.submitted_at).total_seconds()),
        "estimate": relative(job.estimated_start_at, now),
        "elapsed_s": _elapsed(job, now),
        "max_runtime": duration(job.max_runtime_seconds),
        "command_line": command_line(job.command),
        "remedy": remedy(job.reason_code),
        "parents": queries.job_parents(job),
        **({} if is_fragment(request) else _notifications(job, ctx)),
    }
    return render_page(request, "dashboard/job.html", context, ctx=ctx, section="job")


def _notifications(job: Job, ctx) -> dict:
    """The job's own notify and its deliveries; a lead also sees the team webhooks'."""
    deliveries = Delivery.objects.filter(job=job).order_by("created_at", "id")
    if not may_manage_notifications(ctx.role):
        deliveries = deliveries.filter(webhook__isnull=True)
    return {
        "notify": JobNotify.objects.filter(job=job).first(),
        "deliveries": list(deliveries[:50]),
    }


@require_POST
@login_required_page
def cancel(request, job_id: int):
    """Leads cancel any job of their team, members their own; viewers none (403)."""
    try:
        job = get_job_for_user(request.user, job_id, write=True)
    except NotFound:
        raise Http404("No such job.") from None
    try:
        cancel_job(job, actor=request.user)
    except InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job #{job.pk} {job.name} was cancelled.")
    return redirect("dashboard:job", job.pk)


def _job(user, job_id: int) -> Job:
    try:
        return get_job_for_user(user, job_id)
    except NotFound:
        raise Http404("No such job.") from None


class _team_ids:
    """Team ids whose job names the user may see, queried only if a page needs them."""

    def __init__(self, user):
        self.user, self._ids = user, None

    def __contains__(self, team_id) -> bool:
        if self._ids is None:
            self._ids = set(visible_teams(self.user).values_list("pk", flat=True))
        return team_id in self._ids


def _elapsed(job: Job, now) -> dict | None:
    """Run time so far (or in all) against the maximum, once the workers started."""
    since = job.started_at
    if since is None:
        return None
    end = job.finished_at or now
    seconds = max(0.0, (end - since).total_seconds())
    return {
        "text": duration(seconds),
        "max": duration(job.max_runtime_seconds),
        "pct": min(100.0, round(100 * seconds / job.max_runtime_seconds, 1)),
    }

"""Queue: pending jobs in order (position, reason, estimate, who is ahead) and running jobs."""

from django.utils import timezone

from portal.core import reports
from portal.dashboard import queries
from portal.dashboard.shortcuts import render_page, team_page


@team_page
def queue(request, ctx):
    now = timezone.now()
    pending, page = queries.pending_page(ctx.team, request.GET.get("page"), now)
    context = {
        "pending": pending,
        "page": page,
        "running": queries.running_rows(ctx.team, now),
        "finished": queries.finished_jobs(ctx.team),
        "counts": reports.job_counts(ctx.team),
        "standing": queries.standing_rows(ctx.team),
    }
    return render_page(request, "dashboard/queue.html", context, ctx=ctx, section="queue")

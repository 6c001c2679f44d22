"""Cluster: every node by rack, every GPU a cell coloured by state and utilization."""

from django.utils import timezone

from portal.core.access import visible_teams
from portal.dashboard import queries
from portal.dashboard.shortcuts import render_page, team_page


@team_page
def cluster(request, ctx):
    # Staff see every job's name; others see the names of their own teams' jobs only.
    names_of = (
        None
        if request.user.is_staff
        else set(visible_teams(request.user).values_list("pk", flat=True))
    )
    racks, summary = queries.cluster_racks(ctx.team, job_names_of=names_of, now=timezone.now())
    context = {"racks": racks, "summary": summary}
    return render_page(request, "dashboard/cluster.html", context, ctx=ctx, section="cluster")

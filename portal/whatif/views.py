"""What-if pages: start a run, watch its progress, read its results.

Leads see and start runs for the teams of their cohort, staff for every team;
everyone else gets a 404 (portal.whatif.access). The detail page polls its
status fragment (htmx, `?fragment=status`) until the run is done; scripts can
poll status.json.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from portal.core.access import NotFound, get_team_for_user
from portal.core.models import Team
from portal.dashboard.shortcuts import landing_team, nav_context, remember_team, team_context
from portal.whatif import access
from portal.whatif.actions import start_whatif
from portal.whatif.forms import WhatIfForm
from portal.whatif.models import RUN_STAGES, WhatIfRun
from portal.whatif.present import result_rows

POLL_S = 2
RECENT = 50


@login_required
def index(request):
    teams = access.planning_teams(request.user)
    if not teams.exists():
        raise Http404("No what-if planning for you here.")
    nav_team = landing_team(request)
    preselect = nav_team if nav_team and teams.filter(pk=nav_team.pk).exists() else None
    form = WhatIfForm(
        request.POST or None,
        teams=teams,
        initial={"team": preselect or access.led_teams(request.user).first()},
    )
    if request.method == "POST" and form.is_valid():
        run = start_whatif(acting_user=request.user, **form.cleaned_data)
        return redirect("whatif:detail", run.pk)
    runs = access.visible_runs(request.user).select_related("team", "flavor", "created_by")[:RECENT]
    context = {"form": form, "runs": runs} | _nav(request, nav_team)
    return render(request, "whatif/index.html", context)


def _nav(request, team: Team | None) -> dict:
    """The dashboard's header and tabs, on the team the user was looking at."""
    ctx = team_context(request.user, team) if team else None
    return nav_context(request, team, "whatif") | {"role": ctx and ctx.role, "tc": ctx}


def _run_team(request, run: WhatIfRun) -> Team | None:
    """The run's team if the user may open it in the dashboard, else where they were."""
    try:
        team = get_team_for_user(request.user, run.team.slug)
    except NotFound:
        return landing_team(request)
    remember_team(request, team)
    return team


def _run(request, run_id: int) -> WhatIfRun:
    try:
        return access.get_run_for_user(request.user, run_id)
    except NotFound:
        raise Http404("No such what-if run.") from None


@login_required
def detail(request, run_id: int):
    run = _run(request, run_id)
    context = {
        "run": run,
        "rows": result_rows(run, access.shown_teams(request.user, run)),
        "poll_s": POLL_S,
        "stages": RUN_STAGES,
        "live": run.is_active,  # without JavaScript the page reloads itself instead
    }
    if request.GET.get("fragment") == "status":
        return render(request, "whatif/_status.html", context)
    return render(request, "whatif/detail.html", context | _nav(request, _run_team(request, run)))


@login_required
def status_json(request, run_id: int):
    run = _run(request, run_id)
    return JsonResponse(
        {
            "id": run.pk,
            "status": run.status,
            "progress": round(run.progress, 3),
            "stage": run.stage if run.is_active else "",
            "done": not run.is_active,
            "error": run.error,
            "url": reverse("whatif:detail", args=[run.pk]),
        }
    )

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

from portal.core.access import NotFound
from portal.whatif import access
from portal.whatif.actions import start_whatif
from portal.whatif.forms import WhatIfForm
from portal.whatif.models import WhatIfRun
from portal.whatif.present import result_rows

POLL_S = 2
RECENT = 50


@login_required
def index(request):
    teams = access.planning_teams(request.user)
    if not teams.exists():
        raise Http404("No what-if planning for you here.")
    form = WhatIfForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        run = start_whatif(acting_user=request.user, **form.cleaned_data)
        return redirect("whatif:detail", run.pk)
    runs = access.visible_runs(request.user).select_related("team", "flavor", "created_by")[:RECENT]
    return render(request, "whatif/index.html", {"form": form, "runs": runs, "section": "whatif"})


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
        "live": run.is_active,  # without JavaScript the page reloads itself instead
        "section": "whatif",
    }
    if request.GET.get("fragment") == "status":
        return render(request, "whatif/_status.html", context)
    return render(request, "whatif/detail.html", context)


@login_required
def status_json(request, run_id: int):
    run = _run(request, run_id)
    return JsonResponse(
        {
            "id": run.pk,
            "status": run.status,
            "progress": round(run.progress, 3),
            "done": not run.is_active,
            "error": run.error,
            "url": reverse("whatif:detail", args=[run.pk]),
        }
    )

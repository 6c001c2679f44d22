"""The landing page: back to the last team, or the first one the user can see."""

from django.shortcuts import redirect, render

from portal.core.access import visible_teams
from portal.dashboard.shortcuts import login_required_page, nav_context


@login_required_page
def home(request):
    teams = visible_teams(request.user).order_by("slug")
    last = request.session.get("team")
    team = (teams.filter(slug=last).first() if last else None) or teams.first()
    if team is not None:
        return redirect("dashboard:overview", team.slug)
    return render(request, "dashboard/no_team.html", nav_context(request, None, "home"))

"""The landing page: back to the last team, else the first the user leads, is in, or views."""

from django.shortcuts import redirect, render

from portal.dashboard.shortcuts import landing_team, login_required_page, nav_context


@login_required_page
def home(request):
    team = landing_team(request)
    if team is not None:
        return redirect("dashboard:overview", team.slug)
    return render(request, "dashboard/no_team.html", nav_context(request, None, "home"))

"""What every dashboard view shares: login, the team in the URL, the nav, live fragments.

A page's live part is a fragment template; the page includes it and htmx polls
the same URL with `?fragment=live` to swap it in place (docs/dashboard.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import wraps
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils import timezone

from portal.core.access import NotFound, get_team_for_user, may_submit, role_in, visible_teams
from portal.core.models import Membership, Team

Role = Membership.Role
FRAGMENT_PARAM = "fragment"
# Pages a team switch keeps the user on; others (a job) go to the team's overview.
TEAM_SECTIONS = ("overview", "queue", "cluster", "submit")


# A remembered team outlives the session (logging out flushes it): a signed cookie.
TEAM_COOKIE = "berth_team"
TEAM_COOKIE_SALT = "berth.dashboard.team"
TEAM_COOKIE_MAX_AGE = 365 * 24 * 3600
# Where a user without a remembered team lands: the first team they lead, else member, else view.
ROLE_RANK = {Role.LEAD: 0, Role.MEMBER: 1, Role.VIEWER: 2}


@dataclass
class TeamContext:
    team: Team
    role: str
    member: bool = True  # False for staff looking at a team they do not belong to

    @property
    def can_submit(self) -> bool:
        return may_submit(self.role)

    @property
    def is_lead(self) -> bool:
        return self.role == Role.LEAD


def poll_seconds() -> float:
    """How often live fragments refresh; BERTH['DASHBOARD_POLL_S'], 5 s by default."""
    return float(settings.BERTH.get("DASHBOARD_POLL_S", 5.0))


def is_fragment(request) -> bool:
    return request.GET.get(FRAGMENT_PARAM) == "live"


def login_required_page(view):
    """Like login_required, but a live poll whose session ended sends the whole tab to login."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        login = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': request.path})}"
        if is_fragment(request):
            response = HttpResponse(status=401)
            response["HX-Redirect"] = login
            return response
        return redirect(login)

    return wrapper


def team_page(view):
    """Resolve the team slug through the access helpers: another team's page is a 404."""

    @login_required_page
    @wraps(view)
    def wrapper(request, slug, *args, **kwargs):
        try:
            team = get_team_for_user(request.user, slug)
        except NotFound:
            raise Http404("No such team.") from None
        ctx = team_context(request.user, team)
        remember_team(request, team)
        return view(request, ctx, *args, **kwargs)

    return wrapper


def team_context(user, team: Team) -> TeamContext:
    """The viewer's role in the team; staff count as leads but are members only if they are."""
    role = role_in(user, team)
    member = not user.is_staff or Membership.objects.filter(user=user, team=team).exists()
    return TeamContext(team=team, role=role, member=member)


def remember_team(request, team: Team) -> None:
    """The home page reopens the last team; the session is only written when it changes.

    render_page copies it into a signed cookie so it survives logging out.
    """
    if request.session.get("team") != team.slug:
        request.session["team"] = team.slug


def remembered_team(request) -> str | None:
    """The slug of the team this user opened last: the session's, else the cookie's."""
    if slug := request.session.get("team"):
        return slug
    value = request.get_signed_cookie(TEAM_COOKIE, default="", salt=TEAM_COOKIE_SALT)
    user_id, _, slug = value.partition(":")
    return slug if slug and user_id == str(request.user.pk) else None


def landing_team(request) -> Team | None:
    """The team the home page opens: the remembered one if still visible, else by role.

    By role: the first team (by slug) the user leads, else one they are a member
    of, else one they view; staff outside every team get the first team.
    """
    teams = visible_teams(request.user)
    if (slug := remembered_team(request)) and (team := teams.filter(slug=slug).first()):
        return team
    roles = dict(Membership.objects.filter(user=request.user).values_list("team__slug", "role"))
    ranked = sorted(
        teams.only("pk", "slug", "name"),
        key=lambda t: (t.slug not in roles, ROLE_RANK.get(roles.get(t.slug), 3), t.slug),
    )
    return ranked[0] if ranked else None


def _keep_team_cookie(request, response, team: Team) -> None:
    value = f"{request.user.pk}:{team.slug}"
    current = request.get_signed_cookie(TEAM_COOKIE, default="", salt=TEAM_COOKIE_SALT)
    if current != value:
        response.set_signed_cookie(
            TEAM_COOKIE,
            value,
            salt=TEAM_COOKIE_SALT,
            max_age=TEAM_COOKIE_MAX_AGE,
            httponly=True,
            samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
        )


def live_url(request) -> str:
    params = request.GET.copy()
    params[FRAGMENT_PARAM] = "live"
    return f"{request.path}?{params.urlencode()}"


def render_page(
    request, template: str, context: dict, *, ctx: TeamContext, section: str, live: bool = True
):
    """Render the page, or only its live fragment when htmx polls for it (`live` pages)."""
    context = {
        **context,
        "team": ctx.team,
        "role": ctx.role,
        "tc": ctx,
        "poll_s": poll_seconds(),
        "live": live,  # without JavaScript the page reloads itself every 30 s instead
        "live_url": live_url(request),
        "rendered_at": timezone.now(),
    }
    if live and is_fragment(request):
        return render(request, fragment_template(template), context)
    context |= nav_context(request, ctx.team, section)
    response = render(request, template, context)
    _keep_team_cookie(request, response, ctx.team)
    return response


def fragment_template(template: str) -> str:
    """dashboard/queue.html → dashboard/live/queue.html."""
    folder, _, name = template.rpartition("/")
    return f"{folder}/live/{name}"


def nav_context(request, team: Team | None, section: str) -> dict:
    """The header: the team switcher (staff see every team) and the current section."""
    target = section if section in TEAM_SECTIONS else "overview"
    teams = list(visible_teams(request.user).only("slug", "name").order_by("slug"))
    return {
        "section": section,
        "nav_team": team,
        "switch_teams": [
            (t, reverse(f"dashboard:{target}", args=[t.slug])) for t in teams if t != team
        ],
        "team_count": len(teams),
    }

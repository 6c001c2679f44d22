"""Who may plan for which team: staff for every team, a lead for the teams of their cohort.

A lead of a team in cohort C may run and read what-ifs for every team of C
(changing a neighbour's quota changes their own waits); a lead of a team
without a cohort only for that team. Everyone else gets the same not-found
as for a run that does not exist (portal.core.access.NotFound).
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from portal.core.access import NotFound, role_in, visible_teams
from portal.core.models import Membership, Team
from portal.whatif.models import WhatIfRun


def led_teams(user) -> QuerySet[Team]:
    """Return the teams the user leads (staff: every team)."""
    teams = visible_teams(user)
    if getattr(user, "is_staff", False):
        return teams
    return teams.filter(memberships__user=user, memberships__role=Membership.Role.LEAD)


def planning_teams(user) -> QuerySet[Team]:
    """Return the teams the user may run what-ifs for."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    led = led_teams(user)
    cohorts = led.exclude(cohort=None).values("cohort")
    return Team.objects.filter(Q(pk__in=led.values("pk")) | Q(cohort__in=cohorts)).distinct()


def may_plan_for(user, team: Team) -> bool:
    """Return whether the user may run a what-if that changes this team's settings."""
    if role_in(user, team) == Membership.Role.LEAD:
        return True
    return planning_teams(user).filter(pk=team.pk).exists()


def visible_runs(user) -> QuerySet[WhatIfRun]:
    return WhatIfRun.objects.filter(team__in=planning_teams(user))


def get_run_for_user(user, run_id: int) -> WhatIfRun:
    """Return the run if the user may see it, else raise NotFound."""
    run = (
        visible_runs(user).select_related("team", "flavor", "created_by").filter(pk=run_id).first()
    )
    if run is None:
        raise NotFound("what-if run")
    return run


def shown_teams(user, run: WhatIfRun) -> set[str] | None:
    """Return the slugs whose results the user may see in a run (None: all, for staff)."""
    if user.is_staff:
        return None
    return set(planning_teams(user).values_list("slug", flat=True))

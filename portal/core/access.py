"""Tenant access goes through these helpers and nowhere else.

They return the object or raise one uniform NotFound, so a stranger cannot
tell "forbidden" from "absent" (Zulip's access_stream_by_id). A caller who
can see an object but may not change it gets PermissionDenied.

`scope` narrows what a caller sees to some team ids: an API token scoped to
teams passes them; None means every team the user belongs to.

The rules themselves are the small functions of the first section (who may read,
submit, act on a job; staff act as leads; a token is usable): the helpers below,
the dashboard, the admin and the hand-written statements (portal/core/statements.py,
which take their parameters from here) all ask them, so a new rule goes in one place.
"""

from __future__ import annotations

from collections.abc import Collection

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import QuerySet

from portal.core import statements
from portal.core.db import split_row
from portal.core.models import ApiToken, Job, JobArray, Membership, Queue, Team

Role = Membership.Role


# --- the rules ------------------------------------------------------------------------

# Roles whose members may submit jobs to their team (viewers may not).
SUBMIT_ROLES = (Role.LEAD, Role.MEMBER)


def effective_role(user, membership_role: str | None) -> str | None:
    """The role a user acts with in a team, given their membership's role there (None:
    not a member): staff act as leads in every team."""
    if getattr(user, "is_staff", False):
        return Role.LEAD
    return membership_role


def may_submit(role: str | None) -> bool:
    """Whether a user with this (effective) role may submit jobs to the team."""
    return role in SUBMIT_ROLES


def may_act_on_job(user, role: str | None, job: Job) -> bool:
    """Whether a user with this (effective) role in the job's team may cancel it:
    leads every job of their team, members their own, viewers none."""
    return role == Role.LEAD or (role == Role.MEMBER and job.submitted_by_id == user.pk)


def may_manage_notifications(role: str | None) -> bool:
    """Whether a user with this (effective) role may configure the team's webhooks, see
    its signing secret and its deliveries: leads (and so staff) only."""
    return role == Role.LEAD


def token_usable(token, user) -> bool:
    """Whether an API token may be used now: not revoked, not expired (the token's own
    ApiToken.is_usable), and its user active. statements.guard_sql says the same in SQL."""
    return token.is_usable and user.is_active


# --- the helpers ----------------------------------------------------------------------


class NotFound(Exception):
    """The object does not exist or the caller may not know it exists."""

    def __init__(self, what: str = "object"):
        super().__init__(f"{what} not found")
        self.what = what


def visible_teams(user, *, scope: Collection[int] | None = None) -> QuerySet[Team]:
    """Teams the user may read: staff see all, others their memberships."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    teams = Team.objects.all() if user.is_staff else Team.objects.filter(memberships__user=user)
    if scope is not None:
        teams = teams.filter(pk__in=scope)
    return teams.distinct()


def role_in(user, team: Team) -> str | None:
    """The user's effective role in the team (staff act as leads everywhere)."""
    if user.is_staff:
        return effective_role(user, None)
    membership = Membership.objects.filter(user=user, team=team).only("role").first()
    return effective_role(user, membership.role if membership else None)


def get_team_for_user(user, slug: str, *, scope: Collection[int] | None = None) -> Team:
    team = visible_teams(user, scope=scope).filter(slug=slug).select_related("cohort").first()
    if team is None:
        raise NotFound("team")
    return team


def get_team_for_lead(user, slug: str, *, scope: Collection[int] | None = None) -> Team:
    """The team if the user leads it (may_manage_notifications); NotFound for a team the
    user cannot see, PermissionDenied for one they see but do not lead."""
    team = get_team_for_user(user, slug, scope=scope)
    if not may_manage_notifications(role_in(user, team)):
        raise PermissionDenied("Only the team's leads may manage its notifications.")
    return team


def visible_tokens(user, *, scope: Collection[int] | None = None) -> QuerySet[ApiToken]:
    """The user's API tokens that a caller with `scope` may list or revoke: a token
    scoped to some teams reaches only tokens scoped within those teams, never an
    unscoped one (which reaches every team of the user) or a wider one."""
    tokens = ApiToken.objects.filter(user=user)
    if scope is not None:
        tokens = tokens.filter(scoped=True).exclude(teams__in=Team.objects.exclude(pk__in=scope))
    return tokens


def visible_jobs(user, *, scope: Collection[int] | None = None) -> QuerySet[Job]:
    return Job.objects.filter(team__in=visible_teams(user, scope=scope))


def get_job_for_user(
    user, job_id: int, *, write: bool = False, scope: Collection[int] | None = None
) -> Job:
    """The job if the user may see it; with write=True also check they may act on it.

    Leads act on every job of their team, members on their own, viewers on none.
    """
    job = (
        visible_jobs(user, scope=scope)
        .select_related("team", "queue", "flavor")
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        raise NotFound("job")
    if write:
        check_can_act_on_job(user, job)
    return job


def visible_arrays(user, *, scope: Collection[int] | None = None) -> QuerySet[JobArray]:
    return JobArray.objects.filter(team__in=visible_teams(user, scope=scope))


def get_array_for_user(
    user, array_id: int, *, write: bool = False, scope: Collection[int] | None = None
) -> JobArray:
    """The job array if the user may see it; with write=True also check they may act on
    it, by the rule for its tasks (may_act_on_job: leads, or the member who submitted it)."""
    array = (
        visible_arrays(user, scope=scope).select_related("team", "submitted_by").filter(pk=array_id)
    ).first()
    if array is None:
        raise NotFound("array")
    if write:
        check_can_act_on_job(user, array)
    return array


def check_can_act_on_job(user, job: Job) -> None:
    if not may_act_on_job(user, role_in(user, job.team), job):
        raise PermissionDenied("Only the team's leads and the job's submitter may change this job.")


def get_queue_for_submit(
    user, team: Team, queue_name: str, *, scope: Collection[int] | None = None
) -> Queue:
    """The queue a user may submit to: leads and members may, viewers may not."""
    if scope is not None and team.pk not in scope:
        raise NotFound("team")
    role = role_in(user, team)
    if role is None:
        raise NotFound("team")
    if not may_submit(role):
        raise PermissionDenied("Viewers may not submit jobs.")
    queue = Queue.objects.filter(team=team, name=queue_name).first()
    if queue is None:
        raise NotFound("queue")
    return queue


def get_submit_target(
    user, slug: str | None, queue_name: str, *, scope: Collection[int] | None = None
) -> tuple[Team, Queue | None]:
    """The team a user submits to and its named queue, with the user's role checked,
    in one query on the common path (this runs for every submission). The queue is
    None when the team has no such queue: jobspec reports that with the queue names.

    `slug` None means the user's only team. Raises NotFound for a team the user
    cannot see, MultipleTeams when no team is named and the user has several, and
    PermissionDenied for viewers, as get_queue_for_submit does.
    """
    found = None if user.is_staff else _member_queue(user, slug, queue_name, scope)
    if found is not None:
        return found
    return _slow_submit_target(user, slug, queue_name, scope)


def _member_queue(user, slug, queue_name, scope) -> tuple[Team, Queue] | None:
    """The fast path for members, hand-written: the ORM spends ~1.5 ms of Python
    building this join on every submission. None when the slow path must decide
    (and on SQLite, the demo database, which has no ANY())."""
    if connection.vendor != "postgresql":
        return None
    rows = statements.member_submit_target(user.pk, slug, queue_name, scope)
    return submit_target_from(rows, slug)


def submit_target_from(rows: list, slug: str | None) -> tuple[Team, Queue] | None:
    """The team and queue of statements.submit_target_sql's rows; None when they do not name
    exactly one (the slow path tells which error). Raises PermissionDenied for a viewer.
    Row versions, when selected, are left on the queue and team as `row_version`."""
    if len(rows) != 1:
        return None
    (queue, team), (role, teams_of_user, *versions) = split_row(rows[0], Queue, Team)
    if versions:
        queue.row_version, team.row_version = versions
    if not slug and teams_of_user != 1:
        return None
    if not may_submit(role):
        raise PermissionDenied("Viewers may not submit jobs.")
    queue.team = team
    return team, queue


def _slow_submit_target(user, slug, queue_name, scope) -> tuple[Team, Queue | None]:
    """The rare paths, where the error to give needs a closer look."""
    if slug:
        team = get_team_for_user(user, slug, scope=scope)
    else:
        teams = list(visible_teams(user, scope=scope).order_by("slug")[:3])
        if len(teams) != 1:
            raise MultipleTeams([t.slug for t in teams])
        team = teams[0]
    try:
        return team, get_queue_for_submit(user, team, queue_name, scope=scope)
    except NotFound as exc:
        if exc.what != "queue":
            raise
        return team, None


class MultipleTeams(Exception):
    """The caller named no team and is in several (or none): they must say which."""

    def __init__(self, slugs: list[str]):
        super().__init__("name the team")
        self.slugs = slugs

"""Tenant access goes through these helpers and nowhere else.

They return the object or raise one uniform NotFound, so a stranger cannot
tell "forbidden" from "absent" (Zulip's access_stream_by_id). A caller who
can see an object but may not change it gets PermissionDenied.

`scope` narrows what a caller sees to some team ids: an API token scoped to
teams passes them; None means every team the user belongs to.
"""

from __future__ import annotations

from collections.abc import Collection

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from portal.core.models import Job, Membership, Queue, Team

Role = Membership.Role


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
    """The user's role in the team; staff count as leads everywhere."""
    if user.is_staff:
        return Role.LEAD
    membership = Membership.objects.filter(user=user, team=team).only("role").first()
    return membership.role if membership else None


def get_team_for_user(user, slug: str, *, scope: Collection[int] | None = None) -> Team:
    team = visible_teams(user, scope=scope).filter(slug=slug).select_related("cohort").first()
    if team is None:
        raise NotFound("team")
    return team


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


def check_can_act_on_job(user, job: Job) -> None:
    role = role_in(user, job.team)
    if role == Role.LEAD:
        return
    if role == Role.MEMBER and job.submitted_by_id == user.pk:
        return
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
    if role == Role.VIEWER:
        raise PermissionDenied("Viewers may not submit jobs.")
    queue = Queue.objects.filter(team=team, name=queue_name).first()
    if queue is None:
        raise NotFound("queue")
    return queue

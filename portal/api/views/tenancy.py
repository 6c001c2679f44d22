"""Read-only views of what the caller may see: queues, teams (quota, usage, fair
share, showback), the cluster's nodes, and the caller themself."""

from __future__ import annotations

from dataclasses import asdict

from django.db.models import Count, Prefetch, Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.auth import api_token, scope_of
from portal.api.views.tokens import token_data
from portal.core import access, budgets, reports
from portal.core.models import Allocation, Gpu, Job, Membership, Node, Queue

ACTIVE = list(Job.ACTIVE_STATES)


def roles_of(user) -> dict[int, str]:
    """Team id → the user's role; staff count as leads everywhere (as access.role_in)."""
    return dict(Membership.objects.filter(user=user).values_list("team_id", "role"))


def role(user, roles: dict[int, str], team_id: int) -> str | None:
    return access.effective_role(user, roles.get(team_id))


class QueueListView(APIView):
    @extend_schema(
        operation_id="queues_list",
        parameters=[s.TeamFilterSerializer],
        responses={200: s.QueueSerializer(many=True)},
        description="The queues of the caller's teams with their pending and running jobs.",
    )
    def get(self, request):
        teams = access.visible_teams(request.user, scope=scope_of(request))
        params = s.query(request, s.TeamFilterSerializer)
        if "team" in params:
            teams = teams.filter(slug=params["team"])
        queues = (
            Queue.objects.filter(team__in=teams)
            .select_related("team")
            .annotate(
                pending=Count("jobs", filter=Q(jobs__state=Job.State.PENDING)),
                running=Count("jobs", filter=Q(jobs__state__in=ACTIVE)),
            )
            .order_by("team__slug", "name")
        )
        return Response(s.QueueSerializer(queues, many=True).data)


class TeamListView(APIView):
    @extend_schema(operation_id="teams_list", responses={200: s.TeamSerializer(many=True)})
    def get(self, request):
        teams = list(
            access.visible_teams(request.user, scope=scope_of(request))
            .select_related("cohort")
            .order_by("slug")
        )
        roles = roles_of(request.user)
        for team in teams:
            team.role = role(request.user, roles, team.pk)
        return Response(s.TeamSerializer(teams, many=True).data)


class TeamDetailView(APIView):
    @extend_schema(
        operation_id="teams_retrieve",
        responses={200: s.TeamDetailSerializer},
        description="Quota, borrowed and used GPUs per flavor, GPU-hour budgets, the reclaim "
        "backoff per flavor, the cohort's fair-share standing, GPU-hours per day (30 days) and "
        "job counts.",
    )
    def get(self, request, slug: str):
        team = access.get_team_for_user(request.user, slug, scope=scope_of(request))
        team.role = role(request.user, roles_of(request.user), team.pk)
        now = timezone.now()
        quota = [
            asdict(row) | {"borrowed": row.borrowed, "idle": row.idle}
            for row in reports.quota_usage(team)
        ]
        detail = s.TeamSerializer(team).data | {
            "quota": s.QuotaUsageSerializer(quota, many=True).data,
            "budgets": s.BudgetSerializer(
                [budgets.as_row(b) for b in budgets.team_budgets(team.pk, now)],
                many=True,
            ).data,
            "reclaim_backoff": s.ReclaimBackoffSerializer(
                reports.reclaim_backoff(team, now), many=True
            ).data,
            "fair_share": [asdict(row) for row in reports.cohort_standing(team)],
            "gpu_hours_by_day": reports.gpu_hours_by_day(team),
            "jobs": reports.job_counts(team),
        }
        return Response(detail)


class NodeListView(APIView):
    @extend_schema(
        operation_id="nodes_list",
        parameters=[s.FlavorFilterSerializer],
        responses={200: s.NodeSerializer(many=True)},
        description="The cluster, read-only: nodes, their state and GPUs. A GPU held by a job "
        "of another team shows as allocated without the job.",
    )
    def get(self, request):
        nodes = Node.objects.select_related("flavor").prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.order_by("index"))
        )
        params = s.query(request, s.FlavorFilterSerializer)
        if "flavor" in params:
            nodes = nodes.filter(flavor__name=params["flavor"])
        mine = set(
            access.visible_teams(request.user, scope=scope_of(request)).values_list("pk", flat=True)
        )
        held = {
            gpu_id: (job_id, name) if team_id in mine else (None, None)
            for gpu_id, job_id, team_id, name in Allocation.objects.filter(active=True).values_list(
                "gpu_id", "job_id", "job__team_id", "job__name"
            )
        }
        nodes = list(nodes.order_by("hostname"))
        for node in nodes:
            node.gpu_rows = [_gpu_row(gpu, held) for gpu in node.gpus.all()]
        return Response(s.NodeSerializer(nodes, many=True).data)


def _gpu_row(gpu: Gpu, held: dict) -> Gpu:
    gpu.allocated = gpu.pk in held
    gpu.job, gpu.job_name = held.get(gpu.pk, (None, None))
    return gpu


class MeView(APIView):
    @extend_schema(
        operation_id="me",
        responses={200: s.MeSerializer},
        description="Who the caller is, their teams and roles, and the token's scope.",
    )
    def get(self, request):
        user, token = request.user, api_token(request)
        teams = access.visible_teams(user, scope=scope_of(request)).order_by("slug")
        roles = roles_of(user)
        memberships = [
            {"slug": t.slug, "name": t.name, "role": role(user, roles, t.pk)}
            for t in teams
            if t.pk in roles or not user.is_staff
        ]
        return Response(
            {
                "username": user.username,
                "email": user.email,
                "is_staff": user.is_staff,
                "teams": memberships,
                "auth": "token" if token else "session",
                "token": token_data(token) if token else None,
            }
        )

"""A team's notifications, for its leads: webhooks (list, create, delete), the signing
secret (read, rotate) and the deliveries with their attempts (docs/api.md
"Notifications"). Members and viewers get 403; other teams, 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.auth import scope_of
from portal.api.views.tokens import NO_STORE
from portal.core import access
from portal.core.actions.notifications import (
    create_webhook,
    delete_webhook,
    redeliver,
    rotate_webhook_secret,
    team_secret,
)
from portal.core.models import Delivery, TeamWebhook

DELIVERIES_SHOWN = 100


def _team(request, slug: str):
    return access.get_team_for_lead(request.user, slug, scope=scope_of(request))


class WebhookListView(APIView):
    @extend_schema(operation_id="webhooks_list", responses={200: s.WebhookSerializer(many=True)})
    def get(self, request, slug: str):
        team = _team(request, slug)
        return Response(s.WebhookSerializer(TeamWebhook.objects.filter(team=team), many=True).data)

    @extend_schema(
        operation_id="webhooks_create",
        request=s.WebhookCreateSerializer,
        responses={201: s.WebhookSerializer},
        description="A webhook of the team: a signed POST for each chosen event of every job "
        "of the team, and team-level events unless `team_events` is false.",
    )
    def post(self, request, slug: str):
        team = _team(request, slug)
        body = s.WebhookCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        hook = create_webhook(team, acting_user=request.user, **body.validated_data)
        return Response(s.WebhookSerializer(hook).data, status=201)


class WebhookDetailView(APIView):
    @extend_schema(operation_id="webhooks_destroy", responses={204: None})
    def delete(self, request, slug: str, webhook_id: int):
        team = _team(request, slug)
        hook = TeamWebhook.objects.filter(team=team, pk=webhook_id).first()
        if hook is None:
            raise access.NotFound("webhook")
        delete_webhook(hook, acting_user=request.user)
        return Response(status=204)


class WebhookSecretView(APIView):
    @extend_schema(
        operation_id="webhook_secret_retrieve", responses={200: s.WebhookSecretSerializer}
    )
    def get(self, request, slug: str):
        team = _team(request, slug)
        return Response({"secret": team_secret(team)}, headers=NO_STORE)

    @extend_schema(
        operation_id="webhook_secret_rotate",
        request=None,
        responses={200: s.WebhookSecretSerializer},
        description="A new signing secret; bodies are signed with it from now on.",
    )
    def post(self, request, slug: str):
        team = _team(request, slug)
        return Response(
            {"secret": rotate_webhook_secret(team, acting_user=request.user)}, headers=NO_STORE
        )


class DeliveryListView(APIView):
    @extend_schema(
        operation_id="deliveries_list",
        responses={200: s.DeliverySerializer(many=True)},
        description=f"The team's latest {DELIVERIES_SHOWN} deliveries, newest first.",
    )
    def get(self, request, slug: str):
        team = _team(request, slug)
        rows = Delivery.objects.filter(team=team).order_by("-created_at", "-id")[:DELIVERIES_SHOWN]
        return Response(s.DeliverySerializer(rows, many=True).data)


class RedeliverView(APIView):
    @extend_schema(
        operation_id="deliveries_redeliver",
        request=None,
        responses={201: s.DeliverySerializer},
        description="Send a delivery again (a new delivery with the same body).",
    )
    def post(self, request, slug: str, delivery_id: int):
        team = _team(request, slug)
        delivery = Delivery.objects.filter(team=team, pk=delivery_id).first()
        if delivery is None:
            raise access.NotFound("delivery")
        return Response(
            s.DeliverySerializer(redeliver(delivery, acting_user=request.user)).data, status=201
        )

"""The API half of `berth login --sso` (portal/sso/device.py): start a device
authorization, then trade the confirmed device code for a normal API token."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.errors import ApiError
from portal.api.views.tokens import issue_token
from portal.sso import device, loopback

DeviceStartSerializer = inline_serializer(
    "DeviceAuthorization",
    {
        "device_code": serializers.CharField(),
        "user_code": serializers.CharField(),
        "verification_uri": serializers.CharField(),
        "verification_uri_complete": serializers.CharField(required=False),
        "expires_in": serializers.IntegerField(),
        "interval": serializers.IntegerField(),
    },
)


class DeviceTokenSerializer(s.TokenCreateSerializer):
    device_code = serializers.CharField(max_length=512)


class LoopbackTokenSerializer(s.TokenCreateSerializer):
    code = serializers.CharField(max_length=128)


def _configured() -> None:
    from django.conf import settings

    if not settings.BERTH_SSO.get("OIDC"):
        raise ApiError(404, "not_configured", "Single sign-on (OpenID Connect) is not configured.")


class DeviceStartView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="sso_device_start",
        request=s.TokenCreateSerializer,
        responses={200: DeviceStartSerializer},
        description="Start `berth login --sso` with the options of the token to come: the "
        "provider's page and the code the person confirms there (RFC 8628). 404 `not_supported` when the portal has no OpenID "
        "Connect provider or the provider has no device authorization.",
    )
    def post(self, request):
        # The token's options, checked before the person goes to the provider; they are
        # sent again with the device code (nothing is remembered between the calls).
        s.TokenCreateSerializer(data=request.data).is_valid(raise_exception=True)
        _configured()
        try:
            return Response(device.start())
        except device.DeviceError as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None


class DeviceTokenView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="sso_device_token",
        request=DeviceTokenSerializer,
        responses={201: s.NewTokenSerializer},
        description="Poll with the device code: 400 `authorization_pending` (or `slow_down`: "
        "poll less often) until the person has confirmed, then 201 with a new API token of "
        "theirs, groups synced as at a browser sign-in. Other codes end the attempt.",
    )
    def post(self, request):
        _configured()
        return _trade(request, DeviceTokenSerializer, "device_code", _device_user)


class LoopbackTokenView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="sso_cli_token",
        request=LoopbackTokenSerializer,
        responses={201: s.NewTokenSerializer},
        description="`berth login --sso` without the device grant: trade the one-time code "
        "the browser brought to the CLI's loopback address (GET /sso/cli/) for a new API "
        "token. 400 `invalid_code` when it is unknown, expired or used.",
    )
    def post(self, request):
        return _trade(request, LoopbackTokenSerializer, "code", _loopback_user)


def _trade(request, serializer, field: str, user_for) -> Response:
    """Validate the body; `user_for(body[field])` names the person (or raises ApiError);
    201 with a new token of theirs, with the body's token options."""
    body = serializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = dict(body.validated_data)
    return issue_token(user_for(data.pop(field)), data, scope=None)


def _device_user(device_code: str):
    try:
        return device.finish(device_code)
    except device.DeviceError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None


def _loopback_user(code: str):
    user = loopback.redeem(code)
    if user is None:
        raise ApiError(400, "invalid_code", "The code is unknown, expired or already used.")
    return user

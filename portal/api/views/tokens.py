"""API tokens of the caller: create (the secret is shown once), list, revoke.

Creating one also accepts a username and password (HTTP Basic), which is how
`berth login` gets its first token. A request made with a token scoped to some
teams can only create tokens within that scope.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.auth import BearerTokenAuthentication, PasswordAuthentication, scope_of
from portal.api.errors import ApiError
from portal.core import access
from portal.core.actions.tokens import create_api_token, revoke_api_token
from portal.core.models import ApiToken


def token_data(token: ApiToken, secret: str | None = None) -> dict:
    # None: every team of its user; [] once a scoped token's teams are all deleted
    token.team_slugs = sorted(t.slug for t in token.teams.all()) if token.scoped else None
    data = s.TokenSerializer(token).data
    if secret is not None:
        data["token"] = secret
    return data


# The secret is in the response to a create: no cache (browser, proxy) may keep it.
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def own_token(request, token_id: int) -> ApiToken:
    tokens = access.visible_tokens(request.user, scope=scope_of(request))
    token = tokens.filter(pk=token_id).prefetch_related("teams").first()
    if token is None:
        raise access.NotFound("token")
    return token


class TokenListView(APIView):
    authentication_classes = [
        BearerTokenAuthentication,
        SessionAuthentication,
        PasswordAuthentication,
    ]

    @extend_schema(
        operation_id="tokens_list",
        responses={200: s.TokenSerializer(many=True)},
        auth=[{"bearerAuth": []}, {"cookieAuth": []}],  # a password only creates a token
        description="The caller's tokens, newest first. Never the secrets. A token scoped "
        "to some teams lists only tokens scoped within them.",
    )
    def get(self, request):
        tokens = access.visible_tokens(request.user, scope=scope_of(request))
        tokens = tokens.prefetch_related("teams").order_by("-created_at", "-id")
        return Response([token_data(t) for t in tokens])

    @extend_schema(
        operation_id="tokens_create",
        request=s.TokenCreateSerializer,
        responses={201: s.NewTokenSerializer},
        description="Create a token for the caller; its secret is in this response only. "
        "Accepts HTTP Basic (username and password) so a CLI can log in.",
    )
    def post(self, request):
        body = s.TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return issue_token(request.user, body.validated_data, scope_of(request))


def issue_token(user, data: dict, scope: set[int] | None) -> Response:
    """201 with a new token of `user` (the validated TokenCreateSerializer `data`), no
    wider than `scope`; also how `berth login --sso` gets its token (portal/sso/api.py)."""
    teams = [access.get_team_for_user(user, slug, scope=scope) for slug in data.get("teams", [])]
    if not teams and scope is not None:
        # A scoped token makes tokens no wider than itself.
        teams = list(access.visible_teams(user, scope=scope))
        if not teams:
            raise ApiError(403, "permission_denied", "This token reaches no team.")
    expires = data.get("expires_in_days")
    try:
        token, secret = create_api_token(
            user,
            name=data["name"],
            teams=teams or None,
            expires_at=timezone.now() + timedelta(days=expires) if expires else None,
        )
    except (PermissionError, ValueError) as exc:
        raise ApiError(400, "invalid", str(exc)) from None
    return Response(token_data(token, secret), status=201, headers=NO_STORE)


class TokenDetailView(APIView):
    @extend_schema(
        operation_id="tokens_revoke_delete",
        responses={204: None},
        description="Revoke the token (it stays listed, as revoked).",
    )
    def delete(self, request, token_id: int):
        revoke_api_token(own_token(request, token_id), acting_user=request.user)
        return Response(status=204)


class TokenRevokeView(APIView):
    @extend_schema(
        operation_id="tokens_revoke",
        request=None,
        responses={200: s.TokenSerializer},
        description="Revoke the token; revoking a revoked token changes nothing.",
    )
    def post(self, request, token_id: int):
        token = own_token(request, token_id)
        revoke_api_token(token, acting_user=request.user)
        token.refresh_from_db()
        return Response(token_data(token))

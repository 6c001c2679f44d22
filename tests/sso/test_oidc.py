"""OpenID Connect against a real provider (oidc-provider on 127.0.0.1): the code flow
with PKCE, groups → teams, refusals (tampered, wrong audience, expired, replayed),
logout through the provider's end-session."""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import parse_qs, urlparse

import jwt
import pytest
from django.core.exceptions import SuspiciousOperation
from django.test import Client

from portal.core.models import Membership
from portal.sso.actions import save_group_mapping
from portal.sso.models import GroupMapping, SsoIdentity
from portal.sso.oidc import OidcBackend
from tests.sso.fixtures import apply_sso_env, oidc_env
from tests.sso.providers import through_provider


def sign_in(client: Client, login: str, next_url: str = ""):
    """Start at the portal, walk the provider's pages, come back: the callback's response
    and the callback URL (to replay)."""
    start = client.get("/oidc/authenticate/", {"next": next_url} if next_url else {})
    assert start.status_code == 302, start.content[:300]
    back = through_provider(start["Location"], login)
    parsed = urlparse(back)
    assert parsed.path == "/oidc/callback/", back
    return client.get(f"{parsed.path}?{parsed.query}"), f"{parsed.path}?{parsed.query}"


@pytest.fixture
def mapped(cluster):
    save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"),
        acting_user=cluster.personas.admin,
    )
    save_group_mapping(
        GroupMapping(pattern="alpha-leads", team=cluster.team_a, role="lead"),
        acting_user=cluster.personas.admin,
    )
    return cluster


def test_login_page_offers_the_provider_beside_or_instead_of_the_password_form(
    db, oidc, settings, monkeypatch
):
    page = Client().get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and 'name="password"' in page
    apply_sso_env(settings, monkeypatch, {"BERTH_SSO_PASSWORD_LOGIN": "0"})
    page = Client().get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and 'name="password"' not in page


def test_without_a_provider_only_the_password_form(db):
    page = Client().get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert Client().get("/oidc/authenticate/").status_code == 404


def test_code_flow_with_pkce_lands_on_the_mapped_team(mapped, oidc):
    oidc.set_groups("ada", ["gpu-alpha", "unrelated"])
    client = Client()
    start = client.get("/oidc/authenticate/")
    query = parse_qs(urlparse(start["Location"]).query)
    assert start["Location"].startswith(f"{oidc.issuer}/auth")  # from discovery
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]

    response, _ = sign_in(client, "ada")
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/")["Location"] == f"/teams/{mapped.team_a.slug}/"
    identity = SsoIdentity.objects.get(user__username="ada")
    assert (identity.issuer, identity.subject) == (oidc.issuer, "ada")
    assert identity.groups == ["gpu-alpha", "unrelated"]
    assert Membership.objects.get(user=identity.user).role == "member"

    oidc.set_groups("ada", ["gpu-alpha", "alpha-leads"])
    sign_in(Client(), "ada")
    assert Membership.objects.get(user=identity.user).role == "lead"
    oidc.set_groups("ada", [])
    sign_in(Client(), "ada")
    assert not Membership.objects.filter(user=identity.user).exists()


def test_no_mapped_group_signs_in_to_a_page_that_says_so(mapped, oidc):
    oidc.set_groups("bob", ["marketing"])
    client = Client()
    sign_in(client, "bob")
    page = client.get("/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "not in a team yet" in text and "marketing" in text and "mapped to a team" in text
    assert client.get(f"/teams/{mapped.team_a.slug}/").status_code == 404


def test_a_replayed_callback_is_refused(mapped, oidc):
    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    first, callback = sign_in(client, "ada")
    assert first.status_code == 302
    client.logout()
    again = client.get(callback)
    assert again.status_code == 403 and b"refused" in again.content
    assert client.get("/").status_code == 302  # not signed in


def test_a_local_account_is_not_taken_over(mapped, oidc):
    oidc.set_groups(mapped.personas.admin.username, ["gpu-alpha"])
    response, _ = sign_in(Client(), mapped.personas.admin.username)
    assert response.status_code == 403
    assert b"local account" in response.content
    assert not SsoIdentity.objects.exists()


def _id_token(client: Client) -> str:
    return client.session["oidc_id_token"]


def _claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def _verify(token: str, nonce: str | None = None):
    return OidcBackend().verify_token(token, nonce=nonce or _claims(token)["nonce"])


def test_the_id_token_checks(mapped, oidc, settings, monkeypatch):
    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    sign_in(client, "ada")
    token = _id_token(client)
    assert _verify(token)["sub"] == "ada"  # the genuine token passes

    header, payload, signature = token.split(".")
    forged = dict(_claims(token), sub="mallory")
    body = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    with pytest.raises(SuspiciousOperation, match="Signature verification failed"):
        _verify(f"{header}.{body}.{signature}")  # tampered payload
    with pytest.raises(SuspiciousOperation, match="Nonce verification failed"):
        _verify(token, nonce="a-nonce-from-another-sign-in")  # replayed into another flow

    settings.OIDC_RP_CLIENT_ID = "berth-other"
    with pytest.raises(SuspiciousOperation, match="Audience doesn.t match"):
        _verify(token)


def test_an_expired_id_token_is_refused(mapped, oidc, settings, monkeypatch):
    apply_sso_env(settings, monkeypatch, oidc_env(oidc, client="berth-short"))
    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    sign_in(client, "ada")
    token = _id_token(client)
    assert _claims(token)["exp"] - _claims(token)["iat"] == 2
    time.sleep(max(0.0, _claims(token)["exp"] - time.time()) + 1.1)
    with pytest.raises(SuspiciousOperation, match="Signature has expired"):
        _verify(token)


def test_logout_ends_the_session_and_the_providers(mapped, oidc):
    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    sign_in(client, "ada")
    token = _id_token(client)
    response = client.post("/logout/")
    location = urlparse(response["Location"])
    assert f"{location.scheme}://{location.netloc}" == oidc.issuer
    query = parse_qs(location.query)
    assert query["id_token_hint"] == [token]
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert client.get("/").status_code == 302  # the portal session is gone


def test_password_logout_still_goes_to_the_login_page(cluster, oidc):
    client = Client()
    client.force_login(cluster.personas.lead_a)
    assert client.post("/logout/")["Location"] == "/login/"


def test_past_the_maximum_age_the_session_and_tokens_stop_until_the_next_sign_in(mapped, oidc):
    from datetime import timedelta

    from django.utils import timezone

    from portal.core.actions.tokens import authenticate_token, create_api_token
    from portal.sso.actions import deactivate_stale_sso_users

    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    sign_in(client, "ada")
    user = SsoIdentity.objects.get(subject="ada").user
    _, token = create_api_token(user, name="ci")
    later = timezone.now() + timedelta(days=2)
    assert deactivate_stale_sso_users(max_age=timedelta(days=1), now=later) == 1
    assert client.get("/").status_code == 302 and authenticate_token(token) is None
    sign_in(client, "ada")
    assert client.get("/").status_code == 302 and client.get("/")["Location"] == "/teams/alpha/"
    assert authenticate_token(token) is not None


def test_the_device_grant_refuses_cleanly_until_confirmed(db, oidc):
    client = Client()
    start = client.post("/api/v1/sso/device/", {"name": "cli"}, content_type="application/json")
    assert start.status_code == 200 and start.json()["user_code"]
    poll = {"device_code": start.json()["device_code"], "name": "cli"}
    pending = client.post("/api/v1/sso/device/token/", poll, content_type="application/json")
    assert pending.status_code == 400
    assert pending.json()["error"]["code"] == "authorization_pending"
    bogus = client.post(
        "/api/v1/sso/device/token/",
        {"device_code": "not-a-code", "name": "cli"},
        content_type="application/json",
    )
    assert bogus.status_code == 400 and bogus.json()["error"]["code"] == "invalid_grant"
    unknown = client.post(
        "/api/v1/sso/device/token/", {"device_code": "x", "name": "cli", "extra": 1},
        content_type="application/json",
    )  # fmt: skip
    assert unknown.status_code == 400 and "extra" in unknown.json()["error"]["fields"]


def test_a_code_the_provider_refuses_ends_on_the_refusal_page(mapped, oidc):
    oidc.set_groups("ada", ["gpu-alpha"])
    client = Client()
    start = client.get("/oidc/authenticate/")
    back = urlparse(through_provider(start["Location"], "ada"))
    query = parse_qs(back.query)
    forged = f"{back.path}?state={query['state'][0]}&code=not-the-code"
    response = client.get(forged)
    assert response.status_code == 403 and b"refused" in response.content
    assert client.get("/").status_code == 302


def test_sso_sign_ins_are_not_failed_password_logins(mapped, oidc, login_throttle):
    """The login throttle counts password attempts; an OIDC sign-in (signed in or refused)
    passes it by, so many of them from one address lock nothing out."""
    from portal.core.logins import lockout_for

    oidc.set_groups("ada", ["gpu-alpha"])
    oidc.set_groups(mapped.personas.admin.username, ["gpu-alpha"])
    for _ in range(login_throttle + 1):
        response, _ = sign_in(Client(), "ada")
        assert response.status_code == 302 and response["Location"] == "/"
        refused, _ = sign_in(Client(), mapped.personas.admin.username)  # a local account
        assert refused.status_code == 403 and b"local account" in refused.content
    request = Client().get("/login/").wsgi_request
    assert lockout_for(request, "") is None and lockout_for(request, "ada") is None
    assert Client().login(username=mapped.personas.admin.username, password="x") is False


def test_the_cli_confirm_page_may_post_its_way_to_the_loopback_address(cluster):
    """Its form's answer redirects to http://127.0.0.1:PORT/; browsers hold that
    redirect to the page's form-action, 'self' only everywhere else."""
    client = Client()
    client.force_login(cluster.personas.lead_a)
    page = client.get("/sso/cli/", {"port": "8765", "state": "s" * 16})
    assert page.status_code == 200
    assert "form-action 'self' http://127.0.0.1:*;" in page["Content-Security-Policy"]
    assert "form-action 'self';" in Client().get("/login/")["Content-Security-Policy"]

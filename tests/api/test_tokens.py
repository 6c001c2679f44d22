"""Token endpoints: create (secret shown once), list (never the secret), revoke; `berth login`'s flow."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from portal.core.models import ApiToken, Membership
from tests.api.conftest import Api, bearer, error_of
from tests.api.test_auth import _basic

TOKENS = "/api/v1/tokens/"


def test_login_with_password_creates_a_token_shown_once(personas):
    client = Client()
    response = client.post(
        TOKENS,
        {"name": "laptop", "expires_in_days": 30},
        content_type="application/json",
        headers={"Authorization": _basic("member_a")},
    )

    assert response.status_code == 201, response.content
    body = response.json()
    secret = body["token"]
    assert secret.startswith(body["prefix"]) and body["teams"] is None
    assert body["expires_at"] is not None and body["usable"] is True
    assert not ApiToken.objects.filter(token_hash=secret).exists()  # stored hashed

    api = Api(Client(), {"Authorization": f"Bearer {secret}"})
    listed = api.get(TOKENS)
    assert [t["name"] for t in listed.json()] == ["laptop"]
    assert secret not in listed.content.decode() and "token" not in listed.json()[0]


def test_a_password_only_creates_tokens_and_lists_none(personas):
    """HTTP Basic is accepted by POST /api/v1/tokens/ alone (docs/security.md): listing
    the account's tokens with a password answered 200 (a security review's case)."""
    assert _login().status_code == 201  # a token to list
    response = Client().get(TOKENS, headers={"Authorization": _basic("member_a")})
    error_of(response, 401, "not_authenticated")


def _login(password=None, username="member_a", **extra):
    return Client(**extra).post(
        TOKENS,
        {"name": "x"},
        content_type="application/json",
        headers={"Authorization": _basic(username, password)},
    )


def test_a_wrong_password_is_refused_and_repeated_failures_are_throttled(personas, login_throttle):
    address = {"REMOTE_ADDR": "10.1.2.3"}
    for _ in range(login_throttle - 1):
        error_of(_login("wrong", **address), 401, "authentication_failed")
    error_of(_login("wrong", **address), 429, "throttled")  # the last allowed failure says so
    response = _login(**address)  # even the right password, until the window passes
    error_of(response, 429, "throttled")
    assert "Too many failed logins" in response.json()["error"]["message"]
    assert 0 < int(response["Retry-After"]) <= 900
    assert not ApiToken.objects.exists()


def test_rotating_x_forwarded_for_gives_no_extra_guesses(personas, login_throttle, settings):
    """Without a trusted proxy the header is the client's own words: the peer counts."""
    for i in range(login_throttle):
        forged = {"REMOTE_ADDR": "10.9.9.9", "HTTP_X_FORWARDED_FOR": f"203.0.113.{i}"}
        _login("wrong", username=f"nobody{i}", **forged)
    error_of(_login(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="198.51.100.1"), 429)
    assert not ApiToken.objects.exists()


def test_behind_the_proxy_the_address_it_saw_counts(personas, login_throttle, settings):
    """nginx appends the peer it saw; what the client wrote left of it counts for nothing."""
    settings.BERTH = settings.BERTH | {"TRUSTED_PROXIES": 1}
    nginx = "127.0.0.1"
    for i in range(login_throttle):
        forged = {"REMOTE_ADDR": nginx, "HTTP_X_FORWARDED_FOR": f"203.0.113.{i}, 192.0.2.7"}
        _login("wrong", username=f"nobody{i}", **forged)
    locked = {"REMOTE_ADDR": nginx, "HTTP_X_FORWARDED_FOR": "198.51.100.1, 192.0.2.7"}
    error_of(_login(**locked), 429, "throttled")
    # Another client behind the same proxy is not locked out by its neighbour.
    other = {"REMOTE_ADDR": nginx, "HTTP_X_FORWARDED_FOR": "192.0.2.8"}
    assert _login(**other).status_code == 201


def test_failures_are_also_counted_per_account(personas, login_throttle):
    for i in range(login_throttle):
        _login("wrong", REMOTE_ADDR=f"10.0.7.{i}")
    error_of(_login(REMOTE_ADDR="10.0.8.1"), 429, "throttled")  # a fresh address, same account
    assert _login(username="lead_a", REMOTE_ADDR="10.0.8.1").status_code == 201


def test_a_token_can_be_scoped_to_some_teams(personas, cluster, as_lead_a):
    Membership.objects.create(user=personas.lead_a, team=cluster.team_b, role="member")
    body = as_lead_a.post(TOKENS, {"name": "ci-beta", "teams": ["beta"]}).json()
    assert body["teams"] == ["beta"]
    scoped = Api(Client(), {"Authorization": f"Bearer {body['token']}"})
    assert [t["slug"] for t in scoped.get("/api/v1/teams/").json()] == ["beta"]


def test_a_token_cannot_be_scoped_to_a_team_of_others(as_lead_a):
    error_of(as_lead_a.post(TOKENS, {"name": "x", "teams": ["beta"]}), 404, "not_found")


def test_a_scoped_token_only_makes_tokens_within_its_scope(personas, cluster):
    Membership.objects.create(user=personas.lead_b, team=cluster.team_a, role="lead")
    beta_only = bearer(personas.lead_b, teams=[cluster.team_b])

    error_of(beta_only.post(TOKENS, {"name": "wider", "teams": ["alpha"]}), 404)
    child = beta_only.post(TOKENS, {"name": "child"}).json()
    assert child["teams"] == ["beta"]


def test_revoke_by_delete_and_by_post(personas, as_member_a):
    first = as_member_a.post(TOKENS, {"name": "one"}).json()
    second = as_member_a.post(TOKENS, {"name": "two"}).json()

    assert as_member_a.delete(f"{TOKENS}{first['id']}/").status_code == 204
    revoked = as_member_a.post(f"{TOKENS}{second['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert revoked.json()["usable"] is False
    for token in (first, second):
        error_of(
            Api(Client(), {"Authorization": f"Bearer {token['token']}"}).get("/api/v1/me/"), 401
        )
    # Revoking again changes nothing and is not an error.
    assert as_member_a.post(f"{TOKENS}{second['id']}/revoke/").status_code == 200


def test_other_users_tokens_are_not_found(personas, as_lead_a, as_lead_b):
    theirs = as_lead_b.post(TOKENS, {"name": "b"}).json()
    error_of(as_lead_a.delete(f"{TOKENS}{theirs['id']}/"), 404, "not_found")
    error_of(as_lead_a.post(f"{TOKENS}{theirs['id']}/revoke/"), 404, "not_found")
    assert theirs["id"] not in [t["id"] for t in as_lead_a.get(TOKENS).json()]
    assert ApiToken.objects.get(pk=theirs["id"]).revoked_at is None


def test_token_list_is_constant_in_queries(
    personas, cluster, as_lead_a, django_assert_max_num_queries
):
    for i in range(5):
        as_lead_a.post(TOKENS, {"name": f"t{i}", "teams": ["alpha"]})
    with django_assert_max_num_queries(4):  # token, tokens, their teams (+ last-used update)
        body = as_lead_a.get(TOKENS).json()
    assert len(body) == 6 and body[0]["teams"] == ["alpha"]


def test_a_scoped_token_reaches_no_token_wider_than_itself(personas, cluster):
    Membership.objects.create(user=personas.lead_a, team=cluster.team_b, role="member")
    unscoped = bearer(personas.lead_a)
    both = unscoped.post(TOKENS, {"name": "both", "teams": ["alpha", "beta"]}).json()
    alpha = unscoped.post(TOKENS, {"name": "alpha", "teams": ["alpha"]}).json()
    alpha_only = Api(Client(), {"Authorization": f"Bearer {alpha['token']}"})
    wider_ids = [t["id"] for t in unscoped.get(TOKENS).json() if t["name"] in ("test", "both")]

    assert [t["name"] for t in alpha_only.get(TOKENS).json()] == ["alpha"]
    for token_id in wider_ids:
        error_of(alpha_only.delete(f"{TOKENS}{token_id}/"), 404, "not_found")
        error_of(alpha_only.post(f"{TOKENS}{token_id}/revoke/"), 404, "not_found")
    assert ApiToken.objects.filter(pk__in=[*wider_ids, both["id"]], revoked_at=None).count() == 2
    # Its own scope's tokens, itself included, it may revoke.
    assert alpha_only.post(f"{TOKENS}{alpha['id']}/revoke/").status_code == 200


def test_token_secrets_are_never_cached(personas, as_member_a):
    created = as_member_a.post(TOKENS, {"name": "ci"})
    assert created.status_code == 201
    assert "no-store" in created["Cache-Control"]
    basic = _login()
    assert basic.status_code == 201 and "no-store" in basic["Cache-Control"]


def test_names_with_bidi_controls_are_refused(personas, cluster, as_member_a):
    """A U+202E makes `ci‮lanigiro` display reversed: the name could pass for another."""
    error = error_of(as_member_a.post(TOKENS, {"name": "ci\u202elanigiro"}), 400, "invalid")
    assert "U+202E" in error["fields"]["name"][0]
    cluster.team_a.name = "Alpha\u2066 (official)"
    with pytest.raises(ValidationError, match="U\\+2066"):
        cluster.team_a.full_clean()  # what the admin's form runs


def test_a_scoped_token_reaches_nothing_once_its_teams_are_gone(cluster, personas):
    """lead_a leads alpha and a sandbox team, and has a CI token scoped to the sandbox.
    An admin deletes the sandbox (no jobs: it may be deleted), which empties the token's
    scope rows: read as "no scope", the narrow token reached alpha, listed every team
    and could submit there (a security review's case). A scoped token fails closed."""
    from portal.core.models import Queue
    from tests.api.conftest import job_body
    from tests.factories import make_team

    sandbox = make_team("sandbox", cohort=cluster.cohort, quotas={cluster.h100: 8})
    Queue.objects.create(team=sandbox, name="default", max_runtime_seconds=3600)
    Membership.objects.create(user=personas.lead_a, team=sandbox, role=Membership.Role.LEAD)
    ci = bearer(personas.lead_a, teams=[sandbox])
    assert ci.get("/api/v1/teams/alpha/").status_code == 404
    sandbox.delete()
    assert ci.get("/api/v1/teams/alpha/").status_code == 404
    assert ci.get("/api/v1/teams/").json() == []
    assert ci.post("/api/v1/jobs/", job_body(team="alpha")).status_code in (403, 404)
    assert ci.post("/api/v1/jobs/", job_body()).status_code in (400, 403, 404)
    listed = ci.get("/api/v1/tokens/").json()  # itself, reaching no team; no other token
    assert [(t["name"], t["teams"]) for t in listed] == [("test", [])]

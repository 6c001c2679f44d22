"""Who may call: Bearer tokens (hashed, expiring, revocable, scoped) and browser sessions with CSRF."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.core.actions.tokens import create_api_token, revoke_api_token
from portal.core.models import ApiToken
from tests.api.conftest import Api, bearer, error_of, job_body

ME = "/api/v1/me/"


def test_no_credentials_answer_401_with_a_bearer_challenge(cluster):
    response = Client().get(ME)
    error_of(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    ["Bearer bat_not-a-real-token", "Bearer", "Bearer a b", "Bearer b\u00e4t"],
)
def test_bad_tokens_answer_401(cluster, header):
    response = Client().get(ME, headers={"Authorization": header})
    error_of(response, 401, "authentication_failed")


def test_a_token_is_stored_hashed_and_records_its_last_use(personas):
    token, secret = create_api_token(personas.member_a, name="ci")
    assert secret not in (token.token_hash, token.prefix) and secret.startswith(token.prefix)
    assert token.last_used_at is None

    Api(Client(), {"Authorization": f"Bearer {secret}"}).get(ME)

    token.refresh_from_db()
    assert token.last_used_at is not None


def test_revoked_and_expired_tokens_stop_working(personas):
    token, secret = create_api_token(personas.member_a, name="ci")
    api = Api(Client(), {"Authorization": f"Bearer {secret}"})
    assert api.get(ME).status_code == 200

    revoke_api_token(token, acting_user=personas.member_a)
    error_of(api.get(ME), 401, "authentication_failed")

    token, secret = create_api_token(
        personas.member_a, name="soon", expires_at=timezone.now() + timedelta(seconds=60)
    )
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    error_of(Api(Client(), {"Authorization": f"Bearer {secret}"}).get(ME), 401)


def test_a_deactivated_users_tokens_stop_working(personas):
    api = bearer(personas.member_a)
    personas.member_a.is_active = False
    personas.member_a.save()
    error_of(api.get(ME), 401)


def test_password_is_not_accepted_outside_token_creation(personas):
    client = Client()
    response = client.get("/api/v1/jobs/", headers={"Authorization": _basic("lead_a")})
    error_of(response, 401)


def test_browser_session_works_and_writes_need_the_csrf_token(personas):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(personas.member_a)
    assert browser.get(ME).json()["auth"] == "session"

    without = browser.post("/api/v1/jobs/", job_body(), content_type="application/json")
    assert "CSRF" in error_of(without, 403, "permission_denied")["message"]

    browser.get("/api/docs/")  # sets the csrftoken cookie
    csrf = browser.cookies["csrftoken"].value
    with_token = browser.post(
        "/api/v1/jobs/", job_body(), content_type="application/json", headers={"X-CSRFToken": csrf}
    )
    assert with_token.status_code == 201, with_token.content


def _basic(username: str, password: str | None = None) -> str:
    import base64

    from tests.factories import PASSWORD

    raw = f"{username}:{password or PASSWORD}".encode()
    return "Basic " + base64.b64encode(raw).decode()

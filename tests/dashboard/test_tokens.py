"""API tokens: created and shown once, listed with last use and expiry, revoked."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from portal.core.actions.tokens import authenticate_token
from portal.core.models import ApiToken


def create(client, follow=False, **fields):
    data = {"name": "ci", "expires_in_days": "30", "form_id": "a" * 32} | fields
    return client.post("/tokens/", data, follow=follow)


def test_created_token_is_shown_once_and_works(story, login):
    client = login(story.cluster.personas.lead_a)
    response = create(client, teams=[story.cluster.team_a.pk])
    plaintext = response.context["created"]["plaintext"]
    assert plaintext in response.content.decode()
    token = authenticate_token(plaintext)
    assert token is not None and token.name == "ci"
    assert list(token.teams.values_list("slug", flat=True)) == ["alpha"]
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    listing = client.get("/tokens/").content.decode()
    assert plaintext not in listing and token.prefix in listing


def test_a_resent_token_form_creates_no_second_token(story, login):
    client = login(story.cluster.personas.lead_a)
    create(client)
    again = create(client, follow=True)
    assert "already created" in again.content.decode()
    assert "created" not in again.context or again.context["created"] is None
    assert ApiToken.objects.filter(user=story.cluster.personas.lead_a).count() == 1


def test_token_that_never_expires_and_its_last_use(story, login):
    client = login(story.cluster.personas.lead_a)
    plaintext = create(client, expires_in_days="").context["created"]["plaintext"]
    authenticate_token(plaintext)
    page = client.get("/tokens/").content.decode()
    assert "never" in page  # expiry
    assert re.search(r">(now|\d+ s ago)</span>", page)  # last used, moments ago


def test_token_cannot_be_scoped_to_a_team_the_user_is_not_in(story, login):
    client = login(story.cluster.personas.member_a)
    response = create(client, teams=[story.cluster.team_b.pk])
    assert "teams" in response.context["form"].errors
    assert not ApiToken.objects.exists()


def test_revoke(story, login):
    client = login(story.cluster.personas.lead_a)
    plaintext = create(client).context["created"]["plaintext"]
    token = ApiToken.objects.get()
    response = client.post(f"/tokens/{token.pk}/revoke", follow=True)
    assert "was revoked" in response.content.decode()
    assert authenticate_token(plaintext) is None
    assert "revoked" in client.get("/tokens/").content.decode()


def test_token_page_query_count(story, login, django_assert_max_num_queries):
    client = login(story.cluster.personas.lead_a)
    for i in range(5):
        create(client, name=f"t{i}", form_id=str(i) * 32, teams=[story.cluster.team_a.pk])
    with django_assert_max_num_queries(6):
        assert client.get("/tokens/").status_code == 200


def test_the_page_showing_a_new_secret_is_never_cached(story, login):
    client = login(story.cluster.personas.lead_a)
    response = create(client)
    assert response.context["created"]["plaintext"] in response.content.decode()
    assert "no-store" in response["Cache-Control"]


def test_a_token_name_with_bidi_controls_is_refused(story, login):
    client = login(story.cluster.personas.lead_a)
    response = create(client, name="deploy\u202egnp.exe")
    assert response.context["created"] is None
    assert "bidirectional control" in response.content.decode()
    assert not ApiToken.objects.filter(user=story.cluster.personas.lead_a).exists()

"""LDAP sign-in against a real slapd: bind, wrong password, groups followed at the next
sign-in, local accounts kept apart, someone removed from the directory deactivated by
the periodic sync (their API tokens stop)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from portal.core.actions.tokens import authenticate_token, create_api_token
from portal.core.models import Membership
from portal.sso.actions import save_group_mapping
from portal.sso.models import GroupMapping, SsoIdentity
from portal.sso.tasks import sso_sync
from tests.factories import PASSWORD


@pytest.fixture
def directory(cluster, ldap_directory):
    """A fresh person in the directory (the server lives for the whole session) and
    mappings gpu-alpha → alpha member, alpha-leads → alpha lead."""
    for pattern, role in [("gpu-alpha", "member"), ("alpha-leads", "lead")]:
        save_group_mapping(
            GroupMapping(pattern=pattern, team=cluster.team_a, role=role),
            acting_user=cluster.personas.admin,
        )
    uid = f"ldap-{uuid.uuid4().hex[:8]}"
    ldap_directory.add_person(uid)
    ldap_directory.set_members("gpu-alpha", [uid])
    ldap_directory.set_members("alpha-leads", [])
    ldap_directory.uid = uid
    return ldap_directory


def log_in(username: str, password: str) -> tuple[Client, object]:
    client = Client()
    response = client.post("/login/", {"username": username, "password": password})
    return client, response


def test_bind_signs_in_and_lands_on_the_mapped_team(directory, cluster):
    client, response = log_in(directory.uid, f"{directory.uid}-password")
    assert response.status_code == 302
    assert client.get("/")["Location"] == f"/teams/{cluster.team_a.slug}/"
    identity = SsoIdentity.objects.get(user__username=directory.uid)
    assert identity.provider == "ldap" and identity.subject.startswith(f"uid={directory.uid},")
    assert identity.groups == ["gpu-alpha"]
    assert identity.user.email == f"{directory.uid}@example.com"
    assert not identity.user.has_usable_password()


def test_a_wrong_password_is_refused(directory):
    client, response = log_in(directory.uid, "not-the-password")
    assert response.status_code == 200 and b"correct username and password" in response.content
    assert not SsoIdentity.objects.filter(user__username=directory.uid).exists()


def test_group_changes_are_followed_at_the_next_sign_in(directory):
    log_in(directory.uid, f"{directory.uid}-password")
    membership = Membership.objects.get(user__username=directory.uid)
    assert membership.role == "member"

    directory.set_members("alpha-leads", [directory.uid])
    log_in(directory.uid, f"{directory.uid}-password")
    assert Membership.objects.get(user__username=directory.uid).role == "lead"

    directory.set_members("gpu-alpha", [])
    directory.set_members("alpha-leads", [])
    client, _ = log_in(directory.uid, f"{directory.uid}-password")
    assert not Membership.objects.filter(user__username=directory.uid).exists()
    assert "not in a team yet" in client.get("/").content.decode()


def test_local_accounts_still_sign_in_and_are_never_taken_over(directory, cluster):
    admin = cluster.personas.admin
    _, response = log_in(admin.username, PASSWORD)  # break-glass: the local password
    assert response.status_code == 302
    directory.add_person(cluster.personas.lead_a.username)
    _, response = log_in(cluster.personas.lead_a.username, "lead_a-password")  # LDAP's
    assert response.status_code == 200
    assert not SsoIdentity.objects.exists()


def test_removed_from_the_directory_deactivates_at_the_next_sync(directory):
    client, _ = log_in(directory.uid, f"{directory.uid}-password")
    user = SsoIdentity.objects.get(user__username=directory.uid).user
    _, token = create_api_token(user, name="ci")
    directory.set_members("alpha-leads", [directory.uid])

    assert sso_sync()["ldap_synced"] >= 1  # still there: groups re-read without a password
    assert Membership.objects.get(user=user).role == "lead"
    assert authenticate_token(token) is not None

    directory.remove_person(directory.uid)
    assert sso_sync()["ldap_deactivated"] == 1
    user.refresh_from_db()
    assert not user.is_active
    assert authenticate_token(token) is None
    assert client.get("/").status_code == 302  # the session is gone too
    assert not Membership.objects.filter(user=user).exists()


def test_an_ldap_account_an_admin_disabled_cannot_sign_in(directory):
    log_in(directory.uid, f"{directory.uid}-password")
    user = SsoIdentity.objects.get(user__username=directory.uid).user
    user.is_active = False
    user.save(update_fields=["is_active"])
    _, response = log_in(directory.uid, f"{directory.uid}-password")
    assert response.status_code == 200 and b"correct username and password" in response.content
    user.refresh_from_db()
    assert not user.is_active

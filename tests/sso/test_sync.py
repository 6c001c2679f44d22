"""The sign-in sync: groups asserted by a provider → team memberships, as a table.

Each row: the mapping rows, the user's memberships before (hand-made or mapped), the
groups asserted now → the memberships after, which of them the sync owns, and how
many audit entries the sync wrote.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core.actions.tokens import authenticate_token, create_api_token
from portal.core.models import AuditEntry, Membership
from portal.sso.actions import (
    Assertion,
    SsoRefused,
    deactivate_stale_sso_users,
    delete_group_mapping,
    save_group_mapping,
    sign_in_sso_user,
    sync_memberships,
)
from portal.sso.models import GroupMapping, MappedMembership, SsoIdentity
from tests.factories import make_user

# (name, mappings [(pattern, team, role)], before {team: (role, mapped?)}, groups,
#  after {team: (role, mapped?)}, audit entries written)
CASES = [
    ("no groups, no mapping", [], {}, [], {}, 0),
    ("exact group adds", [("gpu-alpha", "alpha", "member")], {}, ["gpu-alpha"],
     {"alpha": ("member", True)}, 1),
    ("case does not matter", [("GPU-Alpha", "alpha", "lead")], {}, ["gpu-alpha"],
     {"alpha": ("lead", True)}, 1),
    ("pattern adds", [("gpu-*", "beta", "viewer")], {}, ["gpu-anything"],
     {"beta": ("viewer", True)}, 1),
    ("strongest role wins", [("gpu-alpha", "alpha", "viewer"), ("alpha-leads", "alpha", "lead")],
     {}, ["gpu-alpha", "alpha-leads"], {"alpha": ("lead", True)}, 1),
    ("role changes", [("gpu-alpha", "alpha", "lead")], {"alpha": ("member", True)},
     ["gpu-alpha"], {"alpha": ("lead", True)}, 1),
    ("group gone removes", [("gpu-alpha", "alpha", "member")], {"alpha": ("member", True)},
     [], {}, 1),
    ("mapping gone removes", [], {"alpha": ("member", True)}, ["gpu-alpha"], {}, 1),
    ("unchanged writes nothing", [("gpu-alpha", "alpha", "member")],
     {"alpha": ("member", True)}, ["gpu-alpha"], {"alpha": ("member", True)}, 0),
    ("hand-made kept when group gone", [("gpu-alpha", "alpha", "member")],
     {"alpha": ("viewer", False)}, [], {"alpha": ("viewer", False)}, 0),
    ("hand-made role kept when mapped", [("gpu-alpha", "alpha", "lead")],
     {"alpha": ("viewer", False)}, ["gpu-alpha"], {"alpha": ("viewer", False)}, 0),
    ("add one, remove one, keep hand-made",
     [("gpu-alpha", "alpha", "member"), ("gpu-beta", "beta", "member")],
     {"beta": ("member", True), "gamma": ("lead", False)}, ["gpu-alpha"],
     {"alpha": ("member", True), "gamma": ("lead", False)}, 2),
]  # fmt: skip


def _teams(cluster):
    from tests.factories import make_team

    return {"alpha": cluster.team_a, "beta": cluster.team_b, "gamma": make_team("gamma")}


def _memberships(user) -> dict[str, tuple[str, bool]]:
    mapped = set(
        MappedMembership.objects.filter(membership__user=user).values_list(
            "membership_id", flat=True
        )
    )
    return {
        m.team.slug: (m.role, m.pk in mapped)
        for m in Membership.objects.filter(user=user).select_related("team")
    }


@pytest.mark.parametrize(
    "mappings,before,groups,after,audits", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_sync_table(cluster, mappings, before, groups, after, audits):
    teams = _teams(cluster)
    admin = cluster.personas.admin
    for pattern, team, role in mappings:
        save_group_mapping(
            GroupMapping(pattern=pattern, team=teams[team], role=role), acting_user=admin
        )
    user = make_user("sso-user")
    for team, (role, mapped) in before.items():
        membership = Membership.objects.create(user=user, team=teams[team], role=role)
        if mapped:
            MappedMembership.objects.create(membership=membership)
    audit_before = AuditEntry.objects.count()

    changes = sync_memberships(user, groups, source="oidc")

    assert _memberships(user) == after
    assert changes == audits
    assert AuditEntry.objects.count() - audit_before == audits


def test_every_change_has_an_audit_entry_naming_the_groups(cluster):
    admin = cluster.personas.admin
    mapping = save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"), acting_user=admin
    )
    user = make_user("ada")
    sync_memberships(user, ["gpu-alpha"], source="ldap")
    mapping.role = "lead"
    save_group_mapping(mapping, acting_user=admin)
    sync_memberships(user, ["gpu-alpha"], source="ldap")
    sync_memberships(user, [], source="ldap")

    entries = AuditEntry.objects.filter(target_type="membership").order_by("id")
    assert [(e.action, e.field, e.old_value, e.new_value) for e in entries] == [
        ("create", "role", "", "member"),
        ("update", "role", "member", "lead"),
        ("delete", "", "—", ""),
    ]
    assert all(e.actor is None and e.target_repr.startswith("ada in alpha") for e in entries)
    assert entries[0].note == "ldap sync; groups: gpu-alpha"
    assert entries[2].note == "ldap sync; groups: none"
    mapping_entries = AuditEntry.objects.filter(target_type="groupmapping")
    assert {(e.action, e.field) for e in mapping_entries} >= {
        ("create", "pattern"),
        ("update", "role"),
    }
    delete_group_mapping(mapping, acting_user=admin)
    assert AuditEntry.objects.filter(target_type="groupmapping", action="delete").count() == 1


def test_first_sign_in_creates_the_user_and_a_later_one_finds_it(cluster):
    save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"),
        acting_user=cluster.personas.admin,
    )
    said = Assertion(provider="oidc", issuer="https://idp", subject="s-1", username="grace",
                     email="grace@example.com", groups=("gpu-alpha",))  # fmt: skip
    user = sign_in_sso_user(said)
    assert not user.has_usable_password()
    assert _memberships(user) == {"alpha": ("member", True)}
    again = sign_in_sso_user(Assertion(**{**said.__dict__, "username": "renamed", "groups": ()}))
    assert again.pk == user.pk and _memberships(user) == {}
    assert SsoIdentity.objects.get(user=user).groups == []


def test_a_local_account_is_never_taken_over(cluster):
    said = Assertion(provider="oidc", issuer="https://idp", subject="s-2",
                     username=cluster.personas.admin.username)  # fmt: skip
    with pytest.raises(SsoRefused, match="local account"):
        sign_in_sso_user(said)
    assert not SsoIdentity.objects.exists()


def test_tokens_stop_after_the_maximum_age_and_work_again_after_sign_in(cluster):
    said = Assertion(provider="oidc", issuer="https://idp", subject="s-3", username="lin")
    user = sign_in_sso_user(said)
    _, plaintext = create_api_token(user, name="ci")
    assert authenticate_token(plaintext) is not None
    later = timezone.now() + timedelta(days=31)

    assert deactivate_stale_sso_users(max_age=timedelta(days=30), now=later) == 1
    assert authenticate_token(plaintext) is None
    assert deactivate_stale_sso_users(max_age=timedelta(days=30), now=later) == 0
    sign_in_sso_user(said)
    assert authenticate_token(plaintext) is not None
    actions = list(
        AuditEntry.objects.filter(target_type="user", target_id=str(user.pk)).values_list(
            "action", flat=True
        )
    )
    assert sorted(actions) == ["create", "deactivate", "reactivate"]


def test_the_admin_edits_mappings_through_the_audited_actions(cluster, client):
    client.force_login(cluster.personas.admin)
    add = client.post(
        "/admin/sso/groupmapping/add/",
        {"pattern": "gpu-alpha", "team": cluster.team_a.pk, "role": "member", "note": ""},
    )
    assert add.status_code == 302, add.content[:500]
    mapping = GroupMapping.objects.get()
    client.post(
        f"/admin/sso/groupmapping/{mapping.pk}/change/",
        {"pattern": "gpu-alpha", "team": cluster.team_a.pk, "role": "lead", "note": "leads"},
    )
    client.post(f"/admin/sso/groupmapping/{mapping.pk}/delete/", {"post": "yes"})
    entries = AuditEntry.objects.filter(target_type="groupmapping").order_by("id")
    assert [(e.action, e.field, e.new_value) for e in entries] == [
        ("create", "pattern", "gpu-alpha"),
        ("create", "team", "alpha"),
        ("create", "role", "member"),
        ("create", "note", ""),
        ("update", "role", "lead"),
        ("update", "note", "leads"),
        ("delete", "", ""),
    ]
    assert all(e.actor == cluster.personas.admin for e in entries)
    assert not GroupMapping.objects.exists()


def test_an_account_an_admin_disabled_stays_disabled(cluster):
    said = Assertion(provider="ldap", subject="uid=eve,ou=people", username="eve")
    user = sign_in_sso_user(said)
    user.is_active = False
    user.save(update_fields=["is_active"])  # by hand, in the admin
    with pytest.raises(SsoRefused, match="disabled"):
        sign_in_sso_user(said)
    user.refresh_from_db()
    assert not user.is_active

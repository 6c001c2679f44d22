"""The admin's interface, driven through the test client as an admin would."""

import pytest

from portal.core.models import AuditEntry, Quota, Team


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def _team_form(team, quotas, **overrides):
    """The POST body of the team change form with its three inlines."""
    data = {
        "slug": team.slug,
        "name": team.name,
        "weight": team.weight,
        "cohort": team.cohort_id or "",
        "queues-TOTAL_FORMS": 0,
        "queues-INITIAL_FORMS": 0,
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "quotas-TOTAL_FORMS": len(quotas),
        "quotas-INITIAL_FORMS": sum(1 for q in quotas if q.get("id")),
    }
    for i, quota in enumerate(quotas):
        for key, value in quota.items():
            data[f"quotas-{i}-{key}"] = "" if value is None else value
        data[f"quotas-{i}-team"] = team.pk
    data.update(overrides)
    return data


def test_admin_creates_team_with_quota_and_the_audit_trail_records_it(admin_client, cluster):
    response = admin_client.post(
        "/admin/core/team/add/",
        {
            "slug": "gamma",
            "name": "Gamma",
            "weight": 2,
            "cohort": cluster.cohort.pk,
            "queues-TOTAL_FORMS": 0,
            "queues-INITIAL_FORMS": 0,
            "memberships-TOTAL_FORMS": 0,
            "memberships-INITIAL_FORMS": 0,
            "quotas-TOTAL_FORMS": 1,
            "quotas-INITIAL_FORMS": 0,
            "quotas-0-flavor": cluster.h100.pk,
            "quotas-0-nominal": 8,
            "quotas-0-borrowing_limit": 4,
            "quotas-0-lending_limit": "",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    team = Team.objects.get(slug="gamma")
    quota = Quota.objects.get(team=team)
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (8, 4, None)
    created = AuditEntry.objects.filter(
        target_type="quota", target_id=str(quota.pk), action="create"
    )
    assert {e.field: e.new_value for e in created}["nominal"] == "8"
    assert created.first().actor == cluster.personas.admin


def test_editing_a_quota_inline_writes_old_and_new_value(admin_client, cluster):
    team = cluster.team_a
    quota = team.quotas.get(flavor=cluster.h100)
    other = team.quotas.get(flavor=cluster.a100)
    quotas = [
        {
            "id": quota.pk,
            "flavor": cluster.h100.pk,
            "nominal": 24,
            "borrowing_limit": None,
            "lending_limit": None,
        },
        {
            "id": other.pk,
            "flavor": cluster.a100.pk,
            "nominal": other.nominal,
            "borrowing_limit": None,
            "lending_limit": None,
        },
    ]
    response = admin_client.post(
        f"/admin/core/team/{team.pk}/change/", _team_form(team, quotas, weight=3)
    )
    assert response.status_code == 302, response.content[:3000]
    entry = AuditEntry.objects.get(target_type="quota", target_id=str(quota.pk), field="nominal")
    assert (entry.old_value, entry.new_value, entry.actor) == ("16", "24", cluster.personas.admin)
    weight = AuditEntry.objects.get(target_type="team", field="weight")
    assert (weight.old_value, weight.new_value) == ("1.0", "3.0")
    # The unchanged quota leaves no trace.
    assert not AuditEntry.objects.filter(target_type="quota", target_id=str(other.pk)).exists()
    # The trail is visible on the team's page.
    page = admin_client.get(f"/admin/core/team/{team.pk}/change/").content.decode()
    assert "16 → 24" in page


def test_invalid_quota_is_refused_with_a_message_and_nothing_changes(admin_client, cluster):
    team = cluster.team_a
    quota = team.quotas.get(flavor=cluster.h100)
    quotas = [
        {
            "id": quota.pk,
            "flavor": cluster.h100.pk,
            "nominal": 4,
            "borrowing_limit": None,
            "lending_limit": 10,
        }
    ]
    response = admin_client.post(f"/admin/core/team/{team.pk}/change/", _team_form(team, quotas))
    assert response.status_code == 200  # the form again, with errors
    assert (
        "quota_lending_limit_within_nominal" in response.content.decode()
        or "errornote" in response.content.decode()
    )
    quota.refresh_from_db()
    assert quota.nominal == 16 and quota.lending_limit is None
    assert not AuditEntry.objects.exists()


def test_every_admin_list_page_renders(admin_client, cluster):
    for model in [
        "team",
        "cohort",
        "gpuflavor",
        "quota",
        "queue",
        "membership",
        "node",
        "gpu",
        "job",
        "jobarray",
        "jobevent",
        "allocation",
        "usage",
        "reclaimbackoff",
        "auditentry",
        "schedulingpass",
        "nodebootstraptoken",
        "apitoken",
    ]:
        response = admin_client.get(f"/admin/core/{model}/?q=a")
        assert response.status_code == 200, model


def test_a_teams_reclaim_backoff_is_shown_with_when_it_ends(admin_client, cluster):
    from datetime import timedelta

    from django.utils import formats, timezone

    from portal.core.models import GpuFlavor, ReclaimBackoff

    at = timezone.now().replace(microsecond=0)
    ReclaimBackoff.objects.create(
        team=cluster.team_b,
        flavor=GpuFlavor.objects.get(name="h100-80gb"),
        reclaims=3,
        last_reclaim_at=at,
    )
    page = admin_client.get("https://rp2.alfred511.top/admin/core/reclaimbackoff/").content.decode()
    assert "beta" in page and "May borrow again from" in page
    ends = timezone.template_localtime(at + timedelta(seconds=240))  # the 3rd in a row
    assert formats.localize(ends) in page
    assert (
        admin_client.get("https://rp2.alfred511.top/admin/core/reclaimbackoff/add/").status_code
        == 403
    )


def test_non_staff_cannot_open_the_admin(client, personas):
    client.force_login(personas.lead_a)
    response = client.get("/admin/core/team/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_revoking_tokens_in_the_admin_writes_an_audit_row(admin_client, personas):
    from portal.core.actions.tokens import create_api_token

    token, _ = create_api_token(personas.member_a, name="ci")
    response = admin_client.post(
        "/admin/core/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    entry = AuditEntry.objects.filter(target_id=str(token.pk), action="revoke").get()
    assert entry.actor == personas.admin


def test_the_admin_cannot_scope_a_token_to_a_team_its_user_is_not_in(
    admin_client, personas, cluster
):
    from portal.core.models import ApiToken

    response = admin_client.post(
        "/admin/core/apitoken/add/",
        {"user": personas.member_a.pk, "name": "ci", "teams": [cluster.team_b.pk]},
    )
    assert response.status_code == 200  # the form again, with the error
    assert "teams the user belongs to" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_token_the_admin_scopes_is_scoped_and_unscoped_when_its_teams_are_cleared(
    admin_client, personas, cluster
):
    """ApiToken.scoped follows the teams the admin sets (actions.tokens.rescope_api_token,
    with an audit row); a team deleted does not unscope a token (test_tokens.py)."""
    from portal.core.models import ApiToken

    response = admin_client.post(
        "/admin/core/apitoken/add/",
        {"user": personas.member_a.pk, "name": "ci", "teams": [cluster.team_a.pk]},
    )
    assert response.status_code == 302, response.content[:500]
    token = ApiToken.objects.get()
    assert token.scoped and list(token.teams.all()) == [cluster.team_a]
    response = admin_client.post(
        f"/admin/core/apitoken/{token.pk}/change/", {"user": personas.member_a.pk, "name": "ci"}
    )
    assert response.status_code == 302, response.content[:500]
    token.refresh_from_db()
    assert not token.scoped and not token.teams.exists()
    actions = set(
        AuditEntry.objects.filter(target_id=str(token.pk)).values_list("action", flat=True)
    )
    assert {"scope", "unscope"} <= actions


def test_editing_the_expiry_of_a_token_whose_teams_are_gone_keeps_it_reaching_none(
    admin_client, personas, cluster
):
    """The admin's form cannot tell "scoped to teams all deleted" from "unscoped" (both:
    teams blank): saved for another field, such a token was unscoped and reached every
    team of its user (a review's case). Only a change of its teams rescopes it."""
    from portal.core.models import ApiToken, Membership, Queue
    from tests.api.conftest import bearer
    from tests.factories import make_team

    sandbox = make_team("sandbox", cohort=cluster.cohort, quotas={cluster.h100: 8})
    Queue.objects.create(team=sandbox, name="default", max_runtime_seconds=3600)
    Membership.objects.create(user=personas.lead_a, team=sandbox, role=Membership.Role.LEAD)
    ci = bearer(personas.lead_a, teams=[sandbox])
    sandbox.delete()
    assert ci.get("/api/v1/teams/alpha/").status_code == 404
    token = ApiToken.objects.get(user=personas.lead_a)
    response = admin_client.post(
        f"/admin/core/apitoken/{token.pk}/change/",
        {
            "user": personas.lead_a.pk,
            "name": "ci renamed",
            "expires_at_0": "2099-01-01",
            "expires_at_1": "00:00:00",
        },
    )
    assert response.status_code == 302, response.content[:500]
    assert ci.get("/api/v1/teams/alpha/").status_code == 404

"""The admin's interface, driven through the test client as an admin would."""

import pytest

from portal.core.models import AuditEntry, Node, Quota, Team


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


def test_cordon_drain_uncordon_actions(admin_client, cluster):
    node = cluster.nodes[0]
    for action, expected in [("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "none")]:
        form = {"action": action, "_selected_action": [node.pk]}
        if action != "uncordon":
            form |= {"apply": "yes", "reason": f"{action}: PSU swap"}
        response = admin_client.post("/admin/core/node/", form)
        assert response.status_code == 302
        node.refresh_from_db()
        assert node.cordon == expected
    trail = list(
        AuditEntry.objects.filter(target_type="node")
        .order_by("at", "id")
        .values_list("new_value", "note")
    )
    assert trail == [
        ("cordoned", "cordon: PSU swap"),
        ("draining", "drain: PSU swap"),
        ("none", ""),
    ]


@pytest.mark.parametrize("action", ["cordon", "drain"])
def test_cordon_and_drain_ask_for_a_reason_first(admin_client, cluster, action):
    node = cluster.nodes[0]
    chosen = {"action": action, "_selected_action": [node.pk]}

    asked = admin_client.post("/admin/core/node/", chosen)
    blank = admin_client.post("/admin/core/node/", chosen | {"apply": "yes", "reason": " "})

    for page in (asked, blank):
        assert page.status_code == 200 and 'name="reason"' in page.content.decode()
    assert "Give a reason." in blank.content.decode()
    node.refresh_from_db()
    assert node.cordon == "none" and not AuditEntry.objects.filter(target_type="node").exists()
    node.refresh_from_db()
    assert node.state == Node.Condition.READY


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
        "jobevent",
        "allocation",
        "usage",
        "auditentry",
        "schedulingpass",
        "nodebootstraptoken",
        "apitoken",
    ]:
        response = admin_client.get(f"/admin/core/{model}/?q=a")
        assert response.status_code == 200, model


def test_non_staff_cannot_open_the_admin(client, personas):
    client.force_login(personas.lead_a)
    response = client.get("/admin/core/team/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def _node_form(node, **overrides) -> dict:
    """The node's change form as the admin page posts it, with its GPU inline."""
    gpus = list(node.gpus.order_by("index"))
    data = {
        "hostname": node.hostname,
        "flavor": node.flavor_id,
        "rack": node.rack,
        "block": node.block,
        "cordon_reason": node.cordon_reason,
        "gpus-TOTAL_FORMS": len(gpus),
        "gpus-INITIAL_FORMS": len(gpus),
        "gpus-MIN_NUM_FORMS": 0,
        "gpus-MAX_NUM_FORMS": 1000,
    }
    for i, gpu in enumerate(gpus):
        data |= {
            f"gpus-{i}-id": gpu.pk,
            f"gpus-{i}-node": node.pk,
            f"gpus-{i}-index": gpu.index,
            f"gpus-{i}-uuid": gpu.uuid,
            f"gpus-{i}-product_name": gpu.product_name,
            f"gpus-{i}-memory_mib": gpu.memory_mib,
            f"gpus-{i}-health": gpu.health,
            f"gpus-{i}-health_reason": gpu.health_reason,
        }
    return data | overrides


def test_a_nodes_reason_edit_is_audited_and_what_agents_report_is_read_only(admin_client, cluster):
    node = cluster.nodes[0]
    gpu = node.gpus.order_by("index").first()
    form = _node_form(
        node,
        cordon_reason="PSU swap on Tuesday",
        **{"gpus-0-uuid": "GPU-forged", "gpus-0-index": 7, "gpus-0-memory_mib": 1},
    )

    response = admin_client.post(f"/admin/core/node/{node.pk}/change/", form)

    assert response.status_code == 302, response.content.decode()[:2000]
    node.refresh_from_db()
    assert node.cordon_reason == "PSU swap on Tuesday"
    entry = AuditEntry.objects.get(target_type="node", field="cordon_reason")
    assert entry.new_value == "PSU swap on Tuesday"
    reported = node.gpus.get(pk=gpu.pk)
    assert (reported.uuid, reported.index, reported.memory_mib) == (
        gpu.uuid,
        gpu.index,
        gpu.memory_mib,
    )

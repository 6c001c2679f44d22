"""The admin's node pages (issue 16 item 12): cordon and drain ask for a reason, every
change of a node is audited, what agents report is read-only, bootstrap tokens are
issued and revoked through actions, and an identity reset frees a hostname."""

from __future__ import annotations

import pytest

from portal.core.models import AuditEntry, Gpu, Node, NodeBootstrapToken


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def act(admin_client, action, node, reason=None):
    body = {"action": action, "_selected_action": [node.pk]}
    if reason is not None:
        body |= {"apply": "1", "reason": reason}
    return admin_client.post("/admin/core/node/", body)


def test_cordon_and_drain_ask_for_a_reason_and_audit_it(admin_client, cluster):
    node = cluster.nodes[0]
    page = act(admin_client, "cordon", node)
    assert page.status_code == 200 and b'name="reason"' in page.content
    node.refresh_from_db()
    assert node.cordon == "none" and not AuditEntry.objects.exists()
    assert act(admin_client, "cordon", node, reason="").status_code == 200  # still asks
    node.refresh_from_db()
    assert node.cordon == "none"

    for action, reason, expected in [
        ("cordon", "bad fan", "cordoned"),
        ("drain", "kernel upgrade", "draining"),
    ]:
        assert act(admin_client, action, node, reason=reason).status_code == 302
        node.refresh_from_db()
        assert (node.cordon, node.cordon_reason) == (expected, reason)
    assert (
        admin_client.post(
            "/admin/core/node/", {"action": "uncordon", "_selected_action": [node.pk]}
        ).status_code
        == 302
    )
    node.refresh_from_db()
    assert node.cordon == "none" and node.state == Node.Condition.READY
    trail = AuditEntry.objects.filter(target_type="node", field="cordon").order_by("at", "id")
    assert [(e.new_value, e.note) for e in trail] == [
        ("cordoned", "bad fan"),
        ("draining", "kernel upgrade"),
        ("none", ""),
    ]
    assert all(e.actor == cluster.personas.admin for e in trail)


def test_a_reason_edited_on_the_node_is_audited(admin_client, cluster):
    node = cluster.nodes[0]
    body = {
        "rack": node.rack,
        "block": "b9",
        "cordon_reason": "waiting for a new PSU",
        "gpus-TOTAL_FORMS": 0,
        "gpus-INITIAL_FORMS": 0,
    }
    response = admin_client.post(f"/admin/core/node/{node.pk}/change/", body)
    assert response.status_code == 302, response.content[:3000]
    node.refresh_from_db()
    assert (node.block, node.cordon_reason) == ("b9", "waiting for a new PSU")
    changes = {
        e.field: (e.old_value, e.new_value)
        for e in AuditEntry.objects.filter(target_type="node", target_id=str(node.pk))
    }
    assert changes == {"block": ("b1", "b9"), "cordon_reason": ("", "waiting for a new PSU")}


def test_what_agents_report_of_a_gpu_is_read_only(admin_client, cluster):
    node = cluster.nodes[0]
    page = admin_client.get(f"/admin/core/node/{node.pk}/change/").content.decode()
    for name in ("uuid", "index", "memory_mib", "product_name", "health"):
        assert f'name="gpus-0-{name}"' not in page
    assert "GPU-h100-0-0" in page  # shown, not editable
    gpu = node.gpus.get(index=0)
    gpu_page = admin_client.get(f"/admin/core/gpu/{gpu.pk}/change/").content.decode()
    assert 'name="uuid"' not in gpu_page and 'name="memory_mib"' not in gpu_page
    admin_client.post(f"/admin/core/gpu/{gpu.pk}/change/", {"uuid": "GPU-forged", "index": 5})
    gpu.refresh_from_db()
    assert (gpu.uuid, gpu.index) == ("GPU-h100-0-0", 0)
    assert not Gpu.objects.filter(uuid="GPU-forged").exists()


def test_the_admin_issues_a_bound_bootstrap_token_and_revokes_it(admin_client, cluster):
    refused = admin_client.post(
        "/admin/core/nodebootstraptoken/add/", {"description": "r7", "max_uses": 8}
    )
    assert refused.status_code == 200 and b"hostname pattern" in refused.content
    assert not NodeBootstrapToken.objects.exists()

    response = admin_client.post(
        "/admin/core/nodebootstraptoken/add/",
        {"description": "rack 7", "hostname_pattern": "gpu-r7-*", "max_uses": 8},
        follow=True,
    )
    assert response.status_code == 200
    token = NodeBootstrapToken.objects.get()
    assert (token.hostname_pattern, token.max_uses, token.created_by) == (
        "gpu-r7-*",
        8,
        cluster.personas.admin,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any("bbt_" in m for m in shown)
    admin_client.post(
        "/admin/core/nodebootstraptoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    actions = AuditEntry.objects.filter(target_type="nodebootstraptoken").values_list(
        "action", flat=True
    )
    assert sorted(actions) == ["create", "revoke"]


def test_the_admin_resets_a_nodes_identity_with_a_reason(admin_client, cluster):
    node = cluster.nodes[0]
    Node.objects.filter(pk=node.pk).update(token_hash="x" * 64)
    assert act(admin_client, "reset_identity", node).status_code == 200  # asks for a reason
    node.refresh_from_db()
    assert node.token_hash == "x" * 64
    assert act(admin_client, "reset_identity", node, reason="motherboard swap").status_code == 302
    node.refresh_from_db()
    assert node.token_hash == "" and node.condition == Node.Condition.NOT_READY
    entry = AuditEntry.objects.get(target_type="node", action="reset_identity")
    assert entry.note == "motherboard swap"


def test_the_node_page_says_whether_a_previous_token_is_still_accepted(
    admin_client, cluster, settings
):
    from datetime import timedelta

    from django.utils import timezone

    settings.BERTH = settings.BERTH | {"NODE_TOKEN_OVERLAP_S": 24 * 3600.0}
    settings.TIME_ZONE = "Europe/Berlin"  # the admin's zone, not UTC: the time is local
    node = cluster.nodes[0]
    page = admin_client.get(f"/admin/core/node/{node.pk}/change/")
    assert page.status_code == 200 and b"Previous token" in page.content
    assert b"still accepted until" not in page.content

    replaced = timezone.now() - timedelta(hours=1)  # the default overlap is 24 h
    Node.objects.filter(pk=node.pk).update(
        previous_token_hash="a" * 64, previous_token_replaced_at=replaced
    )
    page = admin_client.get(f"/admin/core/node/{node.pk}/change/")
    with timezone.override("Europe/Berlin"):
        ends = timezone.localtime(replaced + timedelta(hours=24))
    assert ends.utcoffset() and f"still accepted until {ends:%Y-%m-%d %H:%M %Z}".encode() in (
        page.content
    )

    Node.objects.filter(pk=node.pk).update(previous_token_replaced_at=replaced - timedelta(days=2))
    page = admin_client.get(f"/admin/core/node/{node.pk}/change/")
    assert b"expired (no longer accepted)" in page.content

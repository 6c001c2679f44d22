"""Notifications in the admin: webhooks checked by the same URL rule and audited;
deliveries read-only, with an action that sends them again."""

import pytest

from portal.core.actions.jobs import cancel_job
from portal.core.models import AuditEntry, Delivery, TeamWebhook
from tests.api.conftest import submit


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def hook_form(cluster, **overrides):
    return {
        "team": cluster.team_a.pk,
        "url": "https://hooks.example.com/berth",
        "events": '["failed"]',
        "team_events": "on",
        "description": "",
        "active": "on",
    } | overrides


def test_the_admin_adds_a_webhook_with_an_audit_row(admin_client, cluster):
    response = admin_client.post("/admin/core/teamwebhook/add/", hook_form(cluster))
    assert response.status_code == 302, response.content[:2000]
    hook = TeamWebhook.objects.get()
    assert hook.events == ["failed"]
    assert AuditEntry.objects.filter(target_type="teamwebhook", action="create").exists()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("url", "http://169.254.169.254/", "link-local"),
        ("url", "gopher://hooks.example.com/", "Only http"),
        ("events", '["finished"]', "Unknown events"),
    ],
)
def test_the_admin_cannot_add_a_refused_webhook(admin_client, cluster, field, value, words):
    response = admin_client.post(
        "/admin/core/teamwebhook/add/", hook_form(cluster, **{field: value})
    )
    assert response.status_code == 200
    assert words in " ".join(response.context["adminform"].form.errors[field])
    assert not TeamWebhook.objects.exists()


def test_deliveries_are_listed_and_sent_again(admin_client, cluster, personas):
    job = submit(cluster.team_a, personas.member_a, notify={"url": "https://hooks.example.com/x"})
    cancel_job(job, actor=personas.member_a)
    delivery = Delivery.objects.get()
    page = admin_client.get("/admin/core/delivery/")
    assert page.status_code == 200 and b"hooks.example.com/x" in page.content
    assert admin_client.get("/admin/core/delivery/add/").status_code == 403
    response = admin_client.post(
        "/admin/core/delivery/", {"action": "send_again", "_selected_action": [delivery.pk]}
    )
    assert response.status_code == 302
    assert Delivery.objects.count() == 2
    assert AuditEntry.objects.filter(target_type="delivery", action="redeliver").exists()

"""The pages run under their Content-Security-Policy in a real browser: nothing refused."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def test_the_dashboard_admin_and_api_docs_break_no_rule_of_the_policy(
    page, live_server, cluster, log_in
):
    violations = []
    page.on(
        "console",
        lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    cluster.personas.lead_a.is_staff = True
    cluster.personas.lead_a.save()
    log_in(page, cluster.personas.lead_a)
    for path in ("/teams/alpha/", "/teams/alpha/queue/", "/tokens/", "/api/docs/", "/admin/"):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/teams/alpha/queue/")
    page.wait_for_timeout(1500)  # a live fragment (htmx) swaps in at least once
    assert violations == []

"""Single sign-on in a real browser: Chromium signs in through the OpenID Connect
provider's own pages (oidc-provider on 127.0.0.1), lands on the team its group maps
to, and signs out of the portal and the provider."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from portal.sso.actions import save_group_mapping
from portal.sso.models import GroupMapping

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]


def test_sign_in_with_the_provider_lands_on_the_mapped_team_and_signs_out(
    page, live_server, cluster, oidc, shoot
):
    save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"),
        acting_user=cluster.personas.admin,
    )
    oidc.set_groups("ada", ["gpu-alpha"])

    page.goto(f"{live_server.url}/login/")
    shoot(page, "sso-00-login")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(oidc.issuer)}/interaction/"))
    page.locator('input[name="login"]').fill("ada")
    page.locator('input[name="password"]').fill("any password")
    shoot(page, "sso-01-provider-login")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()  # the provider's consent page

    expect(page).to_have_url(f"{live_server.url}/teams/alpha/")
    expect(page.locator(".userbox .who")).to_contain_text("ada · member")
    shoot(page, "sso-02-landed-on-team")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(oidc.issuer)}/session/end"))
    page.get_by_role("button", name="Yes, sign me out").click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/login/"))
    page.goto(f"{live_server.url}/teams/alpha/")
    expect(page).to_have_url(re.compile(r"/login/\?next="))

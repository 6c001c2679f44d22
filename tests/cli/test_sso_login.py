"""`berth login --sso` against the live portal and a real OpenID Connect provider: the
device authorization grant, confirmed on the provider's pages while the CLI polls."""

from __future__ import annotations

import json

import pytest

from berthcli import exitcodes
from portal.core.models import ApiToken
from portal.sso.actions import save_group_mapping
from portal.sso.models import GroupMapping
from tests.sso.providers import through_provider


@pytest.fixture
def opened(monkeypatch):
    """The pages the CLI opened in the browser."""
    pages: list[str] = []
    monkeypatch.setattr("webbrowser.open", pages.append)
    return pages


def test_login_sso_stores_a_normal_api_token(
    berth, live_server, cluster, oidc, home, opened, waits
):
    save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"),
        acting_user=cluster.personas.admin,
    )
    oidc.set_groups("ada", ["gpu-alpha"])
    # The first poll finds it pending; the person confirms at the provider meanwhile.
    waits.then = [lambda: None, lambda: through_provider(opened[0], "ada")]

    result = berth("--url", live_server.url, "login", "--sso")

    assert result.code == 0, result.err
    assert opened and opened[0].startswith(f"{oidc.issuer}/device") and "user_code=" in opened[0]
    assert "confirm the code" in result.err
    saved = json.loads(home.read_text())
    assert saved["token"].startswith("bat_")
    token = ApiToken.objects.get()
    assert token.user.username == "ada" and token.expires_at is not None
    whoami = berth("whoami")
    assert whoami.code == 0 and whoami.out.startswith("ada — alpha (member)")


def test_login_sso_without_a_provider_says_so(berth, live_server, cluster, home, opened):
    result = berth("--url", live_server.url, "login", "--sso")
    assert result.code == exitcodes.NOT_FOUND
    assert "not configured" in result.err and not opened and not home.exists()

"""`berth login --sso` against the live portal and a real OpenID Connect provider: the
device authorization grant, confirmed on the provider's pages while the CLI polls."""

from __future__ import annotations

import json
import re
import threading
from urllib.parse import parse_qs, urljoin, urlparse

import pytest
import requests

from berthcli import exitcodes
from portal.core.models import ApiToken
from portal.sso.actions import save_group_mapping
from portal.sso.models import GroupMapping
from tests.sso.fixtures import apply_sso_env
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


def _person_in_browser(page: str, login: str) -> None:
    """What the browser does with the page the CLI opened: sign in to the portal through
    the provider, confirm, and follow the redirect to the CLI's loopback address."""
    session = requests.Session()
    to_login = session.get(page, allow_redirects=False)
    next_url = parse_qs(urlparse(to_login.headers["Location"]).query)["next"][0]
    start = session.get(urljoin(page, "/oidc/authenticate/"), params={"next": next_url},
                        allow_redirects=False)  # fmt: skip
    confirm = session.get(through_provider(start.headers["Location"], login))
    assert "Log in the berth CLI?" in confirm.text, confirm.text[:300]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm.text).group(1)
    query = parse_qs(urlparse(confirm.url).query)
    done = session.post(
        confirm.url,
        data={"csrfmiddlewaretoken": csrf, "port": query["port"][0], "state": query["state"][0]},
    )
    assert done.status_code == 200 and "berth is logged in" in done.text


def test_without_the_device_grant_login_sso_uses_a_loopback_redirect(
    berth, live_server, cluster, oidc, home, settings, monkeypatch
):
    apply_sso_env(settings, monkeypatch, {"BERTH_OIDC_DEVICE_GRANT": "0"})
    save_group_mapping(
        GroupMapping(pattern="gpu-alpha", team=cluster.team_a, role="member"),
        acting_user=cluster.personas.admin,
    )
    oidc.set_groups("ada", ["gpu-alpha"])
    browsers: list[threading.Thread] = []

    def open_browser(page):
        browsers.append(threading.Thread(target=_person_in_browser, args=(page, "ada")))
        browsers[-1].start()

    monkeypatch.setattr("webbrowser.open", open_browser)
    result = berth("--url", live_server.url, "login", "--sso", "--team", "alpha")
    browsers[0].join(10)

    assert result.code == 0, result.err
    assert "/sso/cli/?port=" in result.err
    assert json.loads(home.read_text())["token"].startswith("bat_")
    token = ApiToken.objects.get(user__username="ada")
    assert [t.slug for t in token.teams.all()] == ["alpha"]


def test_a_loopback_code_works_once_and_only_for_berth_links(cluster, client):
    client.force_login(cluster.personas.member_a)
    assert client.get("/sso/cli/", {"port": "80", "state": "abcdefgh"}).status_code == 400
    assert client.get("/sso/cli/", {"port": "5000", "state": "<x>"}).status_code == 400
    page = client.get("/sso/cli/", {"port": "5000", "state": "abcdefgh"})
    assert page.status_code == 200 and b"member_a" in page.content
    back = client.post("/sso/cli/", {"port": "5000", "state": "abcdefgh"})
    location = urlparse(back["Location"])
    assert (location.scheme, location.netloc) == ("http", "127.0.0.1:5000")
    query = parse_qs(location.query)
    assert query["state"] == ["abcdefgh"]
    trade = {"code": query["code"][0], "name": "cli"}
    first = client.post("/api/v1/sso/cli/token/", trade, content_type="application/json")
    again = client.post("/api/v1/sso/cli/token/", trade, content_type="application/json")
    assert first.status_code == 201 and first.json()["token"].startswith("bat_")
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_code"
    assert ApiToken.objects.get().user == cluster.personas.member_a

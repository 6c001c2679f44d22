"""SSO fixtures, a pytest plugin (tests/conftest.py) so the SSO and browser tests share
one provider per session."""

from __future__ import annotations

import pytest

from tests.sso.providers import OidcProvider, Slapd, Unavailable


def _started(kind, tmp_path_factory, what: str):
    """A provider of this kind in a fresh folder, or the test skipped, naming what is missing."""
    try:
        return kind(tmp_path_factory.mktemp(kind.__name__.lower()))
    except Unavailable as exc:
        pytest.skip(f"no {what}: {exc}")


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    provider = _started(OidcProvider, tmp_path_factory, "OpenID Connect provider")
    yield provider
    provider.stop()


def apply_sso_env(settings, monkeypatch, env: dict[str, str]) -> None:
    """Settings as portal/sso/conf.py builds them from these environment variables."""
    from portal.sso.conf import sso_settings
    from portal.sso.oidc import forget_discovery

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, value in sso_settings().items():
        setattr(settings, name, value)
    forget_discovery()


@pytest.fixture
def oidc(oidc_provider, settings, monkeypatch):
    """The portal configured for the test provider, client `berth`; returns the provider."""
    oidc_provider.accounts.clear()
    apply_sso_env(settings, monkeypatch, oidc_env(oidc_provider))
    return oidc_provider


def oidc_env(provider, client: str = "berth") -> dict[str, str]:
    return {
        "BERTH_OIDC_ISSUER": provider.issuer,
        "BERTH_OIDC_CLIENT_ID": client,
        "BERTH_OIDC_CLIENT_SECRET": f"{client}-secret",
        "BERTH_OIDC_SCOPES": "openid profile email groups",
        "BERTH_OIDC_PROVIDER_NAME": "Test IdP",
    }


@pytest.fixture(scope="session")
def slapd(tmp_path_factory):
    server = _started(Slapd, tmp_path_factory, "LDAP server")
    yield server
    server.stop()


@pytest.fixture
def ldap_directory(slapd, settings, monkeypatch):
    """The portal configured for the test slapd (password form: LDAP, then local)."""
    from tests.sso.providers import GROUPS, PEOPLE, ROOT_DN, ROOT_PW

    apply_sso_env(
        settings,
        monkeypatch,
        {
            "BERTH_LDAP_URI": slapd.uri,
            "BERTH_LDAP_BIND_DN": ROOT_DN,
            "BERTH_LDAP_BIND_PASSWORD": ROOT_PW,
            "BERTH_LDAP_USER_BASE": PEOPLE,
            "BERTH_LDAP_GROUP_BASE": GROUPS,
        },
    )
    return slapd

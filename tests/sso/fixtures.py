"""SSO fixtures, a pytest plugin (tests/conftest.py) so the SSO and browser tests share
one provider per session."""

from __future__ import annotations

import pytest

from tests.sso.providers import OidcProvider, Unavailable


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    try:
        provider = OidcProvider(tmp_path_factory.mktemp("oidc"))
    except Unavailable as exc:
        pytest.skip(f"no OpenID Connect provider: {exc}")
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

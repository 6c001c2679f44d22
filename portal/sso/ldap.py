"""LDAP / Active Directory sign-in through django-auth-ldap (docs/auth.md).

django-auth-ldap finds the person (search as the service account), binds as them with
the password they typed, and reads their groups; this backend then hands those groups
to the same sync as OpenID Connect's. `sync_directory` re-reads every LDAP user from
the directory without a password (the periodic SSO sync): someone removed or
disabled there is deactivated, group changes are applied.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from django_auth_ldap.backend import LDAPBackend, _LDAPUser

from portal.core.logins import lockout_for
from portal.sso.actions import Assertion, SsoRefused, deactivate_sso_user, sign_in_sso_user
from portal.sso.backends import ActiveUsersOnly
from portal.sso.models import SsoIdentity, SsoProvider

log = logging.getLogger(__name__)


class LdapBackend(ActiveUsersOnly, LDAPBackend):
    """Directory passwords behind the same login throttle as local ones: a locked-out
    login is refused before the directory is asked; a wrong password is counted once,
    by the ThrottledModelBackend that authenticate() tries next (portal/core/logins.py)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if lockout_for(request, username) is not None:
            raise PermissionDenied("login throttled")
        return super().authenticate(request, username, password, **kwargs)

    def authenticate_ldap_user(self, ldap_user, password):
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        try:
            return _synced(user, ldap_user)
        except SsoRefused as exc:
            log.warning("LDAP sign-in refused for %r: %s", user.username, exc)
            return None

    def get_or_build_user(self, username, ldap_user):
        """Never take over a local account (or another provider's) with the same name."""
        user, built = super().get_or_build_user(username, ldap_user)
        if (
            not built
            and not SsoIdentity.objects.filter(user=user, provider=SsoProvider.LDAP).exists()
        ):
            log.warning("LDAP sign-in refused: %r is a local or other provider's account", username)
            raise _LDAPUser.AuthenticationFailed(f"{username!r} is not an LDAP account here")
        return user, built


def _synced(user, ldap_user):
    assertion = Assertion(
        provider=SsoProvider.LDAP,
        subject=ldap_user.dn,
        username=user.username,
        email=user.email,
        groups=tuple(sorted(ldap_user.group_names)),
    )
    return sign_in_sso_user(assertion, user=user)


def sync_directory() -> tuple[int, int]:
    """Re-read each active LDAP user from the directory: (synced, deactivated)."""
    backend = LdapBackend()
    synced = deactivated = 0
    identities = SsoIdentity.objects.filter(provider=SsoProvider.LDAP, user__is_active=True)
    for identity in identities.select_related("user"):
        user = backend.populate_user(identity.user.username)
        if user is None:
            deactivated += deactivate_sso_user(identity.user, reason="not in the LDAP directory")
        else:
            _synced(user, user.ldap_user)
            synced += 1
    return synced, deactivated

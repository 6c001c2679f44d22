"""SSO settings from the environment (read by portal/settings.py; docs/auth.md).

Nothing here imports models: settings import it. With no BERTH_OIDC_ISSUER and no
BERTH_LDAP_URI only local password accounts exist, as in `make run`.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choice, env_float, env_str

LDAP_GROUP_TYPES = ("groupOfNames", "groupOfUniqueNames", "posixGroup", "activeDirectory")


def sso_settings() -> dict:
    """The Django settings for the configured providers, and Berth's own SSO knobs."""
    values: dict = {
        # Every password check goes through the login throttle (portal/core/logins.py).
        "AUTHENTICATION_BACKENDS": ["portal.core.logins.ThrottledModelBackend"],
        "BERTH_SSO": {
            # Show the password form on /login/ (off: only "Sign in with …"; break-glass
            # admins still have /admin/login/).
            "PASSWORD_LOGIN": env_bool("BERTH_SSO_PASSWORD_LOGIN", True),
            # An SSO user who has not signed in (or, for LDAP, been found in the
            # directory) for this long is deactivated: sessions and API tokens stop.
            # 0 turns it off.
            "MAX_AGE_S": env_float("BERTH_SSO_MAX_AGE_S", 30 * 24 * 3600.0, minimum=0.0),
            "SYNC_INTERVAL_S": env_float("BERTH_SSO_SYNC_INTERVAL_S", 3600.0, minimum=60.0),
            "OIDC": None,
            "LDAP": bool(env_str("BERTH_LDAP_URI")),
        },
    }
    if env_str("BERTH_OIDC_ISSUER"):
        values.update(_oidc())
        # First: the callback's code exchange must not pass through the password throttle
        # (OidcBackend.authenticate); it ignores password logins.
        values["AUTHENTICATION_BACKENDS"].insert(0, "portal.sso.oidc.OidcBackend")
        values["BERTH_SSO"]["OIDC"] = _oidc_berth()
    if values["BERTH_SSO"]["LDAP"]:
        values.update(_ldap())
        values["AUTHENTICATION_BACKENDS"].insert(-1, "portal.sso.ldap.LdapBackend")
    return values


def _oidc_berth() -> dict:
    return {
        "ISSUER": env_str("BERTH_OIDC_ISSUER").rstrip("/"),
        "PROVIDER_NAME": env_str("BERTH_OIDC_PROVIDER_NAME", "single sign-on"),
        "USERNAME_CLAIM": env_str("BERTH_OIDC_USERNAME_CLAIM", "preferred_username"),
        "GROUPS_CLAIM": env_str("BERTH_OIDC_GROUPS_CLAIM", "groups"),
        # `berth login --sso` uses the device grant where the provider offers it; 0: the
        # loopback redirect always (a client not allowed the device grant).
        "DEVICE_GRANT": env_bool("BERTH_OIDC_DEVICE_GRANT", True),
    }


def _oidc() -> dict:
    """mozilla-django-oidc's settings; endpoints come from discovery (portal/sso/oidc.py)."""
    return {
        "OIDC_RP_CLIENT_ID": env_str("BERTH_OIDC_CLIENT_ID", required=True),
        "OIDC_RP_CLIENT_SECRET": env_str("BERTH_OIDC_CLIENT_SECRET", ""),
        "OIDC_RP_SCOPES": env_str("BERTH_OIDC_SCOPES", "openid profile email"),
        "OIDC_RP_SIGN_ALGO": env_choice(
            "BERTH_OIDC_SIGN_ALGO", "RS256", ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")
        ),
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_STORE_ID_TOKEN": True,  # the id_token_hint of the provider's end-session
        "OIDC_TIMEOUT": env_float("BERTH_OIDC_TIMEOUT_S", 10.0, minimum=1.0),
        "OIDC_CREATE_USER": True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
        "LOGIN_REDIRECT_URL_FAILURE": "sso_failed",
    }


def _ldap() -> dict:
    """django-auth-ldap's settings: search for the user, bind as them, read their groups."""
    import ldap
    from django_auth_ldap import config

    group_type = env_choice("BERTH_LDAP_GROUP_TYPE", "groupOfNames", LDAP_GROUP_TYPES)
    user_base = env_str("BERTH_LDAP_USER_BASE", required=True)
    group_base = env_str("BERTH_LDAP_GROUP_BASE", required=True)
    types = {
        "groupOfNames": (config.GroupOfNamesType, "(objectClass=groupOfNames)"),
        "groupOfUniqueNames": (config.GroupOfUniqueNamesType, "(objectClass=groupOfUniqueNames)"),
        "posixGroup": (config.PosixGroupType, "(objectClass=posixGroup)"),
        "activeDirectory": (config.NestedActiveDirectoryGroupType, "(objectClass=group)"),
    }
    group_class, group_filter = types[group_type]
    user_filter = env_str("BERTH_LDAP_USER_FILTER", "(uid=%(user)s)")
    if "%(user)s" not in user_filter:
        raise ImproperlyConfigured("BERTH_LDAP_USER_FILTER must contain %(user)s")
    return {
        "AUTH_LDAP_SERVER_URI": env_str("BERTH_LDAP_URI"),
        "AUTH_LDAP_BIND_DN": env_str("BERTH_LDAP_BIND_DN", ""),
        "AUTH_LDAP_BIND_PASSWORD": env_str("BERTH_LDAP_BIND_PASSWORD", ""),
        "AUTH_LDAP_START_TLS": env_bool("BERTH_LDAP_START_TLS", False),
        "AUTH_LDAP_USER_SEARCH": config.LDAPSearch(user_base, ldap.SCOPE_SUBTREE, user_filter),
        "AUTH_LDAP_GROUP_SEARCH": config.LDAPSearch(
            group_base, ldap.SCOPE_SUBTREE, env_str("BERTH_LDAP_GROUP_FILTER", group_filter)
        ),
        "AUTH_LDAP_GROUP_TYPE": group_class(),
        "AUTH_LDAP_USER_ATTR_MAP": {"email": env_str("BERTH_LDAP_EMAIL_ATTR", "mail")},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_FIND_GROUP_PERMS": False,
        "AUTH_LDAP_CACHE_TIMEOUT": 0,
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: env_float("BERTH_LDAP_TIMEOUT_S", 5.0, minimum=0.5)
        },
    }

"""Template tags for the login page and the no-team page."""

from django import template
from django.conf import settings

from portal.sso.models import SsoIdentity

register = template.Library()


@register.simple_tag
def sso_login():
    """{% sso_login as sso %}: sso.oidc (its settings, or None), sso.ldap, sso.password
    (show the password form: always when no provider is configured)."""
    conf = settings.BERTH_SSO
    return {
        "oidc": conf["OIDC"],
        "ldap": conf["LDAP"],
        "password": conf["PASSWORD_LOGIN"] or not conf["OIDC"],
    }


@register.inclusion_tag("sso/sign_in_options.html")
def sso_sign_in_options(sso, next_url=""):
    return {**sso, "next": next_url}


@register.inclusion_tag("sso/no_team_note.html")
def sso_no_team_note(user):
    """Why an SSO user sees no team: which groups the provider asserted."""
    return {"identity": SsoIdentity.objects.filter(user=user).first()}

"""The Content-Security-Policy of every HTML page (the dashboard, the what-if pages,
the API docs page, the admin, the error pages).

Scripts and style sheets come only from this site's static files: no inline
<script> or <style>, no eval (htmx runs with allowEval and allowScriptTags off,
templates/base.html), no plugins, no framing, forms post only here. No style
*attributes* either: a page's one-off spacing is a class of dashboard.css and a
bar's width a class of pct.css (`{{ value|pct:"w" }}`,
portal/dashboard/templatetags/berth_pct.py), so an injected attribute cannot
restyle a page (overlay a fake form, hide a warning). Scripts may still set
styles through the DOM (Chart.js sizes its canvas). JSON responses get no
policy: they are never rendered as pages.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def policy() -> str:
    """POLICY, and with single sign-on the OpenID Connect provider's origin among the
    form targets: the Log out form posts to /logout/, which redirects to the provider's
    end-session endpoint (portal/sso/oidc.py), and browsers hold a form's redirects to
    form-action too."""
    oidc = settings.BERTH_SSO.get("OIDC")
    if not oidc:
        return POLICY
    issuer = urlsplit(oidc["ISSUER"])
    origin = f"{issuer.scheme}://{issuer.netloc}"
    return POLICY.replace("form-action 'self'", f"form-action 'self' {origin}")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.get("Content-Type", "").startswith("text/html"):
            response.headers.setdefault("Content-Security-Policy", policy())
        return response

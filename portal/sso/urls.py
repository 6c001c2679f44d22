from django.urls import path

from portal.sso import loopback, oidc

# Unnamespaced: mozilla-django-oidc reverses these names.
urlpatterns = [
    path("oidc/authenticate/", oidc.SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
    path("sso/cli/", loopback.cli_sign_in, name="sso_cli"),
]

from django.urls import path

from portal.sso import oidc

# Unnamespaced: mozilla-django-oidc reverses these names.
urlpatterns = [
    path("oidc/authenticate/", oidc.SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
]

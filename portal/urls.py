from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal.agentapi import views as agentapi
from portal.core.logins import AdminLoginForm, LoginForm
from portal.ops import views as ops
from portal.sso.oidc import SsoLogoutView

# The admin's login goes through the same login throttle as the dashboard's and the API's.
admin.site.login_form = AdminLoginForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("api/agent/v1/register", agentapi.register, name="agent-register"),
    path("api/agent/v1/heartbeat", agentapi.heartbeat_view, name="agent-heartbeat"),
    path("api/", include("portal.api.urls")),
    path(
        "login/",
        auth_views.LoginView.as_view(
            redirect_authenticated_user=True, authentication_form=LoginForm
        ),
        name="login",
    ),
    path("logout/", SsoLogoutView.as_view(), name="logout"),
    path("", include("portal.sso.urls")),
    path("whatif/", include("portal.whatif.urls")),
    path("", include("portal.dashboard.urls")),
]

handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"

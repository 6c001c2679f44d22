from django.contrib import admin
from django.urls import path

from portal.agentapi import views as agentapi
from portal.ops import views as ops

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("api/agent/v1/register", agentapi.register, name="agent-register"),
    path("api/agent/v1/heartbeat", agentapi.heartbeat_view, name="agent-heartbeat"),
]

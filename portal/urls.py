from django.contrib import admin
from django.urls import path

from portal.ops import views as ops

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
]

from django.urls import path

from portal.whatif import views

app_name = "whatif"

urlpatterns = [
    path("", views.index, name="index"),
    path("<int:run_id>/", views.detail, name="detail"),
    path("<int:run_id>/status.json", views.status_json, name="status"),
]

from django.urls import path

from portal.dashboard.views import (
    cluster,
    home,
    jobs,
    notifications,
    overview,
    queue,
    submit,
    tokens,
)

app_name = "dashboard"

urlpatterns = [
    path("", home.home, name="home"),
    path("teams/<slug:slug>/", overview.overview, name="overview"),
    path("teams/<slug:slug>/usage.csv", overview.usage_csv, name="usage_csv"),
    path("teams/<slug:slug>/queue/", queue.queue, name="queue"),
    path("teams/<slug:slug>/cluster/", cluster.cluster, name="cluster"),
    path("teams/<slug:slug>/submit/", submit.submit, name="submit"),
    path("teams/<slug:slug>/notifications/", notifications.notifications, name="notifications"),
    path(
        "teams/<slug:slug>/notifications/webhooks/<int:webhook_id>/delete",
        notifications.webhook_delete,
        name="webhook_delete",
    ),
    path(
        "teams/<slug:slug>/notifications/secret/rotate",
        notifications.secret_rotate,
        name="secret_rotate",
    ),
    path(
        "teams/<slug:slug>/notifications/deliveries/<int:delivery_id>/redeliver",
        notifications.redeliver,
        name="redeliver",
    ),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel", jobs.cancel, name="job_cancel"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", tokens.revoke, name="token_revoke"),
]

"""Routes of the REST API, mounted at /api/ by portal/urls.py."""

from django.urls import path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView

from portal.api import schema  # noqa: F401 — registers the OpenAPI auth extensions
from portal.api.errors import not_found
from portal.api.views import docs, jobs, notifications, tenancy, tokens
from portal.sso import api as sso_api


class IdConverter:
    """Ids of at most 18 digits, so no path can overflow a bigint column."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(value)


register_converter(IdConverter, "berth_id")

urlpatterns = [
    path("v1/jobs/", jobs.JobsView.as_view(), name="api-jobs"),
    path("v1/jobs/bulk/", jobs.BulkSubmitView.as_view(), name="api-jobs-bulk"),
    path("v1/jobs/<berth_id:job_id>/", jobs.JobDetailView.as_view(), name="api-job"),
    path("v1/jobs/<berth_id:job_id>/cancel/", jobs.JobCancelView.as_view(), name="api-job-cancel"),
    path("v1/jobs/<berth_id:job_id>/logs/", jobs.JobLogsView.as_view(), name="api-job-logs"),
    path("v1/queues/", tenancy.QueueListView.as_view(), name="api-queues"),
    path("v1/teams/", tenancy.TeamListView.as_view(), name="api-teams"),
    path("v1/teams/<slug:slug>/", tenancy.TeamDetailView.as_view(), name="api-team"),
    path(
        "v1/teams/<slug:slug>/webhooks/",
        notifications.WebhookListView.as_view(),
        name="api-webhooks",
    ),
    path(
        "v1/teams/<slug:slug>/webhooks/<berth_id:webhook_id>/",
        notifications.WebhookDetailView.as_view(),
        name="api-webhook",
    ),
    path(
        "v1/teams/<slug:slug>/webhook-secret/",
        notifications.WebhookSecretView.as_view(),
        name="api-webhook-secret",
    ),
    path(
        "v1/teams/<slug:slug>/deliveries/",
        notifications.DeliveryListView.as_view(),
        name="api-deliveries",
    ),
    path(
        "v1/teams/<slug:slug>/deliveries/<berth_id:delivery_id>/redeliver/",
        notifications.RedeliverView.as_view(),
        name="api-redeliver",
    ),
    path("v1/nodes/", tenancy.NodeListView.as_view(), name="api-nodes"),
    path("v1/me/", tenancy.MeView.as_view(), name="api-me"),
    path("v1/tokens/", tokens.TokenListView.as_view(), name="api-tokens"),
    path("v1/tokens/<berth_id:token_id>/", tokens.TokenDetailView.as_view(), name="api-token"),
    path(
        "v1/tokens/<berth_id:token_id>/revoke/",
        tokens.TokenRevokeView.as_view(),
        name="api-token-revoke",
    ),
    path("v1/sso/device/", sso_api.DeviceStartView.as_view(), name="api-sso-device"),
    path("v1/sso/device/token/", sso_api.DeviceTokenView.as_view(), name="api-sso-device-token"),
    path("v1/sso/cli/token/", sso_api.LoopbackTokenView.as_view(), name="api-sso-cli-token"),
    re_path(r"^v1/", not_found),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", docs.api_docs, name="api-docs"),
]

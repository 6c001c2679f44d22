"""Notifications, for a team's leads: webhooks, the signing secret, and the deliveries
with their attempts, status codes and last errors (docs/dashboard.md)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.core.access import may_manage_notifications
from portal.core.actions import notifications as actions
from portal.core.jobspec import SpecError
from portal.core.models import Delivery, TeamWebhook
from portal.dashboard.forms import WebhookForm
from portal.dashboard.shortcuts import render_page, team_page

DELIVERIES_SHOWN = 50


def _lead(ctx) -> None:
    if not may_manage_notifications(ctx.role):
        raise PermissionDenied("Only the team's leads manage its notifications.")


@never_cache  # the page shows the signing secret
@team_page
def notifications(request, ctx):
    _lead(ctx)
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            actions.create_webhook(ctx.team, acting_user=request.user, **form.cleaned_data)
        except SpecError as exc:
            for name, problems in exc.fields.items():
                for problem in problems:
                    form.add_error(name if name in form.fields else None, problem)
        else:
            messages.success(request, f"Webhook {form.cleaned_data['url']} added.")
            return redirect("dashboard:notifications", ctx.team.slug)
    context = {
        "form": form,
        "webhooks": TeamWebhook.objects.filter(team=ctx.team),
        "deliveries": Delivery.objects.filter(team=ctx.team)
        .select_related("job")
        .order_by("-created_at", "-id")[:DELIVERIES_SHOWN],
        "secret": actions.team_secret(ctx.team),
    }
    return render_page(
        request,
        "dashboard/notifications.html",
        context,
        ctx=ctx,
        section="notifications",
        live=False,
    )


@require_POST
@team_page
def webhook_delete(request, ctx, webhook_id: int):
    _lead(ctx)
    hook = TeamWebhook.objects.filter(team=ctx.team, pk=webhook_id).first()
    if hook is None:
        raise Http404("No such webhook.")
    actions.delete_webhook(hook, acting_user=request.user)
    messages.success(request, f"Webhook {hook.url} removed.")
    return redirect("dashboard:notifications", ctx.team.slug)


@require_POST
@team_page
def secret_rotate(request, ctx):
    _lead(ctx)
    actions.rotate_webhook_secret(ctx.team, acting_user=request.user)
    messages.success(request, "A new signing secret is in use; update your receivers.")
    return redirect("dashboard:notifications", ctx.team.slug)


@require_POST
@team_page
def redeliver(request, ctx, delivery_id: int):
    _lead(ctx)
    delivery = Delivery.objects.filter(team=ctx.team, pk=delivery_id).first()
    if delivery is None:
        raise Http404("No such delivery.")
    copy = actions.redeliver(delivery, acting_user=request.user)
    messages.success(request, f"Delivery {delivery.pk} is sent again as {copy.pk}.")
    return redirect("dashboard:notifications", ctx.team.slug)

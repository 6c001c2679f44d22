"""API tokens for the CLI and CI: create (the secret is shown once), list, revoke."""

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.core.access import visible_teams
from portal.core.actions.tokens import create_api_token, revoke_api_token
from portal.core.models import ApiToken
from portal.dashboard.forms import ApiTokenForm
from portal.dashboard.shortcuts import login_required_page, nav_context

# How many recent form ids a session remembers to recognise a re-sent form.
SEEN_FORMS = 20


@never_cache  # the page after a create holds the secret: no cache may keep it
@login_required_page
def tokens(request):
    """Create, list and revoke the user's tokens.

    The plaintext is rendered in the POST's own response and stored nowhere, not
    even in the session. A re-sent form (reload, back button) is recognised by
    its form id and creates no second token.
    """
    form = ApiTokenForm(request.POST or None, user=request.user)
    created = None
    if request.method == "POST" and form.is_valid():
        if not _first_time(request, form.cleaned_data["form_id"]):
            messages.info(request, "That token was already created; its secret is shown only once.")
            return redirect("dashboard:tokens")
        days = form.cleaned_data["expires_in_days"]
        token, plaintext = create_api_token(
            request.user,
            name=form.cleaned_data["name"],
            teams=list(form.cleaned_data["teams"]) or None,
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        created = {"token": token, "plaintext": plaintext}
        form = ApiTokenForm(user=request.user)
    context = {
        "form": form,
        "created": created,
        "tokens": ApiToken.objects.filter(user=request.user)
        .prefetch_related("teams")
        .order_by("-created_at"),
        "now": timezone.now(),
        **nav_context(request, _last_team(request), "tokens"),
    }
    return render(request, "dashboard/tokens.html", context)


@require_POST
@login_required_page
def revoke(request, token_id: int):
    token = ApiToken.objects.filter(user=request.user, pk=token_id).first()
    if token is None:
        raise Http404("No such token.")
    if revoke_api_token(token, acting_user=request.user):
        messages.success(request, f"Token {token.name} ({token.prefix}…) was revoked.")
    return redirect("dashboard:tokens")


def _first_time(request, form_id: str) -> bool:
    seen = request.session.get("token_forms", [])
    if form_id in seen:
        return False
    request.session["token_forms"] = [*seen, form_id][-SEEN_FORMS:]
    return True


def _last_team(request):
    slug = request.session.get("team")
    return visible_teams(request.user).filter(slug=slug).first() if slug else None

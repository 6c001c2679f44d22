"""Submit a job with the API's validation (portal.core.jobspec), errors next to fields."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect

from portal.core.access import NotFound
from portal.core.actions import submit as submission
from portal.core.actions.arrays import ArrayIdempotencyConflict, submit_array
from portal.core.actions.jobs import IdempotencyConflict, QueueFull
from portal.core.batcher import Busy
from portal.core.jobspec import SpecError
from portal.dashboard import queries
from portal.dashboard.format import duration
from portal.dashboard.forms import SubmitJobForm
from portal.dashboard.shortcuts import render_page, team_page


@team_page
def submit(request, ctx):
    if not ctx.can_submit:
        raise PermissionDenied("Viewers may not submit jobs.")
    form = SubmitJobForm(request.POST or None, team=ctx.team)
    if request.method == "POST" and form.is_valid() and form.cleaned_data.get("array"):
        array = _submit_array(request, ctx.team, form)
        if array is not None:
            messages.success(
                request, f"Job array {array.pk}_ {array.name} was submitted: {array.size} tasks."
            )
            return redirect("dashboard:queue", ctx.team.slug)
    elif request.method == "POST" and form.is_valid():
        job = _submit(request, ctx.team, form)
        if job is not None:
            messages.success(request, f"Job #{job.pk} {job.name} was submitted.")
            return redirect("dashboard:job", job.pk)
    context = {
        "form": form,
        "gauges": queries.gauges(ctx.team),
        "queues": [
            (q, duration(q.max_runtime_seconds), duration(q.default_runtime_seconds))
            for q in ctx.team.queues.order_by("name")
        ],
    }
    return render_page(
        request, "dashboard/submit.html", context, ctx=ctx, section="submit", live=False
    )


def _submit(request, team, form: SubmitJobForm):
    """Validate as the API does and submit; None with errors on the form if it failed.

    The form's hidden request id is the idempotency key, so a double click or a
    re-sent POST returns the same job instead of a second one.
    """
    values = form.spec_data() | {"team": team.slug}
    try:
        return submission.submit(
            submission.Caller(request.user),
            values,
            idempotency_key=f"web-{form.cleaned_data['request_id']}",
        ).job
    except NotFound:
        form.add_error("queue", "No such queue.")
    except SpecError as exc:
        form.add_spec_errors(exc)
    except (QueueFull, Busy) as exc:
        form.add_error(None, f"{exc} Try again in a little while.")
    except IdempotencyConflict as exc:
        form.add_error(
            None,
            f"This form was already submitted as job #{exc.job.pk}; reload the page to submit another job.",
        )
    return None


def _submit_array(request, team, form: SubmitJobForm):
    """Submit the form's job as a job array (actions.arrays); None with errors on the
    form if it failed. Idempotent on the form's request id, as a single job is."""
    try:
        return submit_array(
            submission.Caller(request.user),
            team.slug,
            form.spec_data(),
            form.cleaned_data["array"],
            idempotency_key=f"web-{form.cleaned_data['request_id']}",
        ).array
    except SpecError as exc:
        form.add_spec_errors(exc)
    except QueueFull as exc:
        form.add_error(None, f"{exc} Try again in a little while.")
    except ArrayIdempotencyConflict as exc:
        form.add_error(
            None,
            f"This form was already submitted as job array {exc.array.pk}_; reload the page "
            "to submit another.",
        )
    return None

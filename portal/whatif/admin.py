"""What-if runs in the admin: staff start them for any team, watch them, run them again."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import transaction
from django.utils.html import format_html, format_html_join

from portal.whatif.actions import enqueue, restart_whatif
from portal.whatif.forms import WhatIfAdminForm
from portal.whatif.models import WhatIfRun
from portal.whatif.present import result_rows

INPUT_FIELDS = ("team", "change", "flavor", "value", "period_start", "period_end")


@admin.register(WhatIfRun)
class WhatIfRunAdmin(admin.ModelAdmin):
    form = WhatIfAdminForm
    list_display = (
        "id",
        "describe",
        "period_start",
        "period_end",
        "status",
        "percent",
        "created_by",
        "created_at",
    )
    list_filter = ("status", "change", "team")
    search_fields = ("team__slug", "created_by__username")
    list_select_related = ("team", "flavor", "created_by")
    actions = ["run_again"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return INPUT_FIELDS
        return (
            *INPUT_FIELDS,
            "status",
            "percent",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            "result_table",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return self.get_fields(request, obj)  # a run is a record: change it by starting another

    def save_model(self, request, obj, form, change):
        """Start a new run; an existing one is never written here (a worker updates it)."""
        if change:
            return
        obj.created_by = request.user
        super().save_model(request, obj, form, change)
        transaction.on_commit(lambda: enqueue(obj.pk))

    @admin.display(description="progress")
    def percent(self, obj):
        return f"{obj.progress:.0%}"

    @admin.display(description="results")
    def result_table(self, obj):
        rows = result_rows(obj, None)
        if not rows:
            return obj.results.get("note", "—")
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{} → {} ({})</td><td>{} → {} ({})</td><td>{} → {} ({})</td></tr>",
            (
                (
                    r.team,
                    r.jobs,
                    r.mean_wait.before,
                    r.mean_wait.after,
                    r.mean_wait.delta,
                    r.p90_wait.before,
                    r.p90_wait.after,
                    r.p90_wait.delta,
                    r.gpu_hours.before,
                    r.gpu_hours.after,
                    r.gpu_hours.delta,
                )
                for r in rows
            ),
        )
        head = format_html(
            "<tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>",
            "team",
            "jobs",
            "mean wait",
            "p90 wait",
            "GPU-hours",
        )
        return format_html("<table>{}{}</table>", head, body)

    @admin.action(description="Run the selected what-ifs again")
    def run_again(self, request, queryset):
        started = sum(restart_whatif(run) for run in queryset)
        self.message_user(request, f"{started} run(s) queued again.", messages.SUCCESS)

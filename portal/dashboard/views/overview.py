"""Team overview: quota gauges, fair share, showback, waits, counts, idle GPUs."""

import csv
from datetime import date, timedelta

from django.http import HttpResponse
from django.utils import timezone

from portal.core import budgets, reports
from portal.dashboard import queries
from portal.dashboard.shortcuts import is_fragment, render_page, team_page

CSV_MAX_DAYS = 366


@team_page
def overview(request, ctx):
    team = ctx.team
    context = {
        "gauges": queries.gauges(team),
        "cooldowns": queries.cooldowns(team, timezone.now()),
        "counts": reports.job_counts(team),
        "standing": queries.standing_rows(team),
        "idle": reports.idle_jobs(team),
        "idle_threshold": reports.IDLE_UTILIZATION_PCT,
        "recent": queries.recent_jobs(team),
    }
    if not is_fragment(request):
        usage = queries.showback(team)
        waits = queries.waits(team)
        context |= {
            "budgets": queries.budget_gauges(team),
            "overcommit": reports.overcommitted_flavors(
                [g.usage.flavor for g in context["gauges"]]
            ),
            "usage": usage,
            "usage_chart": usage.chart(),
            "waits": waits,
            "wait_chart": queries.wait_chart(waits),
        }
    return render_page(request, "dashboard/overview.html", context, ctx=ctx, section="overview")


@team_page
def usage_csv(request, ctx):
    """GPU-hours per day and flavor (showback) as CSV; ?days=N, 30 by default."""
    try:
        days = min(CSV_MAX_DAYS, max(1, int(request.GET.get("days", 30))))
    except ValueError:
        days = 30
    usage = queries.showback(ctx.team, days)
    today = timezone.now().date()
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="{_csv_name(ctx.team.slug, today - timedelta(days=days - 1), today)}"'
    )
    writer = csv.writer(response)
    writer.writerow(["date", *usage.flavors, "total"])
    for day, values, total in usage.table():
        writer.writerow([day, *values, total])
    _budget_rows(writer, ctx.team)
    return response


BUDGET_COLUMNS = [
    "budget",
    "period",
    "window_days",
    "starts_at",
    "resets_at",
    "used_gpu_hours",
    "soft_gpu_hours",
    "limit_gpu_hours",
    "forecast_gpu_hours",
    "state",
]


def _budget_rows(writer, team) -> None:
    """The team's GPU-hour budgets after the daily rows: a blank row, a header, one row
    per flavor (the first column names the flavor)."""
    rows = [budgets.as_row(b) for b in budgets.team_budgets(team.pk, timezone.now())]
    if not rows:
        return
    writer.writerow([])
    writer.writerow(BUDGET_COLUMNS)
    for row in rows:
        values = row | {"budget": row["flavor"]}
        for key in ("starts_at", "resets_at"):
            values[key] = values[key].isoformat() if values[key] else ""
        writer.writerow(["" if values[c] is None else values[c] for c in BUDGET_COLUMNS])


def _csv_name(slug: str, first: date, last: date) -> str:
    return f"{slug}-gpu-hours-{first.isoformat()}-to-{last.isoformat()}.csv"

"""Team rows → the scheduler's Teams: the one place that builds them (the pass's
snapshot, /metrics, the dashboard's fair-share report, the what-if planner)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import datetime

from django.db.models import Exists, OuterRef, Value

from portal.core.models import Budget, DecayedUsage, Quota, ReclaimBackoff, Team
from scheduler import model as m
from scheduler.fairshare import decay
from scheduler.requeue import team_reclaims


def scheduler_teams(
    now: datetime | None,
    half_life: float,
    *,
    team_ids: Collection[int] | None = None,
    flavor_ids: dict[str, int] | None = None,
    budgeted: set[int] | None = None,
    reclaims: bool = False,
) -> dict[int, m.Team]:
    """Every team (or those of `team_ids`) by id, with its weight, cohort, quotas and
    decayed usage at `now` (none when `now` is None: a plan for an idle cluster), in
    three queries and by slug order. `flavor_ids`, when given, is filled with the
    quota flavors' ids by name; `budgeted` with the ids of the teams that have a
    GPU-hour budget (in the same queries: the pass reads budgets only if one has).
    `reclaims`: and, in a fourth query, the reclaim backoffs still cooling down at
    `now` (Team.reclaims; the pass asks for them when the rule is on)."""
    quotas: dict[int, dict[str, m.Quota]] = defaultdict(dict)
    rows = Quota.objects.values_list(
        "team_id", "flavor_id", "flavor__name", "nominal", "borrowing_limit", "lending_limit"
    )
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    for team_id, flavor_id, flavor, nominal, borrow, lend in rows.order_by(
        "team_id", "flavor__name"
    ):
        quotas[team_id][flavor] = m.Quota(
            nominal=nominal, borrowing_limit=borrow, lending_limit=lend
        )
        if flavor_ids is not None:
            flavor_ids[flavor] = flavor_id
    usage: dict[int, dict[str, float]] = defaultdict(dict)
    if now is not None:
        used = DecayedUsage.objects.values_list(
            "team_id", "flavor__name", "gpu_seconds", "updated_at"
        ).order_by()
        if team_ids is not None:
            used = used.filter(team_id__in=team_ids)
        for team_id, flavor, value, updated in used:
            usage[team_id][flavor] = decay(
                value, max(0.0, (now - updated).total_seconds()), half_life
            )
    cooling = _cooling(now, team_ids) if reclaims and now is not None else {}
    teams = Team.objects.order_by("slug")
    if team_ids is not None:
        teams = teams.filter(pk__in=team_ids)
    if budgeted is not None:
        teams = teams.annotate(budgeted=Exists(Budget.objects.filter(team=OuterRef("pk"))))
    else:
        teams = teams.annotate(budgeted=Value(False))
    found = {}
    for pk, slug, weight, cohort, has_budget in teams.values_list(
        "pk", "slug", "weight", "cohort__name", "budgeted"
    ):
        found[pk] = m.Team(
            name=slug,
            weight=weight,
            cohort=cohort,
            quotas=quotas[pk],
            decayed_usage=usage[pk],
            reclaims=cooling.get(pk, {}),
        )
        if has_budget:
            budgeted.add(pk)
    return found


def _cooling(
    now: datetime, team_ids: Collection[int] | None
) -> dict[int, dict[str, tuple[int, float]]]:
    """Team id -> flavor -> (reclaims in a row, the last one's time) of the reclaim
    backoffs that have not ended at `now` (scheduler.requeue.team_reclaims)."""
    rows = ReclaimBackoff.objects.values_list(
        "team_id", "flavor__name", "reclaims", "last_reclaim_at"
    ).order_by()
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    state = {(team, flavor): (count, at.timestamp()) for team, flavor, count, at in rows}
    return team_reclaims(state, now.timestamp())

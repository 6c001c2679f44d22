"""How jobs are submitted: one job (`submit`) and many at once (`submit_many`).

Every way in calls these two: the REST API (portal/api/views/submit.py for one job,
the bulk view for many), the dashboard's form, and so the `berth` CLI, which talks
to the API. The callers parse their own input (JSON, a form) into field values and
turn the result or the exception into their own answer; what a submission is
happens here, in this order:

1. Authorize: the team (named, or the caller's only one) and the queue the caller
   may submit to (portal.core.access: members and leads may, viewers may not, a
   scoped token reaches only its teams).
2. Validate: the job spec against the queue, the flavor and what the team could
   ever get (portal.core.jobspec), every problem reported at once together with
   the caller's own parse errors.
3. Store the job and its `submitted` event, idempotent on the key, refused when
   the queue is full (actions.jobs.submit_job / submit_jobs: one statement on
   PostgreSQL for a single job).
4. Ask for a scheduling pass once the transaction commits (the same functions).

Errors are exceptions the callers translate: access.NotFound, PermissionDenied,
SpecError, QueueFull, IdempotencyConflict.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from portal.core import access, grants
from portal.core.actions.dependencies import submit_dependent_job
from portal.core.actions.jobs import (
    BulkSubmitted,
    Submitted,
    jobs_per_queue,
    submit_job,
    submit_jobs,
)
from portal.core.jobspec import JobSpec, SpecError, SpecLookups, clean_job_spec
from portal.core.lookups import RememberedLookups


@dataclass(frozen=True)
class Caller:
    """Who submits: a user, the team ids their token reaches (None: all their teams),
    the token's digest when the caller came with one (the grant memory's key), and
    whether the caller was known from memory (grants.token) rather than found now."""

    user: object
    scope: Collection[int] | None = None
    token_digest: str | None = None
    remembered: bool = False


class CallerChanged(Exception):
    """A caller known from memory is used only with a grant that still holds: when it
    does not, authenticate again and submit with the caller found now."""


class BulkSpecError(SpecError):
    """Some jobs of a bulk submission are invalid; `summary` says how many."""

    def __init__(self, fields: dict[str, list[str]], summary: str):
        super().__init__(fields)
        self.summary = summary


def submit(
    caller: Caller,
    values: dict,
    *,
    parse_errors: dict[str, list[str]] | None = None,
    idempotency_key: str | None = None,
) -> Submitted:
    """Submit one job from its field values (`team`, `queue`, and the spec's fields);
    `parse_errors` are the caller's messages for fields it could not parse."""
    values = dict(values)
    slug, queue_name = values.pop("team", None), values.get("queue") or "default"
    if caller.token_digest is not None and not parse_errors:
        done = _submit_granted(caller, slug, queue_name, values, idempotency_key)
        if done is not None:
            return done
    if caller.remembered:
        raise CallerChanged()
    team, queue = _authorize(caller, slug, queue_name)  # 1.
    lookups = RememberedLookups(team, queues=[queue] if queue else [])
    spec = validated_spec(team, values, parse_errors or {}, lookups)  # 2.
    return _store(spec)(team=team, spec=spec, user=caller.user, idempotency_key=idempotency_key)


def _submit_granted(caller, slug, queue_name, values, key) -> Submitted | None:
    """Steps 1–4 with a remembered grant (portal/core/grants.py), the statement that
    stores the job checking it again; None when the long way must decide."""
    grant = grants.grant(caller.token_digest, slug, queue_name)
    if grant is None:
        return None
    team = grant.team
    try:
        spec = clean_job_spec(team, values, RememberedLookups(team, queues=[grant.queue]))
    except SpecError:
        spec = None  # judged against remembered rows: the long way says it for sure
    result = spec and _store(spec)(
        team=team, spec=spec, user=grant.token.user, idempotency_key=key, only_if=grant.guard
    )
    if result is None:
        grants.drop(caller.token_digest, slug, queue_name)
    return result


def _store(spec: JobSpec):
    """Step 3's writer: a job with dependencies is stored with its edges in one
    transaction (actions.dependencies), any other in submit_job's one statement."""
    return submit_dependent_job if spec.is_dependent else submit_job


def submit_many(
    caller: Caller,
    slug: str | None,
    items: list[tuple[dict, dict[str, list[str]]]],
    *,
    idempotency_key: str | None = None,
    array=None,
    team=None,
) -> tuple[object, BulkSubmitted]:
    """Submit many jobs of one team, all or none; `items` are (values, parse errors)
    per job. Returns the team and the job ids in order. Field errors name the job
    by its index: `jobs[3].workers`. For a job array (actions.arrays.submit_array)
    `items` is the one task that stands for all and `array.tasks(spec)` makes every
    task's spec from it once it is valid; `team` is the team the caller authorized."""
    team = team or _team(caller, slug)  # 1.
    queues = sorted({values.get("queue") or "default" for values, _ in items})
    lookups = _bulk_lookups(caller, team, queues)
    specs, errors = [], {}
    for i, (values, problems) in enumerate(items):  # 2.
        try:
            specs.append(validated_spec(team, values, problems, lookups))
        except SpecError as exc:
            errors.update({f"jobs[{i}].{name}": msgs for name, msgs in exc.fields.items()})
    if errors:
        bad = len({name.partition(".")[0] for name in errors})
        raise BulkSpecError(errors, f"{bad} of {len(items)} jobs are invalid; none was submitted.")
    if array is not None:
        specs = array.tasks(specs[0])
    _check_can_ever_fit(specs)
    result = submit_jobs(team=team, specs=specs, user=caller.user, idempotency_key=idempotency_key)
    return team, result  # 3., 4.


def _check_can_ever_fit(specs: list[JobSpec]) -> None:
    """SpecError (400, not 429 queue_full) for more jobs to one queue than it may ever
    hold pending: retrying later cannot help, splitting the request does."""
    for queue, count in jobs_per_queue(specs):
        if count > queue.max_pending_jobs:
            raise SpecError(
                {
                    "jobs": [
                        f"{count} jobs for queue {queue.name}, which holds at most "
                        f"{queue.max_pending_jobs} pending jobs: split the request."
                    ]
                }
            )


def validated_spec(
    team, values: dict, parse_errors: dict[str, list[str]], lookups: SpecLookups
) -> JobSpec:
    """The job spec, or SpecError with the parse errors plus jobspec's messages on the
    fields that did parse, so a user sees every problem at once."""
    if "non_field_errors" in parse_errors:
        raise SpecError(dict(parse_errors))
    try:
        clean = (
            {k: v for k, v in values.items() if k not in parse_errors} if parse_errors else values
        )
        spec = clean_job_spec(team, clean, lookups)
    except SpecError as exc:
        merged = dict(parse_errors)
        merged.update({k: msgs for k, msgs in exc.fields.items() if k not in parse_errors})
        raise SpecError(merged) from None
    if parse_errors:
        raise SpecError(dict(parse_errors))
    return spec


def _authorize(caller: Caller, slug: str | None, queue_name: str):
    """The team and queue (None when the team has no such queue: jobspec names the
    queues) of a single submission, in one query on the common path."""
    try:
        return access.get_submit_target(caller.user, slug, queue_name, scope=caller.scope)
    except access.MultipleTeams as exc:
        raise SpecError({"team": [_name_the_team(exc.slugs)]}) from None


def _team(caller: Caller, slug: str | None):
    """The team named, or the caller's only team when none is named."""
    if slug:
        return access.get_team_for_user(caller.user, slug, scope=caller.scope)
    teams = list(access.visible_teams(caller.user, scope=caller.scope).order_by("slug")[:3])
    if len(teams) != 1:
        raise SpecError({"team": [_name_the_team([t.slug for t in teams])]})
    return teams[0]


def _name_the_team(slugs: list[str]) -> str:
    if not slugs:
        return "You are not in any team (or your token reaches none)."
    names = ", ".join(slugs[:2]) + (", …" if len(slugs) > 2 else "")
    return f"You are in several teams ({names}); say which."


def _bulk_lookups(caller: Caller, team, queue_names: list[str]) -> RememberedLookups:
    """Raise unless the caller may submit to the team; the lookups hold the queues
    found (unknown queue names are jobspec's to report)."""
    found = []
    for name in queue_names:
        try:
            found.append(access.get_queue_for_submit(caller.user, team, name, scope=caller.scope))
        except access.NotFound as exc:
            if exc.what != "queue":
                raise
    return RememberedLookups(team, queues=found)

"""Notifications: signed webhooks and e-mail on job state changes and team events.

The outbox pattern (healthchecks' alerts work the same way): whatever changes a
job's state writes the Delivery rows in its own transaction (`notify_job_events`,
called by actions.jobs.transition for every state change), and once it commits
asks a Celery task, by name, to send them. Nothing here runs an HTTP request in a
web request or the scheduling pass; a broker that is down loses nothing, since the
periodic `sweep` sends every delivery that is due.

1. Record: one Delivery per target and state change (the job's own `notify`, the
   submitter's e-mail when asked, each active team webhook that chose the event).
2. Send (`deliver`, in the notifications queue's worker): claim the row, POST the
   signed body (portal.core.outbound: SSRF rules, resolve-and-pin, timeouts) or send
   the e-mail, record the attempt (status code, error).
3. Retry what failed after a backoff of min(base × 2^(n-1), max) seconds, up to
   NOTIFY_MAX_ATTEMPTS; a refused URL or a 410 Gone is not retried.

Other features notify through `notify_team(team, event, payload)`: to the team's
webhooks that take team events (docs/api.md "Notifications").
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.celery import app as celery_app
from portal.core import outbound, statements
from portal.core.actions.audit import record_event
from portal.core.jobspec import JOB_EVENTS, SpecError, events_problem, notify_url_problem
from portal.core.models import (
    Delivery,
    Job,
    JobEvent,
    JobNotify,
    Team,
    TeamWebhook,
    WebhookSecret,
)

log = logging.getLogger(__name__)

DELIVER_TASK = "portal.core.tasks.deliver_notifications"
State = Job.State
# Which job events a state change is: a failed job has `failed` and `ended`.
EVENTS_OF_STATE = {
    State.RUNNING: ("started",),
    State.PREEMPTING: ("preempted",),
    State.FAILED: ("failed", "ended"),
    State.SUCCEEDED: ("ended",),
    State.CANCELLED: ("ended",),
}
SEND_CHUNK = 50  # deliveries per task message
SWEEP_LIMIT = 1000
ERROR_CHARS = 500


# --- 1. record --------------------------------------------------------------------------


def with_job_notify(submit_job):
    """Wrap actions.jobs.submit_job: a spec with `notify` is stored in one transaction
    with its JobNotify row; one without is stored exactly as before (no transaction or
    statement added to the hot path)."""

    @functools.wraps(submit_job)
    def submit(*, spec, **kwargs):
        if spec.notify is None:
            return submit_job(spec=spec, **kwargs)
        with transaction.atomic():
            result = submit_job(spec=spec, **kwargs)
            if result is not None and result.created:
                store_job_notify([(result.job.pk, spec.notify)])
        return result

    return submit


def store_job_notify(pairs: Iterable[tuple[int, dict | None]]) -> None:
    """Store the `notify` of new jobs, given as (job id, clean notify or None)."""
    JobNotify.objects.bulk_create(
        JobNotify(job_id=pk, url=notify["url"] or "", on=notify["on"], email=notify["email"])
        for pk, notify in pairs
        if notify
    )


def notify_job_events(events: Iterable[JobEvent]) -> list[int]:
    """Write the deliveries for these state changes (the JobEvents just written, in the
    caller's transaction) and send them once it commits; return their ids.

    One query when nothing is subscribed (the jobs that have a `notify` or a team
    webhook, which the common case does not), two otherwise; admissions are not an
    event and cost nothing.
    """
    by_job = {e.job_id: e for e in events if e.to_state in EVENTS_OF_STATE}
    if not by_job:
        return []
    find = statements.notified_jobs
    if connection.vendor != "postgresql":
        find = statements.notified_jobs_orm
    notified = find(list(by_job))
    if not notified:
        return []
    jobs = list(Job.objects.filter(pk__in=notified).values(*_JOB_COLUMNS))
    webhooks = _webhooks_of({row["team_id"] for row in jobs})
    rows = []
    for row in jobs:
        payload = _job_payload(row, by_job[row["pk"]])
        rows += _job_deliveries(row, payload, webhooks.get(row["team_id"], []))
    return _enqueue(rows)


_JOB_COLUMNS = (
    "pk",
    "team_id",
    "team__slug",
    "queue__name",
    "name",
    "state",
    "exit_code",
    "reason",
    "notify__url",
    "notify__on",
    "notify__email",
    "submitted_by__username",
    "submitted_by__email",
)


def notify_team(team: Team, event: str, payload: dict) -> list[int]:
    """Notify the team's webhooks that take team events (`team_events`) of `event`,
    e.g. `notify_team(team, "budget.soft_threshold", {"flavor": "h100-80gb", …})`;
    return the delivery ids. Call it inside the transaction of the change it reports:
    the rows commit with it and are sent after, or by the sweep."""
    body = {
        "event": event,
        "occurred_at": timezone.now().isoformat(),
        "team": team.slug,
        "data": payload,
    }
    hooks = TeamWebhook.objects.filter(team=team, active=True, team_events=True)
    return _enqueue(
        Delivery(team_id=team.pk, webhook=hook, event=event, target=hook.url, payload=body)
        for hook in hooks
    )


def _webhooks_of(team_ids: set[int]) -> dict[int, list[TeamWebhook]]:
    hooks: dict[int, list[TeamWebhook]] = {}
    for hook in TeamWebhook.objects.filter(team_id__in=team_ids, active=True).only(
        "pk", "team_id", "url", "events"
    ):
        hooks.setdefault(hook.team_id, []).append(hook)
    return hooks


def _job_payload(row: dict, event: JobEvent) -> dict:
    return {
        "events": list(EVENTS_OF_STATE[event.to_state]),
        "occurred_at": (event.at or timezone.now()).isoformat(),
        "team": row["team__slug"],
        "job": {
            "id": row["pk"],
            "name": row["name"],
            "queue": row["queue__name"],
            "state": event.to_state,
            "previous_state": event.from_state,
            "exit_code": row["exit_code"],
            "reason": row["reason"],
            "submitted_by": row["submitted_by__username"],
        },
        "kind": event.kind,
        "message": event.message,
    }


def _job_deliveries(row: dict, payload: dict, hooks: list[TeamWebhook]) -> list[Delivery]:
    """The job's own URL and e-mail (its `notify`) and the team webhooks that chose one of
    the change's events; each names the first event it chose (JOB_EVENTS' order)."""
    out = []
    on = row["notify__on"] or []

    def add(chosen, **fields):
        named = _first_chosen(payload["events"], chosen)
        if named:
            body = {"event": named, **payload}
            out.append(
                Delivery(
                    team_id=row["team_id"], job_id=row["pk"], event=named, payload=body, **fields
                )
            )

    if row["notify__url"]:
        add(on, target=row["notify__url"])
    if row["notify__email"] and row["submitted_by__email"]:
        add(on, target=row["submitted_by__email"], channel=Delivery.Channel.EMAIL)
    for hook in hooks:
        add(hook.events, target=hook.url, webhook_id=hook.pk)
    return out


def _first_chosen(events: list[str], chosen: list[str]) -> str | None:
    return next((e for e in JOB_EVENTS if e in events and e in chosen), None)


def _enqueue(deliveries: Iterable[Delivery]) -> list[int]:
    """Store the deliveries, due now, and send them when the transaction commits."""
    now = timezone.now()
    rows = list(deliveries)
    for row in rows:
        row.next_attempt_at = row.created_at = now
    if not rows:
        return []
    ids = [d.pk for d in Delivery.objects.bulk_create(rows)]
    transaction.on_commit(lambda: send_deliveries(ids))
    return ids


def send_deliveries(ids: list[int], *, countdown: float | None = None) -> None:
    """Ask the notifications worker to send these deliveries (the task by name, so no
    core module imports the task module). A broker that is down is logged, never
    raised: the rows are stored, and the sweep sends them."""
    try:
        for start in range(0, len(ids), SEND_CHUNK):
            celery_app.send_task(
                DELIVER_TASK,
                args=[ids[start : start + SEND_CHUNK]],
                countdown=countdown,
                retry=False,
            )
    except Exception:  # noqa: BLE001 — the broker being down must not fail the caller
        log.warning("could not queue notifications; the sweep will send them", exc_info=True)


# --- 2. send ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status: int | None = None
    error: str = ""
    permanent: bool = False


def deliver(ids: Iterable[int], *, now: datetime | None = None) -> dict[int, float]:
    """Attempt each of these deliveries that is due and not held by another sender,
    once; return {id: seconds until its next attempt} for those to try again."""
    retry = {}
    for pk in ids:
        delivery = _claim(pk, now or timezone.now())
        if delivery is None:
            continue
        outcome = _attempt(delivery)
        delay = _record(delivery, outcome, now or timezone.now())
        if delay is not None:
            retry[pk] = delay
    return retry


def sweep(*, now: datetime | None = None) -> list[int]:
    """Send every delivery that is due and not held (a lost task message, a broker that
    was down, a worker that died mid-attempt), and prune old ones; return the ids sent."""
    now = now or timezone.now()
    due = due_deliveries(now)
    if due:
        send_deliveries(due)
    prune(now)
    return due


def prune(now: datetime) -> int:
    """Forget deliveries that ended more than BERTH_NOTIFY_KEEP_DAYS ago; return how many."""
    cutoff = now - timedelta(days=settings.BERTH["NOTIFY_KEEP_DAYS"])
    ended = Delivery.objects.exclude(state=Delivery.State.PENDING).filter(created_at__lt=cutoff)
    return ended.delete()[0]


def due_deliveries(now: datetime, limit: int = SWEEP_LIMIT) -> list[int]:
    """The ids of deliveries due by `now` that no sender holds, the oldest first."""
    rows = Delivery.objects.filter(_due(now)).order_by("next_attempt_at", "pk")
    return list(rows.values_list("pk", flat=True)[:limit])


def _due(now: datetime) -> Q:
    return Q(state=Delivery.State.PENDING, next_attempt_at__lte=now) & (
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    )


def _claim(pk: int, now: datetime) -> Delivery | None:
    """Hold the delivery for one attempt (a conditional update: of two senders, one
    wins); the hold lapses after the attempt's longest time, should the sender die."""
    lease = now + timedelta(seconds=3 * settings.BERTH["NOTIFY_TIMEOUT_S"] + 30)
    claimed = Delivery.objects.filter(_due(now), pk=pk).update(
        claimed_until=lease, attempts=F("attempts") + 1, last_attempt_at=now
    )
    if not claimed:
        return None
    return Delivery.objects.select_related("team").get(pk=pk)


def _attempt(delivery: Delivery) -> Outcome:
    try:
        if delivery.channel == Delivery.Channel.EMAIL:
            return _send_email(delivery)
        return _post(delivery)
    except outbound.Refused as exc:
        return Outcome(ok=False, error=str(exc), permanent=True)
    except Exception as exc:  # noqa: BLE001 — a network, TLS or mail error is an outcome
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}")


def body_of(delivery: Delivery) -> bytes:
    """The exact bytes sent and signed: the payload with the delivery's id."""
    return json.dumps({"delivery": delivery.pk, **delivery.payload}, separators=(",", ":")).encode()


def _post(delivery: Delivery) -> Outcome:
    body = body_of(delivery)
    secret = team_secret(delivery.team)
    headers = outbound.signed_headers(secret, int(time.time()), body, delivery.event, delivery.pk)
    answer = outbound.post(
        delivery.target,
        body,
        headers,
        timeout=settings.BERTH["NOTIFY_TIMEOUT_S"],
        allow_private=settings.BERTH["NOTIFY_ALLOW_PRIVATE"],
    )
    if 200 <= answer.status < 300:
        return Outcome(ok=True, status=answer.status)
    error = f"HTTP {answer.status}: {answer.body.strip()[:200]}".strip(": ")
    return Outcome(ok=False, status=answer.status, error=error, permanent=answer.status == 410)


def _send_email(delivery: Delivery) -> Outcome:
    job = delivery.payload.get("job", {})
    subject = f"[Berth] job {job.get('id')} {job.get('name')}: {delivery.event}"
    lines = [
        f"Job {job.get('id')} ({job.get('name')}) of team {delivery.payload.get('team')}, "
        f"queue {job.get('queue')}, is now {job.get('state')}.",
        delivery.payload.get("message", ""),
        f"See it with: berth status {job.get('id')}",
    ]
    send_mail(subject, "\n\n".join(line for line in lines if line), None, [delivery.target])
    return Outcome(ok=True)


def _record(delivery: Delivery, outcome: Outcome, now: datetime) -> float | None:
    """Write the attempt's result; return the delay before the next one, or None."""
    fields = {"claimed_until": None, "last_status_code": outcome.status}
    delay = None
    if outcome.ok:
        fields |= {"state": Delivery.State.DELIVERED, "delivered_at": now, "last_error": ""}
        fields["next_attempt_at"] = None
    elif outcome.permanent or delivery.attempts >= settings.BERTH["NOTIFY_MAX_ATTEMPTS"]:
        fields |= {"state": Delivery.State.FAILED, "next_attempt_at": None}
    else:
        delay = backoff(delivery.attempts)
        fields["next_attempt_at"] = now + timedelta(seconds=delay)
    if not outcome.ok:
        fields["last_error"] = outcome.error[:ERROR_CHARS]
    Delivery.objects.filter(pk=delivery.pk).update(**fields)
    if not outcome.ok:
        log.info("notification %s to %s failed: %s", delivery.pk, delivery.target, outcome.error)
    return delay


def backoff(attempts: int) -> float:
    """Seconds before the attempt after the `attempts`-th: min(base × 2^(n-1), max)."""
    cfg = settings.BERTH
    return min(
        cfg["NOTIFY_BACKOFF_BASE_S"] * 2 ** max(attempts - 1, 0), cfg["NOTIFY_BACKOFF_MAX_S"]
    )


# --- what a lead configures (the dashboard, the API and the admin call these) ----------


def team_secret(team: Team) -> str:
    """The team's signing secret, made on first use."""
    row = WebhookSecret.objects.filter(team=team).only("secret").first()
    if row is None:
        with contextlib.suppress(IntegrityError), transaction.atomic():
            WebhookSecret.objects.create(team=team, secret=_new_secret())
        row = WebhookSecret.objects.get(team=team)
    return row.secret


def rotate_webhook_secret(team: Team, *, acting_user) -> str:
    """A new signing secret for the team; bodies are signed with it from now on."""
    with transaction.atomic():
        WebhookSecret.objects.update_or_create(
            team=team, defaults={"secret": _new_secret(), "created_at": timezone.now()}
        )
        record_event(actor=acting_user, instance=team, action="rotate_webhook_secret")
    return team_secret(team)


def _new_secret() -> str:
    return f"whsec_{secrets.token_urlsafe(32)}"


def create_webhook(
    team: Team,
    *,
    url: str,
    events: list[str],
    team_events: bool = True,
    description: str = "",
    acting_user,
) -> TeamWebhook:
    """A new team webhook; SpecError names a refused URL or unknown events."""
    errors = {}
    if problem := notify_url_problem(url):
        errors["url"] = [problem]
    if problem := events_problem(events):
        errors["events"] = [problem]
    if errors:
        raise SpecError(errors)
    with transaction.atomic():
        hook = TeamWebhook.objects.create(
            team=team,
            url=url,
            events=sorted(set(events), key=JOB_EVENTS.index),
            team_events=team_events,
            description=description[:200],
            created_by=acting_user if getattr(acting_user, "is_authenticated", False) else None,
        )
        record_event(actor=acting_user, instance=hook, action="create", note=url[:200])
    return hook


def delete_webhook(hook: TeamWebhook, *, acting_user) -> None:
    """Remove the webhook; its past deliveries stay on record."""
    with transaction.atomic():
        record_event(actor=acting_user, instance=hook, action="delete", note=hook.url[:200])
        hook.delete()


def redeliver(delivery: Delivery, *, acting_user) -> Delivery:
    """Send a delivery again now (a lead fixed the receiver): a new row, the same body."""
    with transaction.atomic():
        (copy,) = Delivery.objects.filter(pk__in=_enqueue([_copy_of(delivery)]))
        record_event(actor=acting_user, instance=delivery, action="redeliver", note=f"as {copy.pk}")
    return copy


def _copy_of(delivery: Delivery) -> Delivery:
    return Delivery(
        team_id=delivery.team_id,
        job_id=delivery.job_id,
        webhook_id=delivery.webhook_id,
        channel=delivery.channel,
        event=delivery.event,
        target=delivery.target,
        payload=delivery.payload,
    )

"""Serializers shape requests and responses; the rules of a valid job live in
portal.core.jobspec, which the views call after these have parsed the types."""

from __future__ import annotations

import re
from collections.abc import Mapping

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from portal.api.fastparse import fast_parse
from portal.core.jobspec import JOB_EVENTS, MAX_WORKERS, PRIORITY_RANGE
from portal.core.models.jobs import JobState
from portal.core.models.notifications import DeliveryChannel, DeliveryState
from portal.core.validators import TOKEN_NAME
from scheduler.reasons import remedy

# Bounds that only keep numbers inside the database's integer columns; the
# rules that depend on the cluster (largest node, quota, queue limits) are jobspec's.
INT32_MAX = 2**31 - 1
MAX_BULK_JOBS = 5000
_SLUG = re.compile(r"\A[-a-zA-Z0-9_]+\Z")
STATES = list(JobState.values)  # every state, in the order of their life


class SlugField(serializers.SlugField):
    """A slug, exactly: DRF's strips whitespace first and its `$` lets a trailing
    newline through, so `"alpha\\n"` or `"alpha\\x1d"` would pass as `alpha`."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 64)
        super().__init__(trim_whitespace=False, **kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, RegexValidator)]
        self.validators.append(RegexValidator(_SLUG, message=self.error_messages["invalid"]))


class Strict:
    """The API's strict-type rule: a value must have the JSON type of its field. DRF
    turns `"2"` into 2, `1.0` into 1, `"yes"` or 1 into True, and 0 into "0"; a
    client that sends those has a bug the server must not hide. Mixed into the
    fields below; fastparse knows a strict field parses as its base field does."""

    strict = True
    json_types: tuple[type, ...] = ()

    def to_internal_value(self, data):
        if type(data) not in self.json_types:
            self.fail("invalid")
        return super().to_internal_value(data)


class TextField(Strict, serializers.CharField):
    """A string, and only a string: 1 or 1.5 is not quietly turned into "1"."""

    json_types = (str,)


class IntegerField(Strict, serializers.IntegerField):
    """An integer, and only one: not `"2"`, `2.0` or `true`."""

    json_types = (int,)
    default_error_messages = {"invalid": "A whole number is required (not text or a fraction)."}


class BooleanField(Strict, serializers.BooleanField):
    """`true` or `false`, nothing else (DRF also takes "yes", "on", 1, …)."""

    json_types = (bool,)
    default_error_messages = {"invalid": "Must be true or false."}


class ParsedJson(serializers.JSONField):
    """Any JSON value of a request body the JSON parser already read: DRF's JSONField
    would encode each one again to check that it can be (a tenth of a bulk request)."""

    def to_internal_value(self, data):
        return data


def parse(serializer: serializers.Serializer, data) -> tuple[dict, dict[str, list]]:
    """Return the typed values of the fields that parsed and the messages of those
    that did not, unknown fields included, so every problem is reported at once."""
    values = fast_parse(serializer, data)  # the common, valid body, without DRF's machinery
    if values is not None:
        return values, {}
    return parse_fields(serializer, data)


def parse_fields(serializer: serializers.Serializer, data) -> tuple[dict, dict[str, list]]:
    """parse, field by field through DRF."""
    if not isinstance(data, Mapping):
        return {}, {"non_field_errors": ["Expected a JSON object."]}
    values, errors = {}, {}
    for field in serializer._writable_fields:
        try:
            values[field.field_name] = field.run_validation(field.get_value(data))
        except serializers.ValidationError as exc:
            errors[field.field_name] = exc.detail
        except SkipField:
            continue
    for name in sorted(set(data) - set(serializer.fields)):
        errors[str(name)] = [f"Unknown field (known: {', '.join(serializer.fields)})."]
    return values, errors


class StrictSerializer(serializers.Serializer):
    """Rejects unknown fields: a typo such as `gpu_per_worker` must not silently become a default."""

    def to_internal_value(self, data):
        values, errors = parse(self, data)
        if errors:
            raise serializers.ValidationError(errors)
        return values


class NotifySerializer(StrictSerializer):
    """Where a job's state changes are sent (docs/api.md "Notifications")."""

    url = TextField(
        max_length=2000,
        required=False,
        help_text="An http(s) URL that gets a signed JSON POST on each chosen event.",
    )
    on = serializers.ListField(
        child=TextField(max_length=16),
        required=False,
        help_text='Events: `started`, `preempted`, `failed`, `ended`; default `["ended"]`.',
    )
    email = BooleanField(required=False, help_text="Also e-mail the submitter; default false.")


class JobSpecSerializer(StrictSerializer):
    """One job as submitted. Omitted optional fields take the queue's defaults."""

    name = TextField(max_length=200)
    queue = SlugField(
        max_length=64, required=False, help_text="Queue name; `default` when omitted."
    )
    image = TextField(max_length=500, help_text="Container image.")
    command = serializers.ListField(
        child=TextField(allow_blank=True, trim_whitespace=False),
        allow_empty=False,
        help_text='argv list, e.g. `["python", "train.py"]`.',
    )
    env = serializers.DictField(
        child=TextField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Environment variables (names like `[A-Za-z_][A-Za-z0-9_]*`).",
    )
    workers = IntegerField(
        min_value=1, max_value=MAX_WORKERS, required=False, help_text="Gang size; default 1."
    )
    gpus_per_worker = IntegerField(
        min_value=1, max_value=INT32_MAX, required=False, help_text="Default 1."
    )
    flavor = SlugField(
        max_length=64,
        required=False,
        help_text="GPU flavor, e.g. `h100-80gb`; may be left out where the cluster has one flavor.",
    )
    priority = IntegerField(
        min_value=PRIORITY_RANGE[0],
        max_value=PRIORITY_RANGE[1],
        required=False,
        help_text="Within the queue; default: the queue's default priority.",
    )
    preemptible = BooleanField(required=False, help_text="Default: the queue's default.")
    max_runtime_seconds = IntegerField(
        min_value=1,
        max_value=INT32_MAX,
        required=False,
        help_text="Wall-clock limit; default: the queue's default run time.",
    )
    checkpoint_signal = TextField(
        max_length=16, required=False, help_text="Sent before preemption; default SIGTERM."
    )
    grace_period_seconds = IntegerField(
        min_value=0,
        max_value=3600,
        required=False,
        help_text="Seconds between the signal and the kill; default 30.",
    )
    dependency = TextField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text="Jobs of the same team it waits for, in Slurm's `--dependency` syntax: "
        "`afterok:12:13` (all succeeded), `afternotok:12` (failed or cancelled), "
        "`afterany:12` (ended), `after:12` (started), `singleton` (one job of this name "
        "and user at a time); several joined by `,`, all must hold. See docs/api.md, Pipelines.",
    )
    notify = NotifySerializer(
        required=False, help_text="Webhook and e-mail on this job's state changes."
    )


class JobSubmitSerializer(JobSpecSerializer):
    team = SlugField(
        max_length=64,
        required=False,
        help_text="Team slug; optional when the caller (or the token's scope) has exactly one team.",
    )


class BulkSubmitSerializer(StrictSerializer):
    """The envelope of a bulk submission; each job is then parsed on its own, so the
    errors of every job come back together."""

    team = SlugField(max_length=64, required=False)
    jobs = serializers.ListField(
        child=JobSpecSerializer(), allow_empty=False, max_length=MAX_BULK_JOBS
    )


class BulkEnvelopeSerializer(StrictSerializer):
    team = SlugField(max_length=64, required=False)
    jobs = serializers.ListField(child=ParsedJson(), allow_empty=False, max_length=MAX_BULK_JOBS)


def query(request, serializer_class) -> dict:
    """The request's query parameters, typed and checked; blank values are errors, not absent."""
    params = serializer_class(data=request.query_params.dict())
    params.is_valid(raise_exception=True)
    return params.validated_data


class TeamFilterSerializer(serializers.Serializer):
    team = SlugField(max_length=64, required=False, help_text="Team slug.")


class FlavorFilterSerializer(serializers.Serializer):
    flavor = SlugField(max_length=64, required=False, help_text="GPU flavor name.")


class AttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        required=False,
        help_text="Which attempt; default: the latest that has workers.",
    )


class CancelSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)


# --- responses -------------------------------------------------------------------


class JobReceiptSerializer(serializers.Serializer):
    """What was accepted. Only facts fixed at submission, so an idempotent replay
    answers with exactly the body of the original 201."""

    id = serializers.IntegerField()
    team = serializers.CharField(source="team.slug")
    queue = serializers.CharField(source="queue.name")
    name = serializers.CharField()
    submitted_by = serializers.CharField(source="submitted_by.username", allow_null=True)
    submitted_at = serializers.DateTimeField()
    flavor = serializers.CharField(source="flavor.name")
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    gpus = serializers.IntegerField()
    image = serializers.CharField()
    command = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField())
    priority = serializers.IntegerField()
    preemptible = serializers.BooleanField()
    max_runtime_seconds = serializers.IntegerField()
    checkpoint_signal = serializers.CharField()
    grace_period_seconds = serializers.IntegerField()
    idempotency_key = serializers.CharField(allow_null=True)
    dependency = serializers.CharField(
        help_text="Its dependencies, normalized (`afterok:12:13,singleton`); empty when none."
    )

    def to_representation(self, job) -> dict:
        """The fields above, read directly: DRF's field-by-field representation cost
        as much as the query that found the submission's queue. Every field is a
        plain value of the job (or of a relation it holds); tests/api/test_submit_route.py
        checks this against DRF's own representation."""
        return {
            "id": job.pk,
            "team": job.team.slug,
            "queue": job.queue.name,
            "name": job.name,
            "submitted_by": job.submitted_by.username if job.submitted_by else None,
            "submitted_at": self.fields["submitted_at"].to_representation(job.submitted_at),
            "flavor": job.flavor.name,
            "workers": job.workers,
            "gpus_per_worker": job.gpus_per_worker,
            "gpus": job.gpus,
            "image": job.image,
            "command": [str(arg) for arg in job.command],
            "env": {str(k): None if v is None else str(v) for k, v in job.env.items()},
            "priority": job.priority,
            "preemptible": job.preemptible,
            "max_runtime_seconds": job.max_runtime_seconds,
            "checkpoint_signal": job.checkpoint_signal,
            "grace_period_seconds": job.grace_period_seconds,
            "idempotency_key": job.idempotency_key,
            "dependency": job.dependency,
        }


class JobSerializer(serializers.Serializer):
    """A job as it is now, in lists."""

    id = serializers.IntegerField()
    team = serializers.CharField(source="team.slug")
    queue = serializers.CharField(source="queue.name")
    name = serializers.CharField()
    submitted_by = serializers.CharField(source="submitted_by.username", allow_null=True)
    state = serializers.ChoiceField(choices=STATES)
    reason_code = serializers.CharField(
        help_text="Why it waits (pending jobs) or why it ended; see docs/api.md."
    )
    reason = serializers.CharField(help_text="The reason in plain words.")
    remedy = serializers.SerializerMethodField(
        help_text="A pending job: what would let it start sooner (by reason code); else empty."
    )
    position = serializers.IntegerField(
        source="queue_position", allow_null=True, help_text="1-based place in its queue."
    )
    estimated_start = serializers.DateTimeField(source="estimated_start_at", allow_null=True)
    flavor = serializers.CharField(source="flavor.name")
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    gpus = serializers.IntegerField()
    priority = serializers.IntegerField()
    preemptible = serializers.BooleanField()
    max_runtime_seconds = serializers.IntegerField()
    attempt = serializers.IntegerField()
    restart_count = serializers.IntegerField()
    eligible_at = serializers.DateTimeField(
        allow_null=True,
        help_text=(
            "When the job may be admitted from: the end of a requeued job's backoff, or "
            "when its dependencies were met; null when eligible since it was submitted."
        ),
    )
    exit_code = serializers.IntegerField(allow_null=True)
    submitted_at = serializers.DateTimeField()
    admitted_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    array = serializers.IntegerField(
        source="array_id", allow_null=True, help_text="The job array it is a task of, or null."
    )
    array_index = serializers.IntegerField(allow_null=True, help_text="Its index in the array.")
    dependency = serializers.CharField(
        help_text="Its dependencies, normalized (`afterok:12:13,singleton`); empty when none. "
        "While they hold it, it is pending with reason `dependency`."
    )

    def get_remedy(self, job) -> str:
        return remedy(job.reason_code) if job.state == JobState.PENDING else ""


class JobPageSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Jobs matching the filters, on all pages.")
    next = serializers.URLField(allow_null=True, help_text="The next page, or null.")
    previous = serializers.URLField(allow_null=True)
    results = JobSerializer(many=True)


class AllocationSerializer(serializers.Serializer):
    rank = serializers.IntegerField(source="worker_rank")
    node = serializers.CharField(source="node.hostname")
    gpu_uuid = serializers.CharField(source="gpu.uuid")
    gpu_index = serializers.IntegerField(source="gpu.index")
    active = serializers.BooleanField()


class WorkerSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    attempt = serializers.IntegerField()
    node = serializers.CharField(source="node.hostname")
    state = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class JobEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    actor = serializers.CharField(source="actor.username", allow_null=True)
    message = serializers.CharField()
    data = serializers.DictField()


class JobDetailSerializer(JobSerializer):
    image = serializers.CharField()
    command = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField())
    checkpoint_signal = serializers.CharField()
    grace_period_seconds = serializers.IntegerField()
    stop_requested_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When it was told to stop (preempted, cancelled, timed out, its gang "
        "failed or requeued); null if it was not, and again once it is admitted.",
    )
    stops_by = serializers.SerializerMethodField(
        help_text="While workers told to stop still run: when they should have stopped, "
        "stop_requested_at plus the grace period (each is killed a grace period after "
        "its agent hears of the stop); else null."
    )
    notify = NotifySerializer(
        source="notify_spec", allow_null=True, help_text="Its own notifications, or null."
    )
    idempotency_key = serializers.CharField(allow_null=True)
    allocations = AllocationSerializer(
        many=True, source="allocations_now", help_text="GPUs of the latest attempt."
    )
    ranks = WorkerSerializer(many=True, help_text="Workers of the latest attempt, by rank.")
    events = JobEventSerializer(many=True, source="events_all")

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_stops_by(self, job) -> str | None:
        at = job.stops_by(job.ranks)
        return None if at is None else self.fields["stop_requested_at"].to_representation(at)


class BulkReceiptSerializer(serializers.Serializer):
    team = serializers.CharField()
    count = serializers.IntegerField()
    ids = serializers.ListField(child=serializers.IntegerField())


class WorkerLogSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    node = serializers.CharField(source="node.hostname")
    state = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)
    log_tail = serializers.CharField(help_text="The last lines the agent reported.")


class JobLogsSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField(allow_null=True)
    workers = WorkerLogSerializer(many=True)


class QueueSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    name = serializers.CharField()
    description = serializers.CharField()
    pending = serializers.IntegerField()
    running = serializers.IntegerField(help_text="Admitted, running or being preempted.")
    max_pending_jobs = serializers.IntegerField()
    default_priority = serializers.IntegerField()
    default_runtime_seconds = serializers.IntegerField()
    max_runtime_seconds = serializers.IntegerField()
    preemptible_default = serializers.BooleanField()
    max_restarts = serializers.IntegerField()


class TeamSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    cohort = serializers.CharField(source="cohort.name", allow_null=True)
    weight = serializers.FloatField()
    role = serializers.ChoiceField(choices=["lead", "member", "viewer"], allow_null=True)


class QuotaUsageSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    nominal = serializers.IntegerField()
    borrowing_limit = serializers.IntegerField(allow_null=True)
    lending_limit = serializers.IntegerField(allow_null=True)
    used = serializers.IntegerField(help_text="GPUs held now.")
    borrowed = serializers.IntegerField(help_text="GPUs held beyond nominal quota.")
    idle = serializers.IntegerField(help_text="Nominal GPUs not in use.")
    pending_gpus = serializers.IntegerField(help_text="GPUs asked for by pending jobs.")


class StandingSerializer(serializers.Serializer):
    team = serializers.CharField()
    weight = serializers.FloatField()
    current = serializers.FloatField(help_text="Dominant share of current usage over nominal.")
    historical = serializers.FloatField(help_text="Decayed past usage on the same scale.")
    share = serializers.FloatField(help_text="(current + historical) / weight; lowest goes first.")


class BudgetSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    period = serializers.ChoiceField(
        choices=["month", "rolling"], help_text="A calendar month (UTC) or a rolling window."
    )
    window_days = serializers.IntegerField(
        allow_null=True, help_text="Days of a rolling window; null for a month."
    )
    used_gpu_hours = serializers.FloatField(help_text="GPU-hours used in the period so far.")
    soft_gpu_hours = serializers.FloatField(
        allow_null=True, help_text="Soft threshold: a warning when crossed."
    )
    limit_gpu_hours = serializers.FloatField(
        help_text="Hard limit: new jobs wait (budget_exhausted) once it would be crossed."
    )
    percent_used = serializers.FloatField()
    forecast_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="Used at month end if the last 24 hours' burn rate goes on; null if rolling.",
    )
    # A CharField, not a ChoiceField: the schema's enums are named by field, and jobs
    # already own "state".
    state = serializers.CharField(
        help_text="`ok`, `warn` (past the soft threshold) or `exhausted` (at the limit)."
    )
    starts_at = serializers.DateTimeField()
    resets_at = serializers.DateTimeField(allow_null=True, help_text="Null for a rolling window.")


class ReclaimBackoffSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    reclaims = serializers.IntegerField(
        help_text="Times in a row the team's borrowing was reclaimed."
    )
    last_reclaim_at = serializers.DateTimeField()
    may_borrow_from = serializers.DateTimeField(
        help_text="The cooldown's end: until then the team's jobs that would borrow this flavor "
        "wait (reason backoff); jobs within nominal quota do not. Past: it may borrow now."
    )
    count_resets_after = serializers.DateTimeField(
        help_text="Not reclaimed again by then, the count starts again at 1 and the row goes."
    )


class TeamDetailSerializer(TeamSerializer):
    quota = QuotaUsageSerializer(many=True)
    budgets = BudgetSerializer(many=True, help_text="GPU-hour budgets per flavor.")
    reclaim_backoff = ReclaimBackoffSerializer(
        many=True,
        help_text="Per flavor whose reclaims still count in a row (BERTH_RECLAIM_BACKOFF); "
        "empty while the rule is off.",
    )
    fair_share = StandingSerializer(many=True, help_text="The cohort, lowest share first.")
    gpu_hours_by_day = serializers.ListField(
        child=serializers.DictField(), help_text='`{"date": "2025-01-31", "<flavor>": hours, …}`'
    )
    jobs = serializers.DictField(child=serializers.IntegerField(), help_text="Jobs per state.")


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    product_name = serializers.CharField()
    memory_mib = serializers.IntegerField()
    health = serializers.CharField()
    health_reason = serializers.CharField()
    utilization_pct = serializers.FloatField(allow_null=True)
    memory_used_mib = serializers.IntegerField(allow_null=True)
    temperature_c = serializers.FloatField(allow_null=True)
    allocated = serializers.BooleanField()
    job = serializers.IntegerField(
        allow_null=True, help_text="The job holding it, only for jobs of the caller's teams."
    )
    job_name = serializers.CharField(allow_null=True)


class NodeSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    flavor = serializers.CharField(source="flavor.name")
    rack = serializers.CharField()
    block = serializers.CharField()
    state = serializers.CharField(help_text="ready, not_ready, unknown, cordoned or draining.")
    condition = serializers.CharField()
    cordon = serializers.CharField()
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    gpus = GpuSerializer(many=True, source="gpu_rows")


class MembershipSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField()


class TokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The token's first characters, to tell tokens apart.")
    teams = serializers.ListField(
        child=serializers.CharField(),
        source="team_slugs",
        allow_null=True,
        help_text="Team slugs it is limited to; null: every team of its user.",
    )
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    usable = serializers.BooleanField(source="is_usable")


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(help_text="The secret. Shown only in this response.")


class TokenCreateSerializer(StrictSerializer):
    name = TextField(**TOKEN_NAME)
    teams = serializers.ListField(
        child=SlugField(max_length=64),
        required=False,
        help_text="Limit the token to these teams; omitted: every team of the user.",
    )
    expires_in_days = serializers.IntegerField(
        min_value=1, max_value=3650, required=False, help_text="Omitted: never expires."
    )


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.CharField()
    is_staff = serializers.BooleanField()
    teams = MembershipSerializer(many=True)
    auth = serializers.ChoiceField(choices=["token", "session", "password"])
    token = TokenSerializer(allow_null=True, help_text="The token this request used, if any.")


# --- notifications (api/views/notifications.py) -----------------------------------


class WebhookCreateSerializer(StrictSerializer):
    url = TextField(max_length=2000, help_text="An http(s) URL (docs/security.md).")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=list(JOB_EVENTS)),
        required=False,
        default=list,
        help_text="Job events: `started`, `preempted`, `failed`, `ended`.",
    )
    team_events = BooleanField(
        required=False, default=True, help_text="Also team-level events; default true."
    )
    description = TextField(max_length=200, required=False, allow_blank=True, default="")


class WebhookSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    team_events = serializers.BooleanField()
    description = serializers.CharField()
    active = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class WebhookSecretSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="Signs every body: see docs/api.md.")


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    job = serializers.IntegerField(source="job_id", allow_null=True)
    webhook = serializers.IntegerField(source="webhook_id", allow_null=True)
    channel = serializers.ChoiceField(choices=list(DeliveryChannel.values))
    event = serializers.CharField()
    target = serializers.CharField(help_text="The URL or the e-mail address.")
    state = serializers.ChoiceField(choices=list(DeliveryState.values))
    attempts = serializers.IntegerField()
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField()
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


# --- job arrays -----------------------------------------------------------------------


# The grammar of portal.core.arrayspec, for the schema (the server parses it there and
# says what is wrong in words; a text that matches may still be refused: `9-3`).
_RANGE = r"[0-9]+(-[0-9]+(:[0-9]+)?)?"
ARRAY_PATTERN = rf"^\s*{_RANGE}(\s*,\s*{_RANGE})*\s*(%[0-9]+)?\s*$"


@extend_schema_field({"type": "string", "maxLength": 2000, "pattern": ARRAY_PATTERN})
class ArraySpecField(TextField):
    pass


class ArraySubmitSerializer(JobSubmitSerializer):
    """One job spec and the indices of its tasks; `{index}` in the name and the command
    becomes each task's index."""

    array = ArraySpecField(
        max_length=2000,
        help_text="Task indices as Slurm's --array takes them: `0-99`, `1,3,5-9`, `0-99:4`, "
        "with an optional concurrency limit `%8` (at most 8 tasks hold GPUs at once).",
    )


class ArrayReceiptSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The array id (its own numbering, not a job id).")
    team = serializers.CharField()
    name = serializers.CharField()
    array = serializers.CharField(help_text="The index spec as submitted.")
    size = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True)
    ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="The tasks' job ids, in index order."
    )
    indices = serializers.ListField(child=serializers.IntegerField())


ARRAY_STATES = ["pending", "running", "succeeded", "failed", "cancelled"]


class ArraySerializer(serializers.Serializer):
    """An array as it is now: its tasks counted per state."""

    id = serializers.IntegerField()
    team = serializers.CharField()
    name = serializers.CharField()
    array = serializers.CharField()
    size = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True)
    submitted_by = serializers.CharField(allow_null=True)
    submitted_at = serializers.DateTimeField()
    state = serializers.ChoiceField(
        choices=ARRAY_STATES,
        help_text="`running` while any task holds GPUs, `pending` while any waits, then "
        "`succeeded` only if every task did, else `failed` if any failed, else `cancelled`.",
    )
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Tasks per state (every state, 0 included)."
    )
    pending_indices = serializers.CharField(
        help_text="Indices of the pending tasks, as squeue writes them: `4-99`."
    )
    display = serializers.CharField(help_text="squeue's collapsed form: `12_[4-99%8]`.")


class ArrayPageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ArraySerializer(many=True)

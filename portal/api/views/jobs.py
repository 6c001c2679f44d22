"""Jobs: submit (single and bulk, idempotent, with backpressure), list, show, cancel, logs."""

from __future__ import annotations

from django.db.models import Case, F, IntegerField, Value, When
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.auth import scope_of
from portal.api.errors import flatten, invalid
from portal.api.lookups import ApiLookups
from portal.api.pagination import Page
from portal.core import access
from portal.core.actions.jobs import cancel_job, submit_job, submit_jobs
from portal.core.jobspec import JobSpec, SpecError, SpecLookups, clean_job_spec
from portal.core.models import Allocation, Job, Worker

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 200
BULK_SUFFIX = 6  # bulk jobs are keyed KEY#0 … KEY#9999
ACTIVE = [Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING]
# Built once: a serializer's fields are deep-copied per instance, a measurable part of
# every submission. parse() and to_representation() keep no per-request state on them.
SUBMIT_FIELDS = s.JobSubmitSerializer()
SPEC_FIELDS = s.JobSpecSerializer()
RECEIPT = s.JobReceiptSerializer()

EXAMPLE_JOB = {
    "name": "train-llm",
    "flavor": "h100-80gb",
    "workers": 2,
    "gpus_per_worker": 8,
    "image": "registry.example.com/llm:1.4",
    "command": ["torchrun", "train.py", "--epochs", "3"],
    "env": {"WANDB_PROJECT": "llm"},
    "max_runtime_seconds": 14400,
}

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    OpenApiParameter.HEADER,
    description="Retries with the same key return the same job (200); "
    "the same key with another body answers 409. At most 200 printable characters.",
)


def submit_team(request, slug: str | None):
    """The team named in the request, or the caller's only team when none is named."""
    scope = scope_of(request)
    if slug:
        return access.get_team_for_user(request.user, slug, scope=scope)
    teams = list(access.visible_teams(request.user, scope=scope).order_by("slug")[:3])
    if len(teams) == 1:
        return teams[0]
    if not teams:
        raise invalid({"team": ["You are not in any team (or your token reaches none)."]})
    names = ", ".join(t.slug for t in teams[:2]) + (", …" if len(teams) > 2 else "")
    raise invalid({"team": [f"You are in several teams ({names}); say which."]})


def submit_target(request, slug: str | None, queue_name: str):
    """The team and queue of a single submission, in one query (access.get_submit_target)."""
    try:
        return access.get_submit_target(request.user, slug, queue_name, scope=scope_of(request))
    except access.MultipleTeams as exc:
        if not exc.slugs:
            raise invalid(
                {"team": ["You are not in any team (or your token reaches none)."]}
            ) from None
        names = ", ".join(exc.slugs[:2]) + (", …" if len(exc.slugs) > 2 else "")
        raise invalid({"team": [f"You are in several teams ({names}); say which."]}) from None


def submit_lookups(request, team, queue_names) -> ApiLookups:
    """Raise unless the caller may submit to the team; return the lookups for jobspec,
    holding the queues found (unknown queue names are jobspec's to report)."""
    found = []
    for name in queue_names:
        try:
            found.append(
                access.get_queue_for_submit(request.user, team, name, scope=scope_of(request))
            )
        except access.NotFound as exc:
            if exc.what != "queue":
                raise
    return ApiLookups(team, queues=found)


def idempotency_key(request, limit: int = MAX_KEY_LENGTH) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
    if not key:
        return None
    if len(key) > limit or not key.isprintable() or not key.isascii():
        raise invalid({IDEMPOTENCY_HEADER: [f"At most {limit} printable ASCII characters."]})
    return key


class JobFilterSerializer(serializers.Serializer):
    state = serializers.CharField(
        required=False, help_text=f"One or more of {', '.join(s.STATES)}, comma-separated."
    )
    queue = s.SlugField(required=False, help_text="Queue name.")
    team = s.SlugField(required=False, help_text="Team slug.")
    submitted_by = serializers.CharField(
        required=False, help_text="Username, or `me` for the caller."
    )
    since = serializers.DateTimeField(required=False, help_text="Submitted at or after.")
    ordering = serializers.ChoiceField(
        choices=["-submitted_at", "submitted_at", "queue"],
        required=False,
        help_text="`-submitted_at` (default, newest first), `submitted_at`, or `queue`: "
        "active jobs first, then pending ones by queue position (like squeue).",
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=Page.max_limit)
    offset = serializers.IntegerField(required=False, min_value=0)

    def validate_state(self, value: str) -> list[str]:
        states = [part.strip() for part in value.split(",") if part.strip()]
        unknown = [x for x in states if x not in s.STATES]
        if unknown or not states:
            raise serializers.ValidationError(
                f"Unknown state {', '.join(unknown) or value!r}; use {', '.join(s.STATES)}."
            )
        return states


def filtered_jobs(request, params: dict):
    jobs = access.visible_jobs(request.user, scope=scope_of(request)).select_related(
        "team", "queue", "flavor", "submitted_by"
    )
    if "state" in params:
        jobs = jobs.filter(state__in=params["state"])
    if "team" in params:
        jobs = jobs.filter(team__slug=params["team"])
    if "queue" in params:
        jobs = jobs.filter(queue__name=params["queue"])
    if "submitted_by" in params:
        who = params["submitted_by"]
        jobs = (
            jobs.filter(submitted_by=request.user)
            if who == "me"
            else jobs.filter(submitted_by__username=who)
        )
    if "since" in params:
        jobs = jobs.filter(submitted_at__gte=params["since"])
    return order_jobs(jobs, params.get("ordering", "-submitted_at"))


def order_jobs(jobs, ordering: str):
    """Every ordering ends with the id, so pages never overlap or skip."""
    if ordering == "submitted_at":
        return jobs.order_by("submitted_at", "id")
    if ordering == "queue":
        rank = Case(
            When(state__in=ACTIVE, then=Value(0)),
            When(state=Job.State.PENDING, then=Value(1)),
            default=Value(2),
            output_field=IntegerField(),
        )
        return jobs.annotate(state_rank=rank).order_by(
            "state_rank",
            F("queue_position").asc(nulls_last=True),
            "-priority",
            "submitted_at",
            "id",
        )
    return jobs.order_by("-submitted_at", "-id")


class JobListView(APIView):
    @extend_schema(
        operation_id="jobs_list",
        parameters=[JobFilterSerializer],
        responses={200: s.JobPageSerializer},
        description="Jobs of the caller's teams (narrowed by a scoped token), newest first.",
    )
    def get(self, request):
        params = s.query(request, JobFilterSerializer)
        paginator = Page()
        page = paginator.paginate_queryset(filtered_jobs(request, params), request, view=self)
        return paginator.get_paginated_response(s.JobSerializer(page, many=True).data)

    @extend_schema(
        operation_id="jobs_submit",
        request=s.JobSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[OpenApiExample("Training job", value=EXAMPLE_JOB, request_only=True)],
        responses={
            201: s.JobReceiptSerializer,
            200: OpenApiResponse(
                s.JobReceiptSerializer,
                description="A replay of an earlier submission with the same Idempotency-Key "
                "(header `Idempotent-Replayed: true`).",
            ),
        },
        description="Submit one job. The job is committed before the 201 is sent.",
    )
    def post(self, request):
        values, errors = s.parse(SUBMIT_FIELDS, request.data)
        if errors.keys() & {"team", "non_field_errors"}:
            raise invalid(flatten(errors))
        team, queue = submit_target(
            request, values.pop("team", None), values.get("queue") or "default"
        )
        lookups = ApiLookups(team, queues=[queue] if queue else [])
        key = idempotency_key(request)
        spec = validated_spec(team, values, errors, lookups)
        result = submit_job(team=team, spec=spec, user=request.user, idempotency_key=key)
        receipt = RECEIPT.to_representation(result.job)
        if result.created:
            return Response(
                receipt, status=201, headers={"Location": f"/api/v1/jobs/{result.job.pk}/"}
            )
        return Response(receipt, status=200, headers={REPLAY_HEADER: "true"})


class BulkSubmitView(APIView):
    @extend_schema(
        operation_id="jobs_bulk_submit",
        request=s.BulkSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: s.BulkReceiptSerializer,
            200: OpenApiResponse(
                s.BulkReceiptSerializer,
                description="A replay of an earlier bulk submission with the same "
                "Idempotency-Key (header `Idempotent-Replayed: true`): the same job ids.",
            ),
        },
        examples=[
            OpenApiExample(
                "Learning-rate sweep",
                value={
                    "jobs": [
                        EXAMPLE_JOB | {"name": f"lr-{lr}", "env": {"LR": lr}}
                        for lr in ("1e-4", "3e-4")
                    ]
                },
                request_only=True,
            )
        ],
        description="Submit many jobs of one team at once, all or none. Field errors name "
        "the job by its index: `jobs[3].workers`. With an Idempotency-Key (at most 194 "
        "characters) a retry of the same request returns the same jobs (200).",
    )
    def post(self, request):
        envelope = s.BulkEnvelopeSerializer(data=request.data)
        envelope.is_valid(raise_exception=True)
        team = submit_team(request, envelope.validated_data.get("team"))
        parsed = [s.parse(SPEC_FIELDS, item) for item in envelope.validated_data["jobs"]]
        lookups = submit_lookups(
            request, team, sorted({v.get("queue") or "default" for v, _ in parsed})
        )
        specs, errors = [], {}
        for i, (values, problems) in enumerate(parsed):
            try:
                specs.append(validated_spec(team, values, problems, lookups))
            except SpecError as exc:
                errors.update({f"jobs[{i}].{name}": msgs for name, msgs in exc.fields.items()})
        if errors:
            bad = len({name.partition(".")[0] for name in errors})
            raise invalid(errors, f"{bad} of {len(parsed)} jobs are invalid; none was submitted.")
        key = idempotency_key(request, limit=MAX_KEY_LENGTH - BULK_SUFFIX)
        result = submit_jobs(team=team, specs=specs, user=request.user, idempotency_key=key)
        body = {"team": team.slug, "count": len(result.ids), "ids": result.ids}
        if result.created:
            return Response(body, status=201)
        return Response(body, status=200, headers={REPLAY_HEADER: "true"})


def validated_spec(team, values: dict, errors: dict, lookups: SpecLookups) -> JobSpec:
    """The job spec, or SpecError with the parse errors plus jobspec's messages on the
    fields that did parse, so a user sees every problem at once."""
    if "non_field_errors" in errors:
        raise SpecError(flatten(errors))
    try:
        clean = {k: v for k, v in values.items() if k not in errors}
        spec = clean_job_spec(team, clean, lookups)
    except SpecError as exc:
        merged = flatten(errors)
        merged.update({name: msgs for name, msgs in exc.fields.items() if name not in errors})
        raise SpecError(merged) from None
    if errors:
        raise SpecError(flatten(errors))
    return spec


def job_detail(job: Job) -> dict:
    workers = list(
        Worker.objects.filter(job=job).select_related("node").order_by("-attempt", "rank")
    )
    latest = [w for w in workers if w.attempt == workers[0].attempt] if workers else []
    job.ranks = sorted(latest, key=lambda w: w.rank)
    job.allocations_now = list(
        Allocation.objects.filter(worker__in=latest).select_related("node", "gpu")
    )
    job.events_all = list(job.events.select_related("actor"))
    return s.JobDetailSerializer(job).data


class JobDetailView(APIView):
    @extend_schema(operation_id="jobs_retrieve", responses={200: s.JobDetailSerializer})
    def get(self, request, job_id: int):
        job = access.get_job_for_user(request.user, job_id, scope=scope_of(request))
        return Response(job_detail(job))


class JobCancelView(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        request=s.CancelSerializer,
        responses={200: s.JobDetailSerializer},
        description="Cancel a pending or active job. Leads may cancel any job of their team, "
        "members their own; viewers none. A job that already ended answers 409.",
    )
    def post(self, request, job_id: int):
        job = access.get_job_for_user(request.user, job_id, write=True, scope=scope_of(request))
        body = s.CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = cancel_job(job, actor=request.user, reason=body.validated_data.get("reason", ""))
        return Response(job_detail(job))


class JobLogsView(APIView):
    @extend_schema(
        operation_id="jobs_logs",
        parameters=[s.AttemptSerializer],
        responses={200: s.JobLogsSerializer},
        description="The log tail each worker's agent last reported, per rank.",
    )
    def get(self, request, job_id: int):
        job = access.get_job_for_user(request.user, job_id, scope=scope_of(request))
        attempt = s.query(request, s.AttemptSerializer).get("attempt")
        workers = Worker.objects.filter(job=job).select_related("node").order_by("-attempt", "rank")
        if attempt is not None:
            workers = workers.filter(attempt=attempt)
        rows = list(workers)
        chosen = rows[0].attempt if rows else attempt
        rows = [w for w in rows if w.attempt == chosen]
        return Response(
            {
                "job": job.pk,
                "attempt": chosen,
                "workers": s.WorkerLogSerializer(rows, many=True).data,
            }
        )

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
from portal.api.pagination import Page
from portal.api.views.submit import (
    IDEMPOTENCY_HEADER,
    MAX_KEY_LENGTH,
    REPLAY_HEADER,
    idempotency_key,
    submit_job_view,
)
from portal.core import access
from portal.core.actions.jobs import cancel_job
from portal.core.actions.submit import BulkSpecError, Caller, submit_many
from portal.core.models import Allocation, Job, JobNotify, Worker

BULK_SUFFIX = 6  # bulk jobs are keyed KEY#0 … KEY#9999
# Built once: a serializer's fields are deep-copied per instance, a measurable part of
# every submission. parse() keeps no per-request state on them.
SPEC_FIELDS = s.JobSpecSerializer()

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


# `state` is a comma-separated list of states (`?state=pending,running`): said so in the
# schema, with the states as an enum, instead of the serializer's plain string.
STATE_PARAMETER = OpenApiParameter(
    "state",
    {"type": "array", "items": {"type": "string", "enum": s.STATES}, "minItems": 1},
    OpenApiParameter.QUERY,
    style="form",
    explode=False,
    description="One or more states, comma-separated.",
)


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
            When(state__in=Job.ACTIVE_STATES, then=Value(0)),
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


class JobsView(APIView):
    """/api/v1/jobs/: GET lists jobs (DRF); POST submits one job, answered by the plain
    handler api/views/submit.py before DRF runs (`post` here only publishes its schema)."""

    def dispatch(self, request, *args, **kwargs):
        if request.method == "POST":
            return submit_job_view(request)
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        operation_id="jobs_list",
        parameters=[JobFilterSerializer, STATE_PARAMETER],
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
    def post(self, request):  # pragma: no cover — dispatch answers every POST
        raise AssertionError("POST /api/v1/jobs/ is answered by api/views/submit.py")


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
        items = [_flat(s.parse(SPEC_FIELDS, item)) for item in envelope.validated_data["jobs"]]
        key = idempotency_key(request, limit=MAX_KEY_LENGTH - BULK_SUFFIX)
        caller = Caller(request.user, scope_of(request))
        try:
            team, result = submit_many(
                caller, envelope.validated_data.get("team"), items, idempotency_key=key
            )
        except BulkSpecError as exc:
            raise invalid(exc.fields, exc.summary) from None
        body = {"team": team.slug, "count": len(result.ids), "ids": result.ids}
        if result.created:
            return Response(body, status=201)
        return Response(body, status=200, headers={REPLAY_HEADER: "true"})


def _flat(parsed: tuple[dict, dict]) -> tuple[dict, dict[str, list[str]]]:
    values, errors = parsed
    return values, flatten(errors) if errors else {}


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
    notify = JobNotify.objects.filter(job=job).first()
    job.notify_spec = notify.as_dict() if notify else None
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

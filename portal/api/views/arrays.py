"""Job arrays: submit N tasks from one spec (Slurm's --array), list, show, cancel.

Each task is a job (GET /api/v1/jobs/?array=ID lists them); the array is the handle
that cancels and waits for them as one."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.auth import scope_of
from portal.api.errors import flatten
from portal.api.pagination import Page
from portal.api.views.jobs import EXAMPLE_JOB, IDEMPOTENCY_PARAMETER
from portal.api.views.submit import REPLAY_HEADER, idempotency_key
from portal.core import access
from portal.core.actions.arrays import ArrayState, array_states, cancel_array, submit_array
from portal.core.actions.submit import Caller
from portal.core.arrayspec import compact

ARRAY_FIELDS = s.ArraySubmitSerializer()
EXAMPLE_ARRAY = EXAMPLE_JOB | {
    "name": "sweep-{index}",
    "workers": 1,
    "command": ["python", "eval.py", "--shard", "{index}"],
    "array": "0-99%8",
}


def _identity(a) -> dict:
    """What every answer about an array starts with."""
    return {
        "id": a.pk,
        "team": a.team.slug,
        "name": a.name,
        "array": a.spec,
        "size": a.size,
        "limit": a.task_limit,
    }


def array_body(state: ArrayState) -> dict:
    """An array as ArraySerializer shows it."""
    a = state.array
    counts = {name: state.counts.get(name, 0) for name in s.STATES}
    return _identity(a) | {
        "submitted_by": a.submitted_by.username if a.submitted_by else None,
        "submitted_at": a.submitted_at,
        "state": state.state,
        "counts": counts,
        "pending_indices": compact(state.pending_indices),
        "display": state.display,
    }


def detail(array) -> dict:
    return s.ArraySerializer(array_body(array_states([array])[array.pk])).data


class ArraysView(APIView):
    @extend_schema(
        operation_id="arrays_list",
        parameters=[s.TeamFilterSerializer],
        responses={200: s.ArrayPageSerializer},
        description="Job arrays of the caller's teams, newest first, with task counts.",
    )
    def get(self, request):
        params = s.query(request, s.TeamFilterSerializer)
        arrays = access.visible_arrays(request.user, scope=scope_of(request))
        if "team" in params:
            arrays = arrays.filter(team__slug=params["team"])
        arrays = arrays.select_related("team", "submitted_by").order_by("-submitted_at", "-id")
        paginator = Page()
        page = list(paginator.paginate_queryset(arrays, request, view=self))
        states = array_states(page)
        bodies = [array_body(states[a.pk]) for a in page]
        return paginator.get_paginated_response(s.ArraySerializer(bodies, many=True).data)

    @extend_schema(
        operation_id="arrays_submit",
        request=s.ArraySubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[OpenApiExample("Evaluation shards", value=EXAMPLE_ARRAY, request_only=True)],
        responses={
            201: s.ArrayReceiptSerializer,
            200: OpenApiResponse(
                s.ArrayReceiptSerializer,
                description="A replay of an earlier array submission with the same "
                "Idempotency-Key (header `Idempotent-Replayed: true`): the same array.",
            ),
        },
        description="Submit a job array: one task (a job) per index of `array`, all or none, "
        "each counted against the queue's pending limit. `{index}` in `name` and `command` "
        "becomes the task's index; each task's environment gets BERTH_ARRAY_ID, "
        "BERTH_ARRAY_INDEX, BERTH_ARRAY_SIZE and Slurm's SLURM_ARRAY_JOB_ID, "
        "SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN, "
        "SLURM_ARRAY_TASK_MAX. With `%N` at most N tasks hold GPUs at once; the others "
        "wait with reason `array_limit`.",
    )
    def post(self, request):
        values, errors = s.parse(ARRAY_FIELDS, request.data)
        errors = flatten(errors) if errors else {}
        slug = values.pop("team", None)
        text = values.pop("array", None)
        key = idempotency_key(request)
        caller = Caller(request.user, scope_of(request))
        result = submit_array(caller, slug, values, text, parse_errors=errors, idempotency_key=key)
        body = _identity(result.array) | {"ids": result.ids, "indices": result.indices}
        if result.created:
            return Response(body, status=201)
        return Response(body, status=200, headers={REPLAY_HEADER: "true"})


class ArrayDetailView(APIView):
    @extend_schema(operation_id="arrays_retrieve", responses={200: s.ArraySerializer})
    def get(self, request, array_id: int):
        array = access.get_array_for_user(request.user, array_id, scope=scope_of(request))
        return Response(detail(array))


class ArrayCancelView(APIView):
    @extend_schema(
        operation_id="arrays_cancel",
        request=s.CancelSerializer,
        responses={200: s.ArraySerializer},
        description="Cancel every task of the array that has not ended. Leads may cancel any "
        "array of their team, members their own. An array whose tasks all ended answers 409.",
    )
    def post(self, request, array_id: int):
        array = access.get_array_for_user(
            request.user, array_id, write=True, scope=scope_of(request)
        )
        body = s.CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cancel_array(array, actor=request.user, reason=body.validated_data.get("reason", ""))
        return Response(detail(array))

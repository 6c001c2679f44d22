"""POST /api/v1/jobs/: submit one job. A plain Django handler, not a DRF view.

CI pipelines submit one job per request, hundreds a second, and on a 2-core
machine DRF's dispatch (content negotiation, parser, authentication and throttle
classes, renderer) cost about a millisecond of CPU per request, a third of the
whole. This handler does the same steps itself, in DRF's order, and nothing else:
it parses and serializes; what a submission is lives in
portal.core.actions.submit, which the bulk view and the dashboard call too.

1. Negotiate: the answer is JSON (406 otherwise).
2. Authenticate before reading the body: a Bearer token (the API's
   BearerTokenAuthentication, or the token a grant remembered, portal/core/grants.py)
   or a browser session with its CSRF token; 401 with `WWW-Authenticate: Bearer`.
3. Throttle per token (or session user): 429 with Retry-After.
4. Read the body: JSON only (415), the API's one reader (413 too large, 400
   `parse_error`, nesting bounded), then the fields' types (serializers.parse).
5. Submit (actions.submit.submit) and answer the receipt: 201, or 200 with
   `Idempotent-Replayed: true` for a retry; the action's refusals become the API's
   one error format (portal/api/errors.py).

The OpenAPI schema of this operation is published by JobsView.post in
api/views/jobs.py (drf-spectacular reads the view class; the class hands every
POST to this handler before DRF runs).
"""

from __future__ import annotations

import io

from django.http import HttpResponse
from rest_framework import HTTP_HEADER_ENCODING, exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.renderers import JSONRenderer

from portal.api import serializers as s
from portal.api.auth import BearerTokenAuthentication
from portal.api.errors import exception_response, flatten, invalid
from portal.api.parsers import read_json
from portal.api.throttles import TokenRateThrottle
from portal.core import grants
from portal.core.actions.store import SUBMISSIONS
from portal.core.actions.submit import Caller, CallerChanged, submit
from portal.core.actions.tokens import token_scope
from portal.core.secrets import digest

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 200
ALLOW = "GET, POST, HEAD, OPTIONS"  # what /api/v1/jobs/ answers to (JobsView)
# Built once: a serializer's fields are deep-copied per instance, a measurable part of
# every submission. parse() and to_representation() keep no per-request state on them.
SUBMIT_FIELDS = s.JobSubmitSerializer()
RECEIPT = s.JobReceiptSerializer()
RENDERER = JSONRenderer()
BEARER = BearerTokenAuthentication()
_PLAIN_ACCEPT = frozenset({"*/*", "application/json"})


def submit_job_view(request) -> HttpResponse:
    """The one handler of a single submission (see the module's docstring)."""
    with SUBMISSIONS.coming():  # the batch being gathered may wait for this one
        return _submit_job(request)


def _submit_job(request) -> HttpResponse:
    caller = None
    try:
        if not _accepts_json(request):  # 1.
            raise exceptions.NotAcceptable()
        caller = _caller(request)  # 2.
        _throttle(request, caller)  # 3.
        values, errors, key = _read(request)  # 4.
        try:
            result = submit(caller, values, parse_errors=errors, idempotency_key=key)  # 5.
        except CallerChanged:
            caller = _caller(request, fresh=True)
            result = submit(caller, values, parse_errors=errors, idempotency_key=key)
    except Exception as exc:  # noqa: BLE001 — every refusal in the API's format; bugs re-raised
        refusal = exc
        if caller is not None and caller.remembered:
            try:  # a refusal is never answered from memory alone
                _caller(request, fresh=True)
            except exceptions.APIException as auth_exc:
                refusal = auth_exc
        response = exception_response(refusal)
        if response is None:
            raise
        return _allow(response)
    body = RENDERER.render(RECEIPT.to_representation(result.job))
    response = HttpResponse(body, content_type="application/json", status=201)
    if result.created:
        response["Location"] = f"/api/v1/jobs/{result.job.pk}/"
    else:
        response.status_code = 200
        response[REPLAY_HEADER] = "true"
    return _allow(response)


def _accepts_json(request) -> bool:
    """The Accept header allows JSON (as DRF's negotiation decides: parameters such
    as a charset do not matter; no header means anything; an empty one, nothing)."""
    if request.META.get("HTTP_ACCEPT", "*/*") in _PLAIN_ACCEPT:
        return True  # what clients send; parsing the header costs more than the answer
    return any(
        kind.main_type in ("*", "application") and kind.sub_type in ("*", "json")
        for kind in request.accepted_types
    )


def _allow(response: HttpResponse) -> HttpResponse:
    response["Allow"] = ALLOW
    return response


def _caller(request, *, fresh: bool = False) -> Caller:
    """Who is calling, found before the body is read; AuthenticationFailed /
    NotAuthenticated (401) when nobody is, PermissionDenied (403) without CSRF."""
    parts = _authorization(request).split()
    if parts and parts[0].lower() == b"bearer":
        token_digest = None
        if len(parts) == 2 and parts[1].isascii():
            token_digest = digest(parts[1].decode("ascii"))
            token = None if fresh else grants.token(token_digest)
            if token is not None:
                request.auth = token
                return Caller(token.user, token_scope(token), token_digest, remembered=True)
        try:
            user, token = BEARER.authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            exc.auth_header = BEARER.authenticate_header(request)
            raise
        request.auth = token
        return Caller(user, token_scope(token), token_digest)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        exc = exceptions.NotAuthenticated()
        exc.auth_header = BEARER.authenticate_header(request)
        raise exc
    SessionAuthentication().enforce_csrf(request)
    request.auth = None
    return Caller(user)


def _authorization(request) -> bytes:
    """The Authorization header as DRF's get_authorization_header reads it, from META:
    `request.headers` builds a mapping of every header, a measurable part of a
    submission, for the two this handler reads."""
    auth = request.META.get("HTTP_AUTHORIZATION", b"")
    return auth.encode(HTTP_HEADER_ENCODING) if isinstance(auth, str) else auth


def _throttle(request, caller: Caller) -> None:
    throttle = TokenRateThrottle()
    request.user = caller.user  # what the throttle counts by when there is no token
    if not throttle.allow_request(request, None):
        raise exceptions.Throttled(throttle.wait())


def _read(request) -> tuple[dict, dict, str | None]:
    """The field values that parsed, the messages of those that did not (flat), and
    the Idempotency-Key."""
    raw = request.body
    data = {}
    if raw:
        if request.content_type != "application/json":
            raise exceptions.UnsupportedMediaType(request.META.get("CONTENT_TYPE", ""))
        data = read_json(io.BytesIO(raw))
    values, errors = s.parse(SUBMIT_FIELDS, data)
    errors = flatten(errors) if errors else {}
    if errors.keys() & {"team", "non_field_errors"}:
        raise invalid(errors)
    return values, errors, idempotency_key(request)


def idempotency_key(request, limit: int = MAX_KEY_LENGTH) -> str | None:
    key = request.META.get(
        "HTTP_IDEMPOTENCY_KEY", ""
    ).strip()  # request.headers[IDEMPOTENCY_HEADER]
    if not key:
        return None
    if len(key) > limit or not key.isprintable() or not key.isascii():
        raise invalid({IDEMPOTENCY_HEADER: [f"At most {limit} printable ASCII characters."]})
    return key

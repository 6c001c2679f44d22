"""The common single submission, answered without DRF's request machinery.

CI pipelines submit one job per request, hundreds a second, and on a 2-core
machine the full view spent 3.4–3.9 ms of CPU on each: DRF's dispatch (content
negotiation, parser, authentication and throttle classes, renderer), a query
for the token, one for the team and queue, the receipt built field by field.
This path takes a plain request (a Bearer token, a small JSON object of the
job's fields, nothing unusual in it), parses and validates it as the full view
does (fastparse, jobspec), counts it against the token's throttle and stores
it with submit_job's one statement: 2.5–2.8 ms.

Who may submit where (the token usable, its user a member of the team, the
queue) is found by one query and remembered as a grant for GRANT_TTL_S. The
statement that stores the job checks the grant again (submit_job's only_if:
the token, the user, the role, the scope, the team's and the queue's rows
unchanged), so nothing is decided from memory alone: a revoked token or a
changed queue stores nothing, and the request goes the full way, which answers
as if nothing had been remembered. The grant only saves the query.

It answers only a stored job (201). Everything else (any refusal, a replay, a
request it is not sure of) goes to the full view, JobListView.post, which
writes every message: this path never answers an error itself. Before it
hands a request over it has changed nothing but, at most, the throttle's
count, which it leaves on the request so that the full view does not count the
request twice. tests/api/test_fastsubmit.py checks that both ways answer alike.
BERTH_FAST_SUBMIT=0 turns it off.
"""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from portal.api.errors import ApiError
from portal.api.fastparse import fast_parse
from portal.api.lookups import ApiLookups
from portal.api.throttles import TokenRateThrottle
from portal.api.views.jobs import (
    RECEIPT,
    SUBMIT_FIELDS,
    JobListView,
    idempotency_key,
    validated_spec,
)
from portal.core.actions.jobs import submit_job
from portal.core.actions.tokens import SubmitGrant, authenticate_for_submit
from portal.core.jobspec import SpecError
from portal.core.secrets import digest

# How long a grant (this token may submit to this queue) is remembered in a web
# process. The statement that stores a job re-checks it (submit_job's only_if), so a
# revoked token, a changed role or queue is never served from memory: it only saves
# the query that finds them.
GRANT_TTL_S = 10.0
MAX_GRANTS = 10_000
_grants: dict[tuple, tuple[float, SubmitGrant]] = {}

# A single job's body is a few hundred bytes; a larger one (up to the parser's
# limit) is legal but rare enough for the full view.
MAX_FAST_BODY = 64 * 1024
_JSON = "application/json"
_JSON_TYPES = {_JSON, f"{_JSON}; charset=utf-8"}
# Accept headers DRF's negotiation answers with JSON as they are (an empty one is a
# 406 there; a charset parameter does not match the renderer's media type).
_ACCEPTED = {None, "*/*", _JSON}
RENDERER = JSONRenderer()  # the full view's, so the bytes are the same


class JobsView(JobListView):
    """/api/v1/jobs/: a plain submission the fast way, everything else as JobListView."""

    def dispatch(self, request, *args, **kwargs):
        if request.method == "POST":
            response = fast_submit(request)
            if response is not None:
                return response
        return super().dispatch(request, *args, **kwargs)


def fast_submit(request) -> HttpResponse | None:
    """The response to a plain single submission, or None: the full view decides."""
    if not settings.BERTH_FAST_SUBMIT:
        return None
    plaintext = _bearer(request.META)
    data = _json_body(request)
    if plaintext is None or data is None:
        return None
    values = fast_parse(SUBMIT_FIELDS, data)
    if values is None:
        return None
    try:
        key = idempotency_key(request)
    except ApiError:
        return None
    where = (digest(plaintext), values.pop("team", None), values.get("queue") or "default")
    grant = _grant(plaintext, where)
    if grant is None:
        return None
    if not TokenRateThrottle.count_for(request, grant.token):
        return None
    team, user = grant.team, grant.token.user
    try:
        spec = validated_spec(team, values, {}, ApiLookups(team, queues=[grant.queue]))
        result = submit_job(
            team=team, spec=spec, user=user, idempotency_key=key, only_if=grant.guard
        )
    except SpecError:
        return None
    if result is None:  # nothing stored: a refusal, or the grant no longer holds
        _grants.pop(where, None)
        return None
    body = RENDERER.render(RECEIPT.to_representation(result.job))
    response = HttpResponse(body, content_type=_JSON, status=201)
    response["Location"] = f"/api/v1/jobs/{result.job.pk}/"
    response["Allow"] = "GET, POST, HEAD, OPTIONS"
    return response


def _grant(plaintext: str, where: tuple) -> SubmitGrant | None:
    """The grant for (token digest, team slug, queue name), remembered GRANT_TTL_S."""
    now = time.monotonic()
    hit = _grants.get(where)
    if hit is not None and hit[0] > now:
        return hit[1]
    grant = authenticate_for_submit(plaintext, where[1], where[2])
    if grant is not None:
        if len(_grants) >= MAX_GRANTS:
            _grants.clear()
        _grants[where] = (now + GRANT_TTL_S, grant)
    return grant


def forget() -> None:
    """Drop every remembered grant."""
    _grants.clear()


def _bearer(meta) -> str | None:
    """The token of `Authorization: Bearer <token>`, split as DRF splits it (the
    header's Latin-1 bytes on ASCII whitespace), or None."""
    try:
        parts = meta.get("HTTP_AUTHORIZATION", "").encode("iso-8859-1").split()
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return None
        return parts[1].decode("ascii")
    except UnicodeError:
        return None


def _json_body(request):
    """The body as JSON when it is plainly so: the JSON media type (no parameter but
    UTF-8), a small length, text JSON decodes as the parser would; else None."""
    meta = request.META
    if meta.get("CONTENT_TYPE", "").lower() not in _JSON_TYPES:
        return None
    if meta.get("HTTP_ACCEPT") not in _ACCEPTED:
        return None
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= MAX_FAST_BODY:
        return None
    raw = request.body
    if b"\\u" in raw:
        return None  # escapes (lone surrogates among them) are the parser's to judge
    try:  # strict UTF-8, as the parser reads it: no BOM, no UTF-16, no surrogates
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse)
    except ValueError:
        return None


def _refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")  # NaN, Infinity: the parser refuses them

"""What a web process remembers of who may submit where, for GRANT_TTL_S.

CI pipelines submit one job per request, hundreds a second. Finding the token,
its user, the team, the role and the queue costs a query (two on a token's first
use); a grant remembers the answer per (token digest, team slug, queue name), and
the token per digest, so that the common submission costs one statement: the
insert, which checks the grant again (submit_job's `only_if`, the grant's
`guard`: the token usable and its user's, the user, the role, the scope, the
team's and the queue's rows unchanged). Nothing is decided from memory alone:
when the guard finds no row, portal.core.actions.submit forgets the grant and
asks the database, which answers as if nothing had been remembered; a refusal
is never answered from memory either (the API handler authenticates afresh
before it answers an error). PostgreSQL only: on SQLite nothing is remembered.
"""

from __future__ import annotations

import time

from portal.core.actions.tokens import SubmitGrant, authenticate_for_submit
from portal.core.models import ApiToken

GRANT_TTL_S = 10.0
MAX_ENTRIES = 10_000
_grants: dict[tuple, tuple[float, SubmitGrant]] = {}
_tokens: dict[str, tuple[float, ApiToken]] = {}


def token(token_digest: str) -> ApiToken | None:
    """The token of a grant remembered for this digest, or None."""
    hit = _tokens.get(token_digest)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def grant(token_digest: str, slug: str | None, queue_name: str) -> SubmitGrant | None:
    """The grant remembered for (digest, team slug, queue name), else found by one
    query (authenticate_for_submit) and remembered; None when the database must
    decide the long way (any refusal, staff, SQLite)."""
    where = (token_digest, slug, queue_name)
    now = time.monotonic()
    hit = _grants.get(where)
    if hit is not None and hit[0] > now:
        return hit[1]
    found = authenticate_for_submit(token_digest, slug, queue_name)
    if found is not None:
        if len(_grants) >= MAX_ENTRIES or len(_tokens) >= MAX_ENTRIES:
            forget()
        _grants[where] = (now + GRANT_TTL_S, found)
        _tokens[token_digest] = (now + GRANT_TTL_S, found.token)
    return found


def drop(token_digest: str, slug: str | None, queue_name: str) -> None:
    """Forget a grant that no longer holds, and its token."""
    _grants.pop((token_digest, slug, queue_name), None)
    _tokens.pop(token_digest, None)


def forget() -> None:
    """Drop everything remembered (tests call this between scenarios)."""
    _grants.clear()
    _tokens.clear()

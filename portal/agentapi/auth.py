"""Who is calling the agent API: the node a Bearer node token names, and, on every
/api/agent/ path, a Host header Django accepts (else the one JSON error, not an HTML page)."""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from portal.core import statements
from portal.core.actions.nodes import retire_previous_token
from portal.core.models import Node
from portal.core.secrets import digest

PREFIX = "/api/agent/"


def bearer(request) -> str:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() if auth.startswith("Bearer ") else ""


def authenticated_node(token: str) -> Node | None:
    """The node whose token this is: its current token, or the one that one replaced while the
    overlap lasts (Node.authenticated_by). A node whose identity an admin reset has none.
    The first use of a current token retires the previous one (retire_previous_token).

    Hand-written and prepared on PostgreSQL: it runs for every heartbeat, and costs one
    query and a comparison unless a rotation is pending."""
    if not token:
        return None
    token_digest, now = digest(token), timezone.now()
    if connection.vendor != "postgresql":
        node = statements.node_by_token_orm(token_digest, now)
    else:
        node = statements.node_by_token(token_digest, now)
    if node is not None and node.previous_token_hash and node.token_hash == token_digest:
        retire_previous_token(node)
    return node

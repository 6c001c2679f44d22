"""Who is calling the agent API: the node a Bearer node token names, and, on every
/api/agent/ path, a Host header Django accepts (else the one JSON error, not an HTML page)."""

from __future__ import annotations

from django.db import connection

from portal.core import statements
from portal.core.models import Node
from portal.core.secrets import digest

PREFIX = "/api/agent/"


def bearer(request) -> str:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() if auth.startswith("Bearer ") else ""


def authenticated_node(token: str) -> Node | None:
    """The node whose token this is (a node whose identity an admin reset has none).

    Hand-written and prepared on PostgreSQL: it runs for every heartbeat."""
    if not token:
        return None
    if connection.vendor != "postgresql":
        return statements.node_by_token_orm(digest(token))
    return statements.node_by_token(digest(token))

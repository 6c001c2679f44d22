"""Who may read /metrics: a bearer token, or a client inside an allowed network.

The metrics expose team names, queue depths and node names, so they are not
public. Prometheus either sends `Authorization: Bearer <BERTH_METRICS_TOKEN>`
or scrapes from an address inside BERTH_METRICS_ALLOW_CIDRS. Only the peer
address (REMOTE_ADDR) counts: X-Forwarded-For is set by whoever sends the
request, so it proves nothing. Behind a reverse proxy on the same machine the
peer is the proxy itself; the example nginx site therefore refuses /metrics and
Prometheus scrapes each web process directly (docs/deploy.md).
"""

from __future__ import annotations

import hmac
import ipaddress
from enum import Enum

from django.conf import settings


class Verdict(Enum):
    ALLOWED = 200
    NO_CREDENTIALS = 401  # nothing presented and not in an allowed network
    WRONG_TOKEN = 403  # a token was presented and it is not the right one


def metrics_access(meta: dict) -> Verdict:
    """Return whether the request (its WSGI environ / request.META) may read /metrics.

    A presented token must be right, whatever the address: a scraper that sends
    a stale token should find out, not be let in by its network.
    """
    presented = _bearer(meta.get("HTTP_AUTHORIZATION", ""))
    if presented is not None:
        expected = settings.BERTH.get("METRICS_TOKEN") or ""
        if expected and hmac.compare_digest(presented.encode(), expected.encode()):
            return Verdict.ALLOWED
        return Verdict.WRONG_TOKEN
    if in_networks(meta.get("REMOTE_ADDR", ""), settings.BERTH.get("METRICS_ALLOW_CIDRS", ())):
        return Verdict.ALLOWED
    return Verdict.NO_CREDENTIALS


def _bearer(header: str) -> str | None:
    """Return the token of an `Authorization: Bearer …` header, "" for a malformed one."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def in_networks(address: str, cidrs) -> bool:
    """Return whether `address` lies in any of `cidrs`; IPv4-mapped IPv6 counts as IPv4."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)

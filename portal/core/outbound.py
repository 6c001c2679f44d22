"""Calls the portal makes to URLs its users gave it (webhooks): which URLs it may call,
how a body is signed, and the one HTTP POST that goes out.

A webhook URL is user input, so a request to it is a server-side request forgery
risk (OWASP's SSRF prevention cheat sheet): the portal could be made to call its own
database, a cloud metadata service (169.254.169.254) or another internal host. The
rules, in docs/security.md "Outbound webhooks":

1. Only `http` and `https`, a host name, no user name or password in the URL.
2. No private, loopback, link-local, shared, reserved or multicast address, unless
   BERTH["NOTIFY_ALLOW_PRIVATE"] says so: checked on the URL's text when the URL is
   given (an address literal, `localhost`), and on every address the name resolves to
   when it is called.
3. Resolve once and pin: the connection goes to the address that was checked (with
   the name in the Host header and in TLS's SNI and certificate check), so a DNS answer
   that changes between the check and the connect (DNS rebinding) cannot redirect it.
4. No redirects followed, a timeout on connect and on each read, a small response read.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_CHARS = 2000
RESPONSE_BYTES = 2048  # what is read of an answer: enough for an error message
SIGNATURE_HEADER = "Berth-Signature"
TIMESTAMP_HEADER = "Berth-Timestamp"
EVENT_HEADER = "Berth-Event"
DELIVERY_HEADER = "Berth-Delivery"
USER_AGENT = "Berth-Webhooks/1"


class Refused(Exception):
    """The portal will not call this URL (rules 1–2); permanent, never retried."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why the portal will not call `url`, judged on its text alone (rules 1 and 2 for
    an address literal or `localhost`), or None. No DNS: this runs where a URL is
    given, a submission among them; names are checked when they are called."""
    if len(url) > MAX_URL_CHARS:
        return f"At most {MAX_URL_CHARS} characters."
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return "A URL has no spaces or control characters."
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "Not a URL; write it like https://hooks.example.com/berth."
    if parts.scheme not in ("http", "https"):
        return "Only http:// and https:// URLs are called."
    host = parts.hostname
    if not host:
        return "The URL names no host."
    if parts.username is not None or parts.password is not None:
        return "No user name or password in the URL; the body is signed instead."
    if port == 0:
        return "Port 0 is not a port."
    if allow_private:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return "Refused: localhost is this machine (private addresses are not called)."
    try:
        address = ipaddress.ip_address(host.split("%")[0])  # fe80::1%eth0: a zone
    except ValueError:
        return None  # a name: judged on what it resolves to, when it is called
    return _address_problem(address)


def _address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if not address.is_global or address.is_multicast:
        return (
            f"Refused: {address} is a private, loopback, link-local or reserved address "
            "(docs/security.md)."
        )
    return None


def pinned_address(host: str, port: int, *, allow_private: bool) -> str:
    """The address to connect to (rule 3): the first that `host` resolves to, after
    every one of them passed rule 2. Raises Refused, or OSError when it does not resolve."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise OSError(f"{host} does not resolve")
    if not allow_private:
        for text in addresses:
            problem = _address_problem(ipaddress.ip_address(text.split("%")[0]))
            if problem:
                raise Refused(f"{host} resolves to {text}. {problem}")
    return addresses[0]


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`v1=` and the hex HMAC-SHA256 of `"<timestamp>." + body` under the team's secret:
    the timestamp is signed too, so an old body cannot be replayed with a new one."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={mac.hexdigest()}"


def signed_headers(secret: str, timestamp: int, body: bytes, event: str, delivery: int) -> dict:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: event,
        DELIVERY_HEADER: str(delivery),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


def post(url: str, body: bytes, headers: dict, *, timeout: float, allow_private: bool) -> Answer:
    """POST `body` to `url` under the rules above. Raises Refused (permanent) or
    OSError / http.client.HTTPException (worth retrying)."""
    problem = url_problem(url, allow_private=allow_private)
    if problem:
        raise Refused(problem)
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    address = pinned_address(parts.hostname, port, allow_private=allow_private)
    conn = _connection(parts.hostname, port, address, https, timeout)
    try:
        path = parts.path or "/"
        conn.request("POST", f"{path}?{parts.query}" if parts.query else path, body, headers)
        response = conn.getresponse()
        text = response.read(RESPONSE_BYTES).decode("utf-8", "replace")
        return Answer(response.status, text)
    finally:
        conn.close()


def _connection(host, port, address, https, timeout) -> http.client.HTTPConnection:
    """A connection to `host` that connects to the pinned `address` (rule 3): the name
    stays in the Host header and, for https, in SNI and the certificate check."""
    if https:
        conn = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)

    def connect_pinned(_address, connect_timeout, source_address=None):
        return socket.create_connection((address, port), connect_timeout, source_address)

    conn._create_connection = connect_pinned
    return conn

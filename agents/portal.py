"""HTTP client for the portal's agent API (docs/protocol.md), with failures sorted by what to do.

- ``TransientError``: connection trouble, 5xx, 429 — retry with backoff (honour Retry-After).
- ``RejectedError``: 4xx other than 401/403/429 — the portal refused this request; log its
  error and carry on (the next request may differ).
- ``AuthError``: 401/403 — the token is wrong or revoked; retrying cannot help.
"""

from __future__ import annotations

import email.utils
import functools
import os
import re
import time
from typing import Any

import requests

from agents import __version__

REGISTER_PATH = "/api/agent/v1/register"
HEARTBEAT_PATH = "/api/agent/v1/heartbeat"


class PortalError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class TransientError(PortalError):
    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message, status)
        self.retry_after = retry_after


class RejectedError(PortalError):
    def __init__(self, message: str, status: int, error: dict[str, Any]):
        super().__init__(message, status)
        self.error = error


class AuthError(PortalError):
    """Permanent: the portal does not accept this node's credentials."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Return the wait a Retry-After header asks for (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _reason(exc: requests.RequestException) -> str:
    """The useful end of a requests error ("[Errno 111] Connection refused"), not its whole chain."""
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    match = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    return match.group(0) if match else str(exc)[:200]


def _error_body(response: requests.Response) -> dict[str, Any]:
    """The portal's ``{"error": {"code", "message", ...}}``, or a stand-in built from the raw text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {"code": f"http_{response.status_code}", "message": response.text[:300].strip()}


def _settled(session: requests.Session, base_url: str) -> requests.Session:
    """The session with what requests would read from the environment on every request
    (proxies, NO_PROXY, a CA bundle) read once now: scanning ``os.environ`` per request
    was a tenth of the agent's CPU at tens of beats a second (docs/benchmarks.md). A
    watch URL on another host asks for its own (``_proxies_for``)."""
    session.headers["User-Agent"] = f"berth-agent/{__version__}"
    if session.trust_env:
        session.proxies.update(requests.utils.get_environ_proxies(base_url))
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle and session.verify is True:
            session.verify = bundle
        session.trust_env = False
    return session


@functools.lru_cache(maxsize=16)
def _proxies_for(origin: str) -> tuple[tuple[str, str], ...]:
    """The environment's proxies for one scheme://host (NO_PROXY applied), read once."""
    return tuple(sorted(requests.utils.get_environ_proxies(origin).items()))


class PortalClient:
    def __init__(
        self, base_url: str, *, timeout_s: float = 10.0, session: requests.Session | None = None
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = _settled(session or requests.Session(), self.base_url)
        self._watch_session = _settled(requests.Session(), self.base_url)

    def register(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._post(REGISTER_PATH, payload)

    def rotate(self, token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Trade the node token for a new one: the registration request, the token as Bearer
        and no bootstrap token (docs/protocol.md section 1, "Rotation")."""
        return self._post(REGISTER_PATH, payload, token)

    def heartbeat(self, token: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self._post(HEARTBEAT_PATH, payload, token)

    def watch(self, url: str, ticket: str, since: int, timeout_s: float) -> dict[str, Any]:
        """Wait until the node's desired state moves past version ``since`` (docs/protocol.md
        section 2a); ``url`` is a path on the portal or an absolute URL. Its own session, so
        the watcher thread never shares a connection with the heartbeat."""
        if not url.startswith(("http://", "https://")):
            url = self.base_url + "/" + url.lstrip("/")
        headers = {"Authorization": f"Bearer {ticket}"}
        origin = "/".join(url.split("/", 3)[:3])
        proxies = None if origin == self.base_url else dict(_proxies_for(origin))
        try:
            response = self._watch_session.get(
                url,
                params={"since": since},
                headers=headers,
                proxies=proxies,
                timeout=(self.timeout_s, timeout_s + self.timeout_s),
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise TransientError(f"cannot reach the watch at {url}: {_reason(exc)}") from exc
        return self._decode(url, response)

    def _post(self, path: str, payload: dict[str, Any], token: str | None = None) -> dict[str, Any]:
        url = self.base_url + path
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = self._session.post(
                url, json=payload, headers=headers, timeout=self.timeout_s, allow_redirects=False
            )
        except requests.RequestException as exc:
            raise TransientError(f"cannot reach the portal at {url}: {_reason(exc)}") from exc
        return self._decode(url, response)

    @staticmethod
    def _decode(url: str, response: requests.Response) -> dict[str, Any]:
        status = response.status_code
        if status in (200, 201):
            try:
                body = response.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):
                raise TransientError(f"{url} answered {status} without a JSON object", status)
            return body
        error = _error_body(response)
        message = f"{url} answered {status}: {error.get('message') or error.get('code')}"
        if status in (401, 403):
            raise AuthError(message, status)
        if status == 429 or status >= 500:
            raise TransientError(
                message, status, parse_retry_after(response.headers.get("Retry-After"))
            )
        if 400 <= status < 500:
            raise RejectedError(message, status, error)
        raise TransientError(message, status)

    def close(self) -> None:
        self._session.close()
        self._watch_session.close()

"""HTTP to the portal, with bounded retries that never duplicate a job.

Retried: network errors, 5xx and 429, with exponential backoff and jitter,
waiting at least what Retry-After asks. A request that is not safe to repeat
(a POST without an Idempotency-Key) is retried only when it certainly did not
arrive: the connection failed, or the server refused it with 429 or 503.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from berthcli import __version__

_sleep = time.sleep  # tests replace this to see the waits without waiting

RETRY_STATUSES = {429, 500, 502, 503, 504}
NOT_PROCESSED = {429, 503}  # the request was refused before anything happened
MAX_RETRY_WAIT_S = 300.0


@dataclass
class ApiError(Exception):
    """The server answered with an error in the API's format."""

    status: int
    code: str
    message: str
    fields: dict[str, list[str]] = field(default_factory=dict)
    body: Any = None

    def __str__(self) -> str:
        return self.message


class Unavailable(Exception):
    """The portal could not be reached, or kept failing, after every retry."""


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


class Client:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        auth: tuple[str, str] | None = None,
        retries: int = 5,
        timeout: float = 30.0,
        backoff: float = 0.5,
        verbose: bool = True,
    ):
        self.base = url.rstrip("/")
        self.retries = retries
        self.retry_statuses = RETRY_STATUSES  # `berth login` leaves 429 out
        self.timeout = timeout
        self.backoff = backoff
        self.verbose = verbose
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"berth-cli/{__version__}"
        self.session.headers["Accept"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.auth = auth

    def get(self, path: str, params: dict | None = None) -> Reply:
        return self.request("GET", path, params=params, safe=True)

    def post(
        self, path: str, body: Any = None, *, headers: dict | None = None, safe=False
    ) -> Reply:
        return self.request("POST", path, json=body or {}, headers=headers, safe=safe)

    def request(self, method: str, path: str, *, safe: bool, **kwargs) -> Reply:
        """Send, retrying as the module docstring says; return the reply or raise ApiError / Unavailable."""
        url = path if path.startswith("http") else f"{self.base}{path}"
        for attempt in range(1, self.retries + 2):
            last = attempt > self.retries
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except requests.ConnectionError as exc:
                if last or not (safe or _not_sent(exc)):
                    raise Unavailable(f"cannot reach {self.base}: {_reason(exc)}") from None
                self._wait(attempt, None, f"cannot reach {self.base}")
                continue
            except requests.Timeout:
                if last or not safe:
                    raise Unavailable(f"{self.base} did not answer in {self.timeout:g} s") from None
                self._wait(attempt, None, "no answer")
                continue
            retry = safe or response.status_code in NOT_PROCESSED
            if response.status_code in self.retry_statuses and retry and not last:
                self._wait(attempt, response, _describe(response))
                continue
            return _reply(response)
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, response, why: str) -> None:
        delay = min(MAX_RETRY_WAIT_S, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        retry_after = _retry_after(response)
        if retry_after is not None:
            delay = min(MAX_RETRY_WAIT_S, max(delay, retry_after))
        if self.verbose:
            print(
                f"berth: {why}; retrying in {delay:.1f} s ({attempt}/{self.retries})",
                file=sys.stderr,
            )
        _sleep(delay)


def _reply(response: requests.Response) -> Reply:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise _error(response, body)
    return Reply(response.status_code, body, dict(response.headers))


def _error(response: requests.Response, body) -> Exception:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return ApiError(
            response.status_code,
            str(error.get("code", "")),
            str(error.get("message", "")),
            error.get("fields") or {},
            body,
        )
    if response.status_code >= 500 or response.status_code == 429:
        return Unavailable(f"the server answered {response.status_code} {response.reason}")
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return ApiError(response.status_code, "http_error", f"{response.status_code} {text}".strip())


def _retry_after(response) -> float | None:
    if response is None:
        return None
    raw = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def _describe(response) -> str:
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = response.reason
    return f"server answered {response.status_code} ({code})"


def _not_sent(exc: requests.ConnectionError) -> bool:
    """True when the connection failed before the request went out (safe to send again)."""
    text = repr(exc)
    return any(
        marker in text
        for marker in ("NewConnectionError", "Connection refused", "Name or service not known",
                       "Failed to resolve", "ConnectTimeout")
    )  # fmt: skip


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "Failed to resolve"):
        if marker in text:
            return marker.lower()
    return text[:200]

"""The one JSON reader for what users send: API bodies (portal/api/parsers.py and the
submit handler) and JSON typed into the dashboard's forms.

Strict JSON (no NaN or Infinity), strict UTF-8 (no byte order mark, no UTF-16), no
lone UTF-16 surrogates (`"\\ud800"` is valid JSON but not text the database can
store), and nesting at most MAX_DEPTH deep: a 2 KB body of 950 nested lists makes
Python's decoder (and any recursive walk after it) run out of stack, which must be
a 400, never a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deeper than anything Berth reads (a bulk body is 4 levels: {"jobs": [{"env": {}}]}).
MAX_DEPTH = 32
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_decoder = json.JSONDecoder(parse_constant=lambda name: _refuse(name))


class JsonError(ValueError):
    """The text is not JSON Berth reads; the message says why, for the user."""


def _refuse(name: str):
    raise JsonError(f"{name} is not JSON.")


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`, or JsonError."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonError(f"The body is not UTF-8 ({exc.reason}).") from None
        escapes = _SURROGATE_ESCAPE.search(raw) is not None
    else:
        text, escapes = raw, "\\u" in raw
    if _opens(raw) > MAX_DEPTH:
        _check_depth(raw)
    try:
        value = _decoder.decode(text)
    except RecursionError:
        raise JsonError(f"Nested deeper than {MAX_DEPTH} levels.") from None
    except JsonError:
        raise
    except ValueError as exc:
        raise JsonError(str(exc)) from None
    if escapes and not _encodable(value):
        raise JsonError("The body contains a lone UTF-16 surrogate.")
    return value


def _opens(raw: bytes | str) -> int:
    if isinstance(raw, bytes):
        return raw.count(b"[") + raw.count(b"{")
    return raw.count("[") + raw.count("{")


# What nesting depends on: brackets, and the quotes and backslashes that say which
# brackets are inside strings. The rest of the text is dropped at C speed first.
_DROP = bytes(c for c in range(256) if c not in b'[]{}"\\')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_PAIR = re.compile(rb"\[\]|\{\}")


def _check_depth(raw: bytes | str) -> None:
    """Raise JsonError when brackets outside strings nest deeper than MAX_DEPTH.

    Strings are removed from the text's skeleton, then innermost pairs of brackets
    round by round: the rounds needed are the depth. About 0.5 ms per 1,000 jobs of
    a bulk body; run only when the text has more than MAX_DEPTH opening brackets."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    skeleton = raw.translate(None, _DROP)
    if b"\\" not in skeleton:
        skeleton = skeleton.replace(b'""', b"")  # strings without brackets or escapes
    if b'"' in skeleton:
        skeleton = _STRING.sub(b"", skeleton)
    for _ in range(MAX_DEPTH):
        reduced = _PAIR.sub(b"", skeleton)
        if not reduced or len(reduced) == len(skeleton):
            return  # shallow enough, or not JSON at all: the decoder says why
        skeleton = reduced
    raise JsonError(f"Nested deeper than {MAX_DEPTH} levels.")


def _encodable(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_encodable(v) for v in value)
    return True

"""JSON bodies of bounded size, read by the one JSON reader (portal/core/jsontext.py:
strict UTF-8, no lone surrogates, bounded nesting)."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from portal.api.errors import ApiError
from portal.core import jsontext

# A bulk submission of 5,000 jobs is about 2 MiB; DRF itself sets no limit on JSON.
MAX_BODY_BYTES = 16 * 1024 * 1024


def read_json(stream) -> object:
    """The JSON value of a request body (a file-like object), or ApiError 413 /
    ParseError 400: what every JSON endpoint of the API reads bodies with."""
    raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(
            413, "too_large", f"The request body is larger than {MAX_BODY_BYTES >> 20} MiB."
        )
    try:
        return jsontext.loads(raw)
    except jsontext.JsonError as exc:
        raise ParseError(f"JSON parse error - {exc}") from None


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return read_json(stream)

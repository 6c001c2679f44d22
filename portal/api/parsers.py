"""JSON bodies of bounded size, refusing text the database cannot store (lone
UTF-16 surrogates such as `"\\ud800"` are valid JSON but not valid UTF-8)."""

from __future__ import annotations

import io
import re

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from portal.api.errors import ApiError

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


# A bulk submission of 5,000 jobs is about 2 MiB; DRF itself sets no limit on JSON.
MAX_BODY_BYTES = 16 * 1024 * 1024


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(
                413, "too_large", f"The request body is larger than {MAX_BODY_BYTES >> 20} MiB."
            )
        data = super().parse(io.BytesIO(raw), media_type, parser_context)
        if _SURROGATE_ESCAPE.search(raw) and not _encodable(data):
            raise ParseError("JSON parse error - the body contains a lone UTF-16 surrogate.")
        return data


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

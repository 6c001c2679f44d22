"""A small body nested deep is a 400 `parse_error` on every JSON endpoint, never a 500
(portal/core/jsontext.py bounds nesting for the API's one JSON reader)."""

from __future__ import annotations

import pytest

from tests.api.conftest import bearer, error_of
from tests.api.test_auth import _basic

DEEP = b"[" * 950 + b"]" * 950  # about 2 KB


@pytest.mark.parametrize(
    "path", ["/api/v1/jobs/", "/api/v1/jobs/bulk/", "/api/v1/tokens/", "cancel"]
)
def test_a_deeply_nested_body_is_a_parse_error(path, personas, cluster):
    from tests.api.conftest import submit

    api = bearer(personas.lead_a)
    if path == "cancel":
        path = f"/api/v1/jobs/{submit(cluster.team_a, personas.lead_a).pk}/cancel/"
    for body in (DEEP, b'{"name": ' + DEEP + b"}"):
        response = api.client.post(path, body, content_type="application/json", headers=api.headers)
        error_of(response, 400, "parse_error")


def test_password_login_with_a_deep_body_is_a_parse_error(personas):
    from django.test import Client

    response = Client().post(
        "/api/v1/tokens/",
        DEEP,
        content_type="application/json",
        headers={"Authorization": _basic("member_a")},
    )
    error_of(response, 400, "parse_error")

"""The OpenAPI schema: served, committed up to date, and true to the API's behaviour
(schemathesis generates requests from it and checks every response against it)."""

from __future__ import annotations

import os
from io import StringIO
from pathlib import Path

import pytest
import schemathesis
from django.core import signals
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.core.models import ApiToken
from tests.api.conftest import run_on, submit

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REGENERATE = ".venv/bin/python manage.py spectacular --file docs/openapi.yaml --validate"


def test_committed_schema_is_current():
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert out.getvalue() == COMMITTED.read_text(), (
        f"docs/openapi.yaml is stale; regenerate it with `{REGENERATE}`"
    )


def test_schema_and_docs_are_served_without_external_assets(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/jobs/" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "/api/schema/" in html
    assert "http://" not in html and "https://" not in html  # nothing from a CDN


# --- property-based: schemathesis against the served schema ------------------------

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# An oversized body is refused with 413 (documented for every POST), which
# schemathesis does not count as a rejection by default.
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
            }
        }
    }
)
# The default run is derandomized, so CI sees the same cases every time; `make fuzz`
# draws fresh cases, more of them (BERTH_FUZZ_EXAMPLES), and prints any failure's curl.
EXAMPLES_PER_OPERATION = int(os.environ.get("BERTH_FUZZ_EXAMPLES", "30"))
RANDOM = os.environ.get("BERTH_FUZZ_RANDOM", "") == "1"
MIN_CASES = 500


@pytest.fixture
def wsgi_app():
    """The real WSGI app, without closing the test's connection after each request
    (Django's test client does the same)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_data(cluster, personas, settings):
    """Some jobs (one running) so generated ids sometimes hit real rows; a generous rate."""
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "100000/min", "login": "100000/min"}
    }
    jobs = [submit(cluster.team_a, personas.lead_a, name=f"seed-{i}") for i in range(3)]
    run_on(jobs[0], cluster.nodes[0], log="hello\n")
    from tests.api.conftest import bearer

    api = bearer(personas.lead_a)
    return api.headers


@pytest.mark.filterwarnings("ignore")
def test_generated_requests_conform_to_the_schema(fuzz_data, wsgi_app):
    """Positive and negative cases for every operation: no 5xx, every status, header,
    content type and body as documented, and invalid input refused."""
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", wsgi_app, config=CONFIG)
    token = ApiToken.objects.get()
    cases = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            checks = CHECKS + ([negative_data_rejection] if mode.name == "NEGATIVE" else [])
            _fuzz(operation, mode, checks, fuzz_data, token, cases)
    assert len(cases) >= MIN_CASES, f"only {len(cases)} cases were generated"


def _fuzz(operation, mode, checks, headers, token, cases) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=not RANDOM,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case):
        # A generated DELETE /tokens/{id}/ may hit our own token; keep it usable.
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=None)
        cases.append(case)
        response = case.call(headers=headers)
        case.validate_response(response, checks=checks, headers=headers)

    run()

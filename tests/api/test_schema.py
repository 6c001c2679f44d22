"""The OpenAPI schema: served, committed up to date, and true to the API's behaviour
(schemathesis generates requests from it and checks every response against it)."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import transaction

from portal.core.actions.tokens import create_api_token
from tests.api.conftest import run_on, submit

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.yaml"
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


# --- property-based: the schemathesis CLI against a live server ---------------------------

# The default run is derandomized (a fixed seed, a few cases per operation), so CI sees the
# same cases every time; `make fuzz` draws fresh ones, more of them (BERTH_FUZZ_EXAMPLES),
# and adds the coverage phase (boundary values of every parameter, about 40 s).
EXAMPLES_PER_OPERATION = int(os.environ.get("BERTH_FUZZ_EXAMPLES", "5"))
RANDOM = os.environ.get("BERTH_FUZZ_RANDOM", "") == "1"
PHASES = "examples,coverage,fuzzing,stateful" if RANDOM else "examples,fuzzing,stateful"
CONFIG_FILE = ROOT / "tests" / "api" / "schemathesis.toml"


@pytest.mark.filterwarnings("ignore")
def test_the_cli_with_all_checks_and_the_stateful_phase_finds_nothing(
    transactional_db, live_server, cluster, personas, settings, tmp_path
):
    """`schemathesis run --checks all` over HTTP against a live server: examples,
    fuzzing and stateful sequences (create → read → revoke, submit → cancel; the links
    are inferred) answer no 5xx and break no check, the known gaps listed in
    schemathesis.toml aside. Only a revoke of the run's own token is filtered out
    (tests/api/fuzz_hooks.py)."""
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"token": "100000/min"}
    }
    settings.BERTH = settings.BERTH | {"LOGIN_FAILURES": "100000/min"}
    with transaction.atomic():
        jobs = [submit(cluster.team_a, personas.lead_a, name=f"seed-{i}") for i in range(3)]
        run_on(jobs[0], cluster.nodes[0], log="hello\n")
    token, secret = create_api_token(personas.lead_a, name="fuzzer")
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        f"--config-file={CONFIG_FILE}",
        "run",
        f"{live_server.url}/api/schema/?format=json",
        f"--url={live_server.url}",
        f"--phases={PHASES}",
        f"--max-examples={EXAMPLES_PER_OPERATION}",
        f"--header=Authorization: Bearer {secret}",
        "--workers=1",
        "--request-timeout=30",
        "--suppress-health-check=all",
        "--no-color",
        f"--report-dir={tmp_path}",
        "--report=junit",
        *([] if RANDOM else ["--seed=20261201", "--generation-deterministic"]),
    ]
    env = os.environ | {
        "SCHEMATHESIS_HOOKS": "tests.api.fuzz_hooks",
        "BERTH_FUZZ_OWN_TOKEN_ID": str(token.pk),
    }
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]


def test_a_password_is_offered_only_to_create_a_token(db):
    """HTTP Basic is refused by every call but POST /api/v1/tokens/ (docs/security.md):
    the schema lists it for that operation alone (a review's case)."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    offered = [
        (path, method)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if {"basicAuth": []} in operation.get("security", [])
    ]
    assert offered == [("/api/v1/tokens/", "post")]

"""Job names and image references are checked as a container engine would, on every path."""

from __future__ import annotations

from tests.api.conftest import error_of, job_body


def test_api_refuses_bad_names_and_image_references(as_lead_a):
    body = job_body(team="alpha", name="my training run", image="not an image ref !!")
    error = error_of(as_lead_a.post("/api/v1/jobs/", body), 400, "invalid")
    assert {"name", "image"} <= set(error["fields"]), error
    ok = job_body(team="alpha", name="vit-large.run_2", image="localhost:5000/acme/vit:2.4-cu12")
    assert as_lead_a.post("/api/v1/jobs/", ok).status_code == 201

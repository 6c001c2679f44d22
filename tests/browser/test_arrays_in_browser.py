"""The queue page collapses a job array into one row with its tasks counted per state,
live: a pass that starts some of its tasks changes the counts without a reload."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from portal.core.actions.arrays import submit_array
from portal.core.actions.submit import Caller
from portal.core.models import Job
from tests.api.conftest import job_body

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]


def test_an_array_is_one_row_in_the_queue_with_counts_per_state(
    page, live_server, cluster, log_in, shoot
):
    from portal.core.scheduling import run_pass

    member = cluster.personas.member_a
    values = job_body(name="shard-{index}", gpus_per_worker=1)
    values.pop("team", None)
    result = submit_array(Caller(member), "alpha", values, "0-11%4")
    array = result.array
    plain = Job.objects.create(
        team=cluster.team_a,
        queue=cluster.queue_a,
        flavor=cluster.h100,
        name="plain-job",
        image="python:3.11",
        command=["true"],
        max_runtime_seconds=60,
        workers=1,
        gpus_per_worker=64,
        submitted_by=member,
    )
    log_in(page, cluster.personas.lead_a)
    page.goto(f"{live_server.url}/teams/alpha/queue/")

    row = page.locator(f'tr[data-array="{array.pk}"]')
    expect(row).to_have_count(1)  # twelve tasks, one row
    expect(row).to_contain_text(f"Array {array.pk}_[0-11%4] shard-{{index}}")
    expect(row.locator('[data-state="pending"]')).to_have_text("12 pending")
    expect(page.locator(f'tr[data-job="{plain.pk}"]')).to_contain_text("plain-job")
    expect(page.locator("#pending tbody tr")).to_have_count(2)
    shoot(page, "arrays-01-collapsed")

    page.evaluate("window.__sameDocument = true")
    run_pass()  # four tasks start: the %4 limit holds the other eight

    expect(row.locator('[data-state="admitted"]')).to_have_text("4 admitted", timeout=10_000)
    expect(row.locator('[data-state="pending"]')).to_have_text("8 pending")
    expect(row).to_contain_text(f"Array {array.pk}_[4-11%4]")
    expect(row).to_contain_text("array_limit")
    assert page.evaluate("window.__sameDocument") is True
    shoot(page, "arrays-02-running")

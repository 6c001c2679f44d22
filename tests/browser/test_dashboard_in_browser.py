"""The dashboard in a real browser: a lead's day, a member cancelling, an outsider kept out.

Each test drives headless Chromium against the live server on PostgreSQL and
saves screenshots of what it saw (test-artifacts/screenshots/).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from portal.core.models import Job
from tests.dashboard.story import build_story

pytestmark = [
    pytest.mark.browser,
    # pytest-playwright 0.10's own base_url fixture trips a pytest 9 deprecation.
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]


def run_scheduling_pass():
    try:
        from portal.core.scheduling import run_pass
    except ImportError as exc:  # the scheduler core is built concurrently
        pytest.skip(f"scheduler core unavailable ({exc}); cannot run a scheduling pass")
    return run_pass()


def test_lead_watches_quota_submits_and_sees_the_job_admitted_live(
    page, live_server, cluster, log_in, shoot
):
    story = build_story(cluster)
    page.goto(f"{live_server.url}/")
    shoot(page, "01-login")
    log_in(page, cluster.personas.lead_a)

    # Overview: a gauge per flavor, used vs nominal, borrowed; the idle notebook flagged.
    expect(page).to_have_url(re.compile(r"/teams/alpha/$"))
    h100 = page.locator('.gauge[data-flavor="h100-80gb"]')
    expect(h100.get_by_role("meter")).to_have_attribute("aria-valuenow", "18")
    expect(h100).to_contain_text("/ 16 GPUs")
    expect(h100.locator("dd").nth(2)).to_have_text("2")  # borrowed
    expect(page.locator("#idle-title").locator("..").locator("..")).to_contain_text(
        "notebook-debug"
    )
    expect(page.locator("canvas[data-chart=usage][data-ready]")).to_be_attached()
    shoot(page, "02-overview")

    page.get_by_role("link", name="Queue", exact=True).click()
    expect(page.locator(f'tr[data-job="{story.ablation.pk}"]')).to_contain_text("first in line")
    shoot(page, "03-queue")

    page.get_by_role("link", name="Cluster", exact=True).click()
    expect(page.locator('[data-node="a100-1"]')).to_contain_text("not ready")
    expect(page.locator('[data-node="h100-spare"]')).to_contain_text("cordoned")
    shoot(page, "04-cluster")

    # Submit: errors from the shared validation appear next to their fields.
    page.get_by_role("link", name="Submit job", exact=True).click()
    page.get_by_label("Name").fill("eval-bert")
    page.get_by_label("Image").fill("ghcr.io/example/eval:1.0")
    page.get_by_label("Command").fill("python eval.py --split test")
    page.get_by_label("GPU flavor").select_option("a100-40gb")
    page.get_by_label("GPUs per worker").fill("64")
    page.get_by_label("Environment").fill("RANK=3")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_gpus_per_worker-errors")).to_contain_text("No a100-40gb node has 64")
    expect(page.locator("#id_env-errors")).to_contain_text("RANK")
    shoot(page, "05-submit-errors")

    page.get_by_label("GPUs per worker").fill("2")
    page.get_by_label("Environment").fill("SEED=1")
    page.get_by_role("button", name="Submit job").click()
    job = Job.objects.get(name="eval-bert")
    expect(page).to_have_url(re.compile(rf"/jobs/{job.pk}/$"))
    expect(page.locator("#job-state")).to_have_text("pending")
    expect(page.locator(".why")).to_contain_text("Waiting for the next scheduling pass")
    shoot(page, "06-job-pending")

    # A scheduling pass admits it; the open page shows that without a reload.
    page.evaluate("window.__sameDocument = true")
    run_scheduling_pass()
    job.refresh_from_db()
    assert job.state == Job.State.ADMITTED, (job.state, job.reason)
    expect(page.locator("#job-state")).to_have_text("admitted", timeout=10_000)
    expect(page.locator("#alloc-title").locator("..").locator("..")).to_contain_text("a100-0")
    assert page.evaluate("window.__sameDocument") is True
    shoot(page, "07-job-admitted")


def test_member_cancels_their_own_job_but_not_the_leads(page, live_server, cluster, log_in, shoot):
    story = build_story(cluster)
    log_in(page, cluster.personas.member_a)

    page.goto(f"{live_server.url}/jobs/{story.training.pk}/")
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)

    page.goto(f"{live_server.url}/jobs/{story.ablation.pk}/")
    expect(page.locator(".why")).to_contain_text("Position")
    expect(page.get_by_role("heading", name="Preemptions")).to_be_visible()
    shoot(page, "08-job-preempted-history")

    page.goto(f"{live_server.url}/jobs/{story.notebook.pk}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job-state")).to_have_text("cancelled")
    expect(page.locator(".messages")).to_contain_text("was cancelled")
    story.notebook.refresh_from_db()
    assert story.notebook.state == Job.State.CANCELLED
    shoot(page, "09-job-cancelled")

    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("ci-pipeline")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token").inner_text()
    assert secret.startswith("bat")
    shoot(page, "10-tokens")
    page.reload()  # re-sends the form: no second token, no secret shown again
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.locator("tbody tr", has_text="ci-pipeline")).to_have_count(1)


def test_outsider_cannot_open_the_teams_pages(page, live_server, cluster, log_in, shoot):
    story = build_story(cluster)
    log_in(page, cluster.personas.lead_b)
    expect(page).to_have_url(re.compile(r"/teams/beta/$"))
    for path in (
        "/teams/alpha/",
        "/teams/alpha/queue/",
        "/teams/alpha/cluster/",
        "/teams/alpha/submit/",
        "/teams/alpha/usage.csv",
        f"/jobs/{story.training.pk}/",
    ):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 404, path
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    shoot(page, "11-outsider-404")


def test_pages_read_well_without_javascript_and_on_a_phone(
    browser, live_server, cluster, log_in, shoot
):
    build_story(cluster)
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1280, "height": 900}
    )
    page = log_in(context.new_page(), cluster.personas.lead_a)
    expect(page.locator(".gauge")).to_have_count(2)
    expect(page.locator("details.data[open]").first).to_be_visible()
    shoot(page, "12-overview-no-js")
    context.close()

    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = log_in(phone.new_page(), cluster.personas.lead_a)
    shoot(page, "13-overview-phone")
    page.goto(f"{live_server.url}/teams/alpha/queue/")
    shoot(page, "14-queue-phone")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    phone.close()

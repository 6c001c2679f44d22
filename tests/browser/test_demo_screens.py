"""Every dashboard page in the demo's seeded state, at desktop and phone width.

The demo is seeded as `make run` seeds it (seed_demo: 30 days of history and
the jobs of today), its six nodes register and heartbeat through the agent
protocol with the fake NVML backend, a scheduling pass admits the jobs, and
the running jobs are dated 40 minutes back (the demo after a coffee: past the
idle-GPU grace). A team lead's pages are then opened in Chromium and saved as
test-artifacts/screenshots/demo-<page>-<width>.png, for a person to look at;
the assertions pin what issue 16 found wrong on first open.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone
from playwright.sync_api import expect

from agents.gpu import FAKE_UTILIZATION_ENV, Workload
from portal.core.actions.workers import WorkerReport
from portal.core.models import Allocation, Job, JobEvent, Worker
from portal.core.scheduling import run_pass
from portal.whatif.models import WhatIfRun
from portal.whatif.replay import execute
from tests.whatif.demo_cluster import gpu_reports, heartbeat, register_demo_nodes

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]
WIDTHS = {"desktop": {"width": 1400, "height": 900}, "phone": {"width": 390, "height": 844}}
RUNNING_FOR = timedelta(minutes=40)


def _bring_up_nodes(var_dir) -> None:
    """Register the six demo nodes, admit the demo jobs, report their workers running."""
    nodes = register_demo_nodes(var_dir)
    assert run_pass().admitted
    for node, backend in nodes:
        reply = heartbeat(node, agent_version="0.1.0", gpus=gpu_reports(backend), workers=[])
        busy, workers = {}, []
        for entry in reply["run"]:
            pinned = entry["env"].get(FAKE_UTILIZATION_ENV)
            for uuid in entry["gpu_uuids"]:
                busy[uuid] = Workload(entry["job_id"], entry["rank"], pinned and int(pinned))
            log = "\n".join(
                f"rank {entry['rank']} step {s} loss {2.5 * 0.999**s:.3f}" for s in range(40)
            )
            workers.append(
                WorkerReport(entry["key"], "running", started_at=timezone.now(), log_tail=log)
            )
        backend.observe_workload(busy)
        heartbeat(node, agent_version="0.1.0", gpus=gpu_reports(backend), workers=workers)
    _date_back(RUNNING_FOR)


def _date_back(delta: timedelta) -> None:
    """As if the demo had been up for a while: today's running jobs started `delta` ago."""
    running = Job.objects.filter(state__in=Job.ACTIVE_STATES)
    for job in running:
        Job.objects.filter(pk=job.pk).update(
            submitted_at=job.submitted_at - delta,
            admitted_at=job.admitted_at - delta,
            started_at=(job.started_at or job.admitted_at) - delta,
        )
    JobEvent.objects.filter(job__in=running).update(at=F("at") - delta)
    Worker.objects.filter(job__in=running).update(started_at=timezone.now() - delta)
    Allocation.objects.filter(job__in=running).update(created_at=timezone.now() - delta)


@pytest.fixture
def demo(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    # Heartbeats seconds apart: write each one's telemetry, as a later one would.
    monkeypatch.setattr("portal.core.actions.heartbeat.TELEMETRY_EVERY_S", 0)
    call_command("seed_demo", stdout=open(tmp_path / "seed.out", "w"))  # noqa: SIM115
    _bring_up_nodes(tmp_path)
    return json.loads((tmp_path / "demo.json").read_text())


def _what_if(alice) -> WhatIfRun:
    from portal.core.models import GpuFlavor, Team

    now = timezone.now()
    run = WhatIfRun.objects.create(
        team=Team.objects.get(slug="speech"),
        flavor=GpuFlavor.objects.get(name="h100-80gb"),
        change=WhatIfRun.Change.NOMINAL,
        value=12,
        period_start=now - timedelta(days=14),
        period_end=now,
        created_by=alice,
    )
    execute(run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE, run.error
    return run


def _shoot_all(page, base: str, width: str, paths: dict[str, str], shots: Path) -> None:
    for name, path in paths.items():
        page.goto(f"{base}{path}")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(shots / f"demo-{name}-{width}.png"), full_page=True)
        if width == "phone":
            _fits_a_phone(page, name)


# Tables that scroll sideways inside their card hide columns a reader does not know are
# there; the chart's data tables (folded under the chart) are the exception.
CUT_TABLES = """[...document.querySelectorAll('.table-wrap')]
  .filter(w => !w.closest('details.data') && w.scrollWidth > w.clientWidth + 1)
  .map(w => w.closest('section')?.getAttribute('aria-labelledby') || w.className)"""
TAB_ROWS = """new Set([...document.querySelectorAll('.tabs a')]
  .map(a => Math.round(a.getBoundingClientRect().top))).size"""


def _fits_a_phone(page, name: str) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= WIDTHS["phone"]["width"] + 1, f"{name} scrolls sideways ({overflow} px)"
    assert page.evaluate(CUT_TABLES) == [], f"{name}: a table is cut off on a phone"
    assert page.evaluate(TAB_ROWS) == 1, f"{name}: the tabs wrap onto a second row"


def test_every_page_of_the_seeded_demo_at_desktop_and_phone_width(
    browser, live_server, demo, django_user_model
):
    from tests.browser.conftest import SCREENSHOTS

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    alice = django_user_model.objects.get(username="alice")
    run = _what_if(alice)
    vit = Job.objects.get(name="vit-large")
    pending = Job.objects.filter(team__slug="vision", state=Job.State.PENDING).first()
    preempted = (
        Job.objects.filter(
            team__slug="vision", events__kind="preempted", state__in=Job.TERMINAL_STATES
        )
        .order_by("-finished_at")
        .first()
    )
    paths = {
        "overview": "/teams/vision/",
        "queue": "/teams/vision/queue/",
        "cluster": "/teams/vision/cluster/",
        "submit": "/teams/vision/submit/",
        "job-running": f"/jobs/{vit.pk}/",
        "job-finished-preempted": f"/jobs/{preempted.pk}/",
        "tokens": "/tokens/",
        "whatif": "/whatif/",
        "whatif-result": f"/whatif/{run.pk}/",
    }
    if pending:
        paths["job-pending"] = f"/jobs/{pending.pk}/"
    for width, viewport in WIDTHS.items():
        context = browser.new_context(viewport=viewport, timezone_id="UTC", locale="en-GB")
        page = context.new_page()
        page.goto(f"{live_server.url}/login/")
        page.screenshot(path=str(SCREENSHOTS / f"demo-login-{width}.png"), full_page=True)
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill(demo["passwords"]["alice"])
        page.get_by_role("button", name="Log in").click()
        # Alice leads vision and only views nlp: she lands on vision.
        expect(page).to_have_url(re.compile(r"/teams/vision/$"))
        _shoot_all(page, live_server.url, width, paths, SCREENSHOTS)
        context.close()


def test_the_seeded_demo_shows_what_the_product_is_for(page, live_server, demo):
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(demo["passwords"]["alice"])
    page.get_by_role("button", name="Log in").click()
    # Showback and waits have a month behind them; fair share has history.
    series = json.loads(page.locator("#usage-data").text_content())["series"]
    days = [sum(values) for values in zip(*(s["data"] for s in series), strict=True)]
    assert sum(1 for v in days if v) >= 25, days
    history = page.locator("td[data-label=Share] .sub").first.inner_text()
    assert "history 0.00" not in history, history
    # The idle card flags the two idle demo jobs, and only them.
    idle = page.locator("#idle-title").locator("..").locator("..")
    expect(idle).to_contain_text("notebook-debug")
    expect(idle).not_to_contain_text("vit-large")
    page.goto(f"{live_server.url}/teams/vision/cluster/")
    utils = [
        int(u.rstrip("%"))
        for u in page.locator(".cell.ours .top span:last-child").all_inner_texts()
    ]
    assert utils and max(utils) > 50, utils  # simulated GPUs of a running job are busy


def test_a_logs_show_all_stays_open_across_live_updates(page, live_server, demo):
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(demo["passwords"]["alice"])
    page.get_by_role("button", name="Log in").click()
    vit = Job.objects.get(name="vit-large")
    page.goto(f"{live_server.url}/jobs/{vit.pk}/")
    tail = page.locator('pre.log-tail[data-rank="0"]')
    expect(tail).to_contain_text("step 39")
    expect(tail).not_to_contain_text("step 0 ")
    page.get_by_text("Show all 40 lines").first.click()
    expect(page.locator("#log-all-0")).to_have_attribute("open", "")
    expect(tail).to_be_hidden()
    updated = page.locator(".live-status time").inner_text()
    expect(page.locator(".live-status time")).not_to_have_text(updated, timeout=10_000)  # polled
    expect(page.locator("#log-all-0")).to_have_attribute("open", "")
    expect(page.locator("#log-all-0 pre")).to_contain_text("step 0 loss")

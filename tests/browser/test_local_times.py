"""A reason's instant reads in the viewer's own clock, UTC in its tooltip (issue 16, item 3)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from portal.core.models import Job
from scheduler.timewords import instant
from tests.dashboard.story import build_story

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]


def test_a_reason_instant_shows_the_viewers_local_clock(browser, live_server, cluster, log_in):
    story = build_story(cluster)
    at = (timezone.now() + timedelta(hours=2)).replace(second=0, microsecond=0)
    Job.objects.filter(pk=story.sweep.pk).update(
        reason_code="reserved", reason=f"needs the team's quota from {instant(at.timestamp())}"
    )
    # India is UTC+5:30 all year: its clock differs from UTC's in the minutes too.
    context = browser.new_context(timezone_id="Asia/Kolkata", locale="en-GB")
    page = log_in(context.new_page(), cluster.personas.lead_a)

    page.goto(f"{live_server.url}/jobs/{story.sweep.pk}/")

    local = at + timedelta(hours=5, minutes=30)
    shown = page.locator("#live time[datetime]", has_text=f"{local:%H:%M}")
    expect(shown).to_have_attribute("title", f"{at:%Y-%m-%d %H:%M} UTC")
    expect(page.locator("#live")).to_contain_text("(in about 2 h)")
    context.close()

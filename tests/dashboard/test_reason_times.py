"""Times in a pending job's reason read as a clock time and words ("10:06 UTC (in about
1 h)", the clock made local by app.js), never as offsets like '+3593 s' (issue 16, item 3)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from portal.core.models import Job
from scheduler.timewords import instant


def test_reason_instants_are_a_clock_time_and_words(story, login):
    # whole seconds: instant() rounds, and at hh:mm:59.5 it named the next minute (a flake)
    at = (timezone.now() + timedelta(minutes=62)).replace(microsecond=0)
    Job.objects.filter(pk=story.sweep.pk).update(
        reason_code="reserved",
        reason=f"needs 8 GPUs; it would delay job 7 <b>, which needs the team's quota from "
        f"{instant(at.timestamp())}; it could start now if its max runtime were at most 1 h",
    )
    client = login(story.cluster.personas.lead_a)
    clock = f"{at:%H:%M}" if at.date() == timezone.now().date() else f"{at:%Y-%m-%d %H:%M}"
    shown = f'title="{at:%Y-%m-%d %H:%M} UTC" data-local>{clock} UTC</time> (in about 1 h)'

    for page in (f"/jobs/{story.sweep.pk}/", "/teams/alpha/queue/"):
        html = client.get(page).content.decode()
        assert shown in html, page
        assert "quota from <time datetime=" in html and "job 7 &lt;b&gt;" in html
        text = re.sub(r"<[^>]+>", "", html)  # what a reader sees, without the tooltips
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d|\+\d+ s\b", text), page


def test_what_only_looks_like_an_instant_is_shown_as_written():
    from portal.dashboard.templatetags.berth_times import with_times

    assert with_times("from 2026-13-45T00:00:00Z <b>") == "from 2026-13-45T00:00:00Z &lt;b&gt;"


def test_job_tables_say_how_long_ago_in_the_webs_one_relative_time(story, login):
    """Django's timesince said '0 minutes ago' for a job that had just ended."""
    client = login(story.cluster.personas.lead_a)
    for ended, shown in ((timedelta(0), r"(now|\d+ s ago)"), (timedelta(minutes=30), "30 min ago")):
        Job.objects.filter(pk=story.sweep.pk).update(
            state=Job.State.SUCCEEDED, finished_at=timezone.now() - ended
        )
        html = client.get("/teams/alpha/queue/").content.decode()
        row = html[html.index(f"/jobs/{story.sweep.pk}/") :]
        row = re.sub(r"<[^>]+>", " ", row[: row.index("</tr>")])
        assert re.search(rf"\b{shown}\b", row), row
        assert "minutes ago" not in html


def test_no_template_uses_djangos_timesince_or_timeuntil():
    """Every page says relative times with `ago` (format.relative); Django's filters
    say '0 minutes ago' and word things differently from the rest of the site."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    templates = [
        *root.joinpath("templates").rglob("*.html"),
        *root.joinpath("portal").rglob("*.html"),
    ]
    users = [
        str(p.relative_to(root))
        for p in templates
        if re.search(r"\|\s*time(since|until)", p.read_text())
    ]
    assert users == []

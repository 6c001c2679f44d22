"""`{{ job.reason|with_times }}`: the instants in a reason, for the person reading it.

The scheduler writes the instants in its sentences as ISO 8601 UTC
(scheduler.timewords.instant); a page shows each as the absolute time with a
relative one in words beside it, "10:06 UTC (in about 1 h)", never as an
offset. app.js turns the clock into the reader's local time and keeps UTC in
the tooltip.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from berthtext import ISO_INSTANT as CLI_ISO_INSTANT
from portal.dashboard.format import relative

register = template.Library()

# Split on the instants the scheduler writes (the pattern `berth` looks for too).
ISO_INSTANT = re.compile(f"({CLI_ISO_INSTANT.pattern})")


@register.filter(needs_autoescape=True)
def with_times(text, autoescape=True):
    """Return the text, escaped, with each ISO instant as a <time> and words."""
    escape = conditional_escape if autoescape else str
    now = timezone.now()
    parts = ISO_INSTANT.split(str(text or ""))
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(escape(part))
            continue
        try:
            moment = datetime.fromisoformat(part)
        except ValueError:  # looks like an instant, is none (month 13): keep the text
            out.append(escape(part))
            continue
        out.append(_shown(moment, now))
    return mark_safe("".join(out))  # noqa: S308 — every part was escaped above


@register.filter
def at_time(moment):
    """`{{ cooldown.may_borrow_from|at_time }}`: a datetime as `with_times` shows an
    instant in a reason, '21:23 UTC (in 4 min)'."""
    return _shown(moment.astimezone(UTC).replace(microsecond=0), timezone.now())


def _shown(moment: datetime, now: datetime) -> str:
    """The clock (the date too unless today), UTC, and the relative time beside it."""
    clock = f"{moment:%H:%M}" if moment.date() == now.date() else f"{moment:%Y-%m-%d %H:%M}"
    return format_html(
        '<time datetime="{}" title="{} UTC" data-local>{} UTC</time> ({})',
        f"{moment:%Y-%m-%dT%H:%M:%SZ}",
        f"{moment:%Y-%m-%d %H:%M}",
        clock,
        relative(moment, now, about=True),
    )


@register.filter
def ago(moment):
    """`{{ job.finished_at|ago }}`: '12 min ago', '29 s ago', 'now' — the web's one
    relative time (`format.relative`), never Django's `timesince` ('0 minutes ago')."""
    return relative(moment, timezone.now(), about=True)

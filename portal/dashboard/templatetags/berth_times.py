"""`{{ job.reason|with_times }}`: the instants in a reason, for the person reading it.

The scheduler writes the instants in its sentences as ISO 8601 UTC
(scheduler.timewords.instant); a page shows each as a relative time in words
("in about 2 h") with the absolute UTC time as its tooltip, never as an offset.
"""

from __future__ import annotations

import re
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from portal.dashboard.format import in_words

register = template.Library()

ISO_INSTANT = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


@register.filter(needs_autoescape=True)
def with_times(text, autoescape=True):
    """Return the text, escaped, with each ISO instant as <time> in words."""
    escape = conditional_escape if autoescape else str
    now = timezone.now()
    parts = ISO_INSTANT.split(str(text or ""))
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(escape(part))
            continue
        moment = datetime.fromisoformat(part)
        out.append(
            format_html(
                '<time datetime="{}" title="{} UTC">{}</time>',
                part,
                f"{moment:%Y-%m-%d %H:%M}",
                in_words(moment, now),
            )
        )
    return mark_safe("".join(out))  # noqa: S308 — every part was escaped above

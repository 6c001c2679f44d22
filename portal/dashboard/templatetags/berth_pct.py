"""`{{ value|pct:"w" }}`: a percentage as a class name, so no page needs a style attribute.

The Content-Security-Policy (portal/csp.py) allows style sheets only from this site's
static files, style attributes included. A bar's width, a mark's position or a ring's
arcs are therefore classes: `pct("37.4", "w")` is "w-37", and
`portal/static/dashboard/pct.css` holds one rule per whole percent for each property
below, `!important` as the style attribute it replaces was (`.bar > span`'s `inset`
must not win over a bar's `l-37`). That file is `css()` written out (`python -m portal.dashboard.templatetags.berth_pct`
writes it); tests/dashboard/test_csp.py fails if the two differ.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from django import template

register = template.Library()

# class prefix -> the CSS property a percentage sets
PROPERTIES = {
    "w": "width",
    "l": "left",
    "ring-in": "--within",  # the ring's arcs (dashboard.css .ring)
    "ring-over": "--over",
}
CSS_FILE = Path(__file__).resolve().parents[2] / "static" / "dashboard" / "pct.css"


@register.filter
def pct(value, prefix: str) -> str:
    """The class for a percentage: rounded to a whole percent, held within 0–100; an
    unknown prefix is a template's mistake and raises."""
    if prefix not in PROPERTIES:
        raise template.TemplateSyntaxError(f"pct: unknown prefix {prefix!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.0
    if math.isnan(number):
        number = 0.0
    return f"{prefix}-{min(100, max(0, round(number)))}"


def css() -> str:
    lines = ["/* Written by portal/dashboard/templatetags/berth_pct.py: do not edit. */"]
    for prefix, prop in PROPERTIES.items():
        lines += [f".{prefix}-{n} {{ {prop}: {n}% !important; }}" for n in range(101)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    CSS_FILE.write_text(css())
    sys.stdout.write(f"wrote {CSS_FILE}\n")

"""Validation rules for text that people read: names of teams, flavors, tokens, jobs.

`reject_bidi_controls` refuses Unicode bidirectional control characters
(CVE-2021-42574, "Trojan Source"): an invisible U+202E makes `ci-gpu‮txt.exe`
display as something else, so a name could pass for another team's or hide
what it is in the dashboard, the CLI's tables and the admin. Use it as a
validator on every form, serializer and model field that holds such a name.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

# ALM; LRM, RLM; LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI (Unicode UAX #9).
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def reject_bidi_controls(value: str) -> None:
    """Raise ValidationError (code `bidi_control`) if `value` holds a bidi control character."""
    found = sorted({f"U+{ord(ch):04X}" for ch in str(value) if ch in BIDI_CONTROLS})
    if found:
        raise ValidationError(
            "Names may not contain Unicode bidirectional control characters "
            f"({', '.join(found)}): they make text display differently from what it is.",
            code="bidi_control",
        )


# An API token's name, one rule for the model field, the API's TokenCreateSerializer
# and the dashboard's ApiTokenForm: `CharField(**TOKEN_NAME)`.
TOKEN_NAME = {"max_length": 100, "validators": (reject_bidi_controls,)}

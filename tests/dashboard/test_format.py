from datetime import UTC, datetime, timedelta

import pytest

from portal.dashboard.format import duration, parse_duration, relative


@pytest.mark.parametrize(
    "seconds, text",
    [
        (None, "—"),
        (0, "0 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3600, "1 h"),
        (5400, "1 h 30 min"),
        (47 * 3600, "47 h"),
        (49 * 3600, "2 d 1 h"),
        (72 * 3600, "3 d"),
    ],
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_relative():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert relative(now + timedelta(minutes=40), now) == "in 40 min"
    assert relative(now - timedelta(hours=2), now) == "2 h ago"
    # "now" only under a second, as `berth` says (it was up to 30 s: "Submitted now").
    assert relative(now + timedelta(seconds=0.5), now) == "now"
    assert relative(now - timedelta(seconds=29), now) == "29 s ago"
    assert relative(now + timedelta(minutes=70), now, about=True) == "in about 1 h"
    assert relative(None, now) == "—"


@pytest.mark.parametrize(
    "text, seconds",
    [("3600", 3600), ("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), (" 4 h ", 14400)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "1h30", "soon", "-5"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)

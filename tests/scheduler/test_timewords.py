"""scheduler.timewords: instants as ISO 8601 UTC (without datetime), spans in words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.timewords import duration, instant


@pytest.mark.parametrize(
    "t",
    [0, 1_000_000.0, 951_782_400, 951_868_799.6, 1_709_164_800, 1_796_000_000.4, -86_400 * 400],
)
def test_instants_agree_with_datetime(t):
    expected = datetime.fromtimestamp(round(t), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert instant(t) == expected
    assert datetime.fromisoformat(instant(t)).timestamp() == round(t)  # readers parse it back


def test_every_day_of_four_centuries_agrees_with_datetime():
    for day in range(-73_000, 73_000, 7):  # 1770..2169, every week, a leap day or two
        t = day * 86_400 + 45_296
        assert instant(t) == datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(None, "—"), (42, "42 s"), (3593, "59 min"), (3600, "1 h"), (9000, "2 h 30 min"),
     (50 * 3600, "2 d 2 h")],
)  # fmt: skip
def test_spans_in_words(seconds, words):
    assert duration(seconds) == words

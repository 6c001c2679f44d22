"""Helpers for the ops tests: scrape /metrics and read its samples by name and labels."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from portal.ops import tallies


@pytest.fixture(autouse=True)
def fresh_metrics_base(db):
    """The shared metrics base lives in the cache, which test rollbacks do not undo."""
    tallies.reset()
    yield
    tallies.reset()


class Scrape:
    """The parsed exposition: families by name, sample values by (name, labels)."""

    def __init__(self, text: str):
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in self.families.values()
            for s in family.samples
        }

    def value(self, name: str, **labels) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name: str) -> dict[frozenset, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def counters(self) -> dict:
        """Every counter and histogram sample: these may never go down."""
        kinds = {f.name: f.type for f in self.families.values()}
        return {
            key: v
            for key, v in self.samples.items()
            if kinds.get(_family_of(key[0], kinds)) in ("counter", "histogram")
        }


def _family_of(sample: str, kinds: dict) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum", ""):
        if suffix and sample.endswith(suffix) and sample[: -len(suffix)] in kinds:
            return sample[: -len(suffix)]
    return sample


@pytest.fixture
def scrape(client):
    def get(**headers) -> Scrape:
        response = client.get("/metrics", **headers)
        assert response.status_code == 200, response.content
        return Scrape(response.content.decode())

    return get

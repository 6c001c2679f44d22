"""Cluster facts for validating submissions, remembered briefly in each web process.

The nodes of a flavor (sizes, topology labels), the largest gang they can host
and the most GPUs a team could ever get change only when an admin edits quotas
or nodes come and go, yet computing them costs two queries (one over every GPU
of the flavor) per submission. Submissions (actions.submit: the API and the
dashboard) remember them for FACT_TTL_S seconds per process. For that long after such an
edit, a submission is judged against the old limits: a gang that no longer fits
is still accepted and the scheduler reports it as `never_fits` (visible in the
job's reason, never silent); one that newly fits is refused until the facts
refresh. GPU flavors (names and ids, which jobs keep PROTECTed) are remembered
the same way; queues are always read fresh.
"""

from __future__ import annotations

import time

from portal.core.jobspec import SpecLookups
from portal.core.models import GpuFlavor
from scheduler import model as m
from scheduler.capacity import GangLimit

FACT_TTL_S = 10.0

_facts: dict[tuple, tuple[float, object]] = {}


def forget() -> None:
    """Drop every remembered fact (tests call this between scenarios)."""
    _facts.clear()


def _remembered(key: tuple, compute):
    now = time.monotonic()
    hit = _facts.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    value = compute()
    _facts[key] = (now + FACT_TTL_S, value)
    return value


class RememberedLookups(SpecLookups):
    """SpecLookups whose cluster facts are remembered FACT_TTL_S in this process. One
    instance (one submission, or one bulk request) asks the process's memory once per
    fact and keeps the answer: every job of a bulk is judged against the same facts."""

    def __init__(self, team, queues=()):
        super().__init__(team, queues)
        self._known: dict[tuple, object] = {}

    def _fact(self, key: tuple, compute):
        try:
            return self._known[key]
        except KeyError:
            value = self._known[key] = _remembered(key, compute)
            return value

    def flavors(self) -> dict[str, GpuFlavor]:
        if self._flavors is None:
            self._flavors = _remembered(
                ("flavors",), lambda: {f.name: f for f in GpuFlavor.objects.all()}
            )
        return self._flavors

    def nodes(self, flavor: GpuFlavor) -> tuple[m.Node, ...]:
        return self._fact(
            ("nodes", flavor.pk), lambda: super(RememberedLookups, self).nodes(flavor)
        )

    def largest_node(self, flavor: GpuFlavor) -> int | None:
        return self._fact(
            ("largest", flavor.pk), lambda: super(RememberedLookups, self).largest_node(flavor)
        )

    def gang_limit(self, flavor: GpuFlavor, per_worker: int) -> GangLimit | None:
        return self._fact(
            ("gang", flavor.pk, per_worker),
            lambda: super(RememberedLookups, self).gang_limit(flavor, per_worker),
        )

    def max_gpus_ever(self, flavor: GpuFlavor) -> int:
        return self._fact(
            ("ceiling", self.team.pk, flavor.pk),
            lambda: super(RememberedLookups, self).max_gpus_ever(flavor),
        )

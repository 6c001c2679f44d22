"""Each team's fair-share standing outside a pass (the dashboard's reports, /metrics),
computed by the pass's own accounting (quota.Ledger with fairshare's formula), so
there is one formula: what a report shows is what the scheduler orders by."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import Team
from .quota import Ledger


@dataclass(frozen=True)
class Standing:
    team: str
    weight: float
    current: float  # the largest per-flavor share of usage now over the share denominator
    historical: float  # the largest per-flavor historical term (decayed usage)
    share: float  # the weighted dominant share the pass orders teams by (lower first)


def standings(
    teams: Iterable[Team], used: Mapping[tuple[str, str], int], half_life: float
) -> dict[str, Standing]:
    """The standing of each team, by name, given the GPUs each (team, flavor) uses now.
    Cohort denominators come from the teams given (pass a whole cohort)."""
    ledger = Ledger(teams, half_life)
    for (team, flavor), gpus in used.items():
        if gpus and team in ledger.books:
            ledger.add(ledger.book(team), flavor, gpus)
    out = {}
    for name, book in ledger.books.items():
        for flavor in book.usage:
            ledger.add_flavor(book, flavor)
        current = [book.usage.get(f, 0) / d for f, d in book.denom.items()]
        out[name] = Standing(
            team=name,
            weight=book.weight,
            current=max(current, default=0.0),
            historical=max(book.hist.values(), default=0.0),
            share=ledger.share(book),
        )
    return out

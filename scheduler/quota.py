"""Quota accounting with Kueue's semantics: nominal, borrowing and lending limits.

For one flavor and one team i of a cohort, with nominal N_i, usage U_i and
lending limit L_i (None: N_i):

    lendable_i  = min(max(0, N_i - U_i), L_i)   idle quota others may borrow
    borrowing_i = max(0, U_i - N_i)             usage above nominal
    slack       = sum_i (lendable_i - borrowing_i)  over the cohort

A team may take g more GPUs when U + g <= N + borrowing_limit (N without a
cohort) and the cohort's slack stays >= 0; its non-lendable part of the
nominal quota (N - L) is always its own. This is Kueue's cohort arithmetic
(ClusterQueue nominalQuota / borrowingLimit / lendingLimit), written with
lender-side terms; docs/scheduling.md shows they agree.

Usage changes only through Ledger.add, so a transaction that undoes its adds
restores usage, cohort slack and shares exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from .fairshare import historical_term, weighted_share
from .model import PendingJob, Quota, Team

NO_QUOTA = Quota(nominal=0)


def lendable(q: Quota) -> int:
    """Return how much of its nominal quota a team lends when idle."""
    return q.nominal if q.lending_limit is None else min(q.nominal, q.lending_limit)


def contribution(q: Quota, usage: int) -> int:
    """Return a team's term in its cohort's slack: lendable idle minus borrowing."""
    n = q.nominal
    if usage >= n:
        return n - usage
    idle = n - usage
    return idle if q.lending_limit is None else min(idle, q.lending_limit)


class TeamBook:
    """A team's quotas and its usage during the pass, with its cached share."""

    __slots__ = (
        "name",
        "weight",
        "cohort",
        "quotas",
        "decayed",
        "reclaims",
        "usage",
        "denom",
        "hist",
        "share_",
        "dirty",
    )

    def __init__(self, team: Team) -> None:
        self.name = team.name
        self.weight = team.weight
        self.cohort = team.cohort
        self.quotas: Mapping[str, Quota] = team.quotas
        self.decayed: Mapping[str, float] = team.decayed_usage
        self.reclaims: Mapping[str, tuple[int, float]] = team.reclaims
        self.usage: dict[str, int] = {}
        self.denom: dict[str, float] = {}  # flavor -> share denominator
        self.hist: dict[str, float] = {}  # flavor -> historical share term
        self.share_ = 0.0
        self.dirty = True

    def quota(self, flavor: str) -> Quota:
        return self.quotas.get(flavor, NO_QUOTA)

    def used(self, flavor: str) -> int:
        return self.usage.get(flavor, 0)


class Ledger:
    """Team usage per flavor and each cohort's slack; changed only by add()."""

    __slots__ = (
        "books",
        "slack",
        "cohort_nominal",
        "cohort_lendable",
        "half_life",
        "members",
        "_ever",
    )

    def __init__(self, teams: Iterable[Team], half_life: float) -> None:
        self.books: dict[str, TeamBook] = {
            t.name: TeamBook(t) for t in sorted(teams, key=lambda t: t.name)
        }
        self.half_life = half_life
        self.slack: dict[tuple[str, str], int] = {}
        self.cohort_nominal: dict[tuple[str, str], int] = {}
        self.cohort_lendable: dict[tuple[str, str], int] = {}
        self.members: dict[str, list[TeamBook]] = {}
        self._ever: dict[tuple[str, str], float] = {}
        for book in self.books.values():
            if book.cohort is not None:
                self._join_cohort(book)
        for book in self.books.values():
            for f in (*book.quotas, *book.decayed):
                self.add_flavor(book, f)

    def _join_cohort(self, book: TeamBook) -> None:
        """Add an idle team's quotas to its cohort's nominal totals and slack."""
        self.members.setdefault(book.cohort, []).append(book)
        for f, q in book.quotas.items():
            key = (book.cohort, f)
            self.cohort_nominal[key] = self.cohort_nominal.get(key, 0) + q.nominal
            self.cohort_lendable[key] = self.cohort_lendable.get(key, 0) + lendable(q)
            self.slack[key] = self.slack.get(key, 0) + contribution(q, 0)

    def book(self, name: str) -> TeamBook:
        """Return the team's book; a team missing from the snapshot has no quota."""
        book = self.books.get(name)
        if book is None:
            book = self.books[name] = TeamBook(Team(name=name))
        return book

    def add(self, book: TeamBook, flavor: str, delta: int) -> None:
        """Change a team's usage of a flavor, keeping cohort slack and share in step."""
        old = book.usage.get(flavor, 0)
        new = old + delta
        book.usage[flavor] = new
        book.dirty = True
        if book.cohort is not None:
            q = book.quotas.get(flavor, NO_QUOTA)
            key = (book.cohort, flavor)
            self.slack[key] = self.slack.get(key, 0) + contribution(q, new) - contribution(q, old)

    def peers(self, book: TeamBook) -> tuple[TeamBook, ...] | list[TeamBook]:
        """Return the teams whose quota is pooled with the team's: its cohort's, or the
        team alone."""
        return self.members.get(book.cohort, ()) if book.cohort is not None else (book,)

    @staticmethod
    def shares_quota(book: TeamBook, other: TeamBook) -> bool:
        """Return whether `other` is the team or of its cohort."""
        return other is book or (book.cohort is not None and other.cohort == book.cohort)

    def limit(self, book: TeamBook, flavor: str) -> float:
        """Return the most GPUs of a flavor the team may use: nominal + borrowing limit."""
        q = book.quotas.get(flavor, NO_QUOTA)
        if book.cohort is None:
            return q.nominal
        return math.inf if q.borrowing_limit is None else q.nominal + q.borrowing_limit

    def refuses(self, book: TeamBook, job: PendingJob) -> bool:
        """Whether the job would take its team past nominal + borrowing limit (`quota`,
        whatever the cohort could lend)."""
        return book.used(job.flavor) + job.gpus > self.limit(book, job.flavor)

    def headroom(self, book: TeamBook, flavor: str, kept: int = 0) -> float:
        """Return how many more GPUs of a flavor the team may take right now.

        `kept`: idle quota of the cohort that is not lent to this team (held for
        other teams' waiting jobs within their nominal quota).
        """
        return self._room(book, flavor, book.usage.get(flavor, 0), kept)

    def headroom_with(self, book: TeamBook, flavor: str, deltas: dict) -> float:
        """Return the headroom the team would have if the teams in `deltas` (TeamBook ->
        GPUs, + taken, - given back) used that much more or less of the flavor; only the
        team's own change and its cohort's count. Nothing is changed."""
        probe = Probe(self, book, flavor)
        for other, d in deltas.items():
            probe.change(other, d)
        return probe.headroom()

    def _room(self, book: TeamBook, flavor: str, used: int, kept: int) -> float:
        below, own, slack = self.room_parts(book, flavor, used, kept)
        return min(below, own + max(0, slack))

    def room_parts(
        self, book: TeamBook, flavor: str, used: int, kept: int
    ) -> tuple[float, int, int]:
        """Return what the team's headroom (min(first, second + max(0, third))) is made
        of, with `used` GPUs used and `kept` of its cohort's slack taken: what its limit
        leaves it, the part of its quota it never lends still unused, and the cohort's
        slack. Each moves by at most one per GPU any team of the cohort gives back, the
        first two only by its own."""
        q = book.quotas.get(flavor, NO_QUOTA)
        if book.cohort is None:
            return q.nominal - used, q.nominal - used, 0
        own = max(0, q.nominal - lendable(q) - used)  # the part of its quota it never lends
        slack = self.slack.get((book.cohort, flavor), 0) - kept
        return self.limit(book, flavor) - used, own, slack

    def borrowed(self, book: TeamBook, flavor: str, gpus: int, used: int | None = None) -> int:
        """Return how many of `gpus` more GPUs would be above the team's nominal quota,
        given what it uses (`used`, else its usage on the ledger)."""
        n = book.quotas.get(flavor, NO_QUOTA).nominal
        used = book.usage.get(flavor, 0) if used is None else used
        return max(0, used + gpus - n) - max(0, used - n)

    def borrowing(self, book: TeamBook, flavor: str) -> bool:
        return book.usage.get(flavor, 0) > book.quotas.get(flavor, NO_QUOTA).nominal

    def most_ever(self, book: TeamBook, flavor: str) -> float:
        """Return the most GPUs the team could ever hold: nominal + all it could borrow."""
        key = (book.name, flavor)
        if key not in self._ever:
            self._ever[key] = self._most_ever(book, flavor)
        return self._ever[key]

    def _most_ever(self, book: TeamBook, flavor: str) -> float:
        q = book.quota(flavor)
        if book.cohort is None:
            return q.nominal
        others = self.cohort_lendable.get((book.cohort, flavor), 0) - lendable(q)
        return min(self.limit(book, flavor), q.nominal + others)

    def share(self, book: TeamBook) -> float:
        """Return the team's weighted dominant share (scheduler.fairshare), cached."""
        if book.dirty:
            for f in book.usage:
                if f not in book.denom:
                    self.add_flavor(book, f)
            terms = [book.usage.get(f, 0) / d + book.hist[f] for f, d in book.denom.items()]
            book.share_ = weighted_share(terms, book.weight)
            book.dirty = False
        return book.share_

    def add_flavor(self, book: TeamBook, flavor: str) -> None:
        """Compute a flavor's share denominator and historical term for the team."""
        if flavor in book.denom:
            return
        denom = float(
            book.quota(flavor).nominal or self.cohort_nominal.get((book.cohort, flavor), 0) or 1
        )
        book.denom[flavor] = denom
        book.hist[flavor] = historical_term(book.decayed.get(flavor, 0.0), denom, self.half_life)
        book.dirty = True


class Probe:
    """A team's headroom of a flavor as it would be if teams used more or less of it
    (Ledger.headroom_with), changed one team at a time at a constant cost each: for a
    search that asks after every change. Nothing on the ledger changes."""

    __slots__ = ("ledger", "book", "flavor", "deltas", "kept")

    def __init__(self, ledger: Ledger, book: TeamBook, flavor: str) -> None:
        self.ledger, self.book, self.flavor = ledger, book, flavor
        self.deltas: dict[TeamBook, int] = {}  # team -> GPUs more (+) or less (-) used
        self.kept = 0  # of the cohort's slack, what the changes take

    def change(self, other: TeamBook, d: int) -> None:
        """Count `other` using `d` more GPUs of the flavor (fewer if negative)."""
        if not d:
            return
        old = self.deltas.get(other, 0)
        self.deltas[other] = old + d
        cohort = self.book.cohort
        if cohort is not None and other.cohort == cohort:
            q = other.quotas.get(self.flavor, NO_QUOTA)
            used = other.usage.get(self.flavor, 0)
            self.kept += contribution(q, used + old) - contribution(q, used + old + d)

    def used(self) -> int:
        """Return what the team would use."""
        return self.book.usage.get(self.flavor, 0) + self.deltas.get(self.book, 0)

    def headroom(self) -> float:
        """Return Ledger.headroom as it would be."""
        return self.ledger._room(self.book, self.flavor, self.used(), self.kept)

    def parts(self) -> tuple[float, int, int]:
        """Return Ledger.room_parts as they would be."""
        return self.ledger.room_parts(self.book, self.flavor, self.used(), self.kept)

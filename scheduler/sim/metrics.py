"""What a simulation measures: time integrals over the simulated clock, and summaries.

The Recorder holds the cluster's state between two events and integrates it
when the clock moves: allocated GPUs (in total, per team, and in time bins for
the utilization plot), each team's entitled GPUs, and fragmentation.

Entitlement: at every moment the GPUs of each flavor are shared among the
teams that demand some (GPUs of their pending and running jobs) by weighted
max-min fairness (water-filling, weights = nominal quota): no team is
entitled to more than it demands, and what one team does not need goes to the
others in proportion to their quota. A team's fairness ratio is the GPU-time
it received over the GPU-time it was entitled to; Jain's index is taken over
those ratios (1.0: every team got the same fraction of its entitlement).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# A team with no nominal quota of a flavor still gets what nobody else wants.
TINY_WEIGHT = 1e-9
# Teams entitled to less GPU-time than this (no quota of their own, and the
# others always wanted everything) have no meaningful ratio: left out of Jain.
MIN_ENTITLED_S = 3600.0


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0..100) by linear interpolation (numpy's default)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def jain(values: Sequence[float]) -> float:
    """Return Jain's fairness index (sum x)^2 / (n sum x^2); 1.0 for no values."""
    if not values:
        return 1.0
    sq = sum(v * v for v in values)
    return 1.0 if sq == 0 else sum(values) ** 2 / (len(values) * sq)


def waterfill(capacity: float, demands: Mapping[str, float], weights: Mapping[str, float]) -> dict:
    """Return weighted max-min fair shares of `capacity` for these demands.

    Teams are served in order of demand per weight: each takes its demand if
    that is below its weighted part of what is left, else all teams left take
    their weighted part.
    """
    out: dict[str, float] = {}
    active = [(d / weights[t], t, d) for t, d in demands.items() if d > 0]
    active.sort()
    left, wsum = capacity, sum(weights[t] for _, t, _ in active)
    for i, (_, team, demand) in enumerate(active):
        part = left * weights[team] / wsum
        if demand > part:
            for _, t, _ in active[i:]:
                out[t] = left * weights[t] / wsum
            return out
        out[team] = demand
        left -= demand
        wsum -= weights[team]
    return out


class Recorder:
    """Integrates the cluster state over simulated time."""

    def __init__(
        self,
        capacity: Mapping[str, int],
        weights: Mapping[str, Mapping[str, float]],
        bin_s: float,
    ) -> None:
        self.capacity = dict(capacity)
        self.total = sum(capacity.values())
        self.weights = {
            f: {t: max(w, TINY_WEIGHT) for t, w in ws.items()} for f, ws in weights.items()
        }
        self.bin_s = bin_s
        self.t0: float | None = None
        self.t: float | None = None
        self.alloc = 0  # GPUs held now
        self.team_alloc: dict[str, int] = {}
        self.demand: dict[str, dict[str, int]] = {f: {} for f in capacity}
        self.entitled_now: dict[str, float] = {}
        self.entitled_dirty = False
        self.frag: float | None = None  # share of free GPUs the top gang cannot use
        self.waiting = False  # whether any job is pending
        # integrals
        self.alloc_s = 0.0
        self.team_alloc_s: dict[str, float] = {}
        self.team_entitled_s: dict[str, float] = {}
        self.frag_s = 0.0
        self.frag_time = 0.0
        self.idle_waiting_s = 0.0  # free GPU-seconds while jobs waited
        self.waiting_time = 0.0
        self.alloc_s_at_last_arrival: float | None = None
        self.bins: list[float] = []  # GPU-seconds per bin, from t0

    # -- state changes ------------------------------------------------------

    def hold(self, team: str, gpus: int) -> None:
        self.alloc += gpus
        self.team_alloc[team] = self.team_alloc.get(team, 0) + gpus

    def demand_change(self, flavor: str, team: str, gpus: int) -> None:
        per = self.demand.setdefault(flavor, {})
        per[team] = per.get(team, 0) + gpus
        self.entitled_dirty = True

    # -- time ---------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Integrate the state held since the last call up to time t."""
        if self.t is None:
            self.t0 = self.t = t
            return
        dt = t - self.t
        if dt <= 0:
            return
        if self.entitled_dirty:
            self._entitle()
        self.alloc_s += self.alloc * dt
        for team, g in self.team_alloc.items():
            if g:
                self.team_alloc_s[team] = self.team_alloc_s.get(team, 0.0) + g * dt
        for team, e in self.entitled_now.items():
            self.team_entitled_s[team] = self.team_entitled_s.get(team, 0.0) + e * dt
        if self.frag is not None:
            self.frag_s += self.frag * dt
            self.frag_time += dt
        if self.waiting:
            self.idle_waiting_s += (self.total - self.alloc) * dt
            self.waiting_time += dt
        if self.alloc:
            self._bin(self.t, t)
        self.t = t

    def _bin(self, a: float, b: float) -> None:
        """Add alloc GPUs x [a, b) to the time bins it overlaps."""
        bins, size, base = self.bins, self.bin_s, self.t0
        while a < b:
            i = int((a - base) // size)
            edge = min(b, base + (i + 1) * size)
            while len(bins) <= i:
                bins.append(0.0)
            bins[i] += self.alloc * (edge - a)
            a = edge

    def _entitle(self) -> None:
        out: dict[str, float] = {}
        for flavor, demands in self.demand.items():
            cap = self.capacity.get(flavor, 0)
            weights = self.weights.get(flavor, {})
            w = {t: weights.get(t, TINY_WEIGHT) for t in demands}
            for team, e in waterfill(cap, demands, w).items():
                out[team] = out.get(team, 0.0) + e
        self.entitled_now = out
        self.entitled_dirty = False

    # -- results ------------------------------------------------------------

    def utilization_series(self) -> list[float]:
        """Return the mean share of GPUs allocated in each time bin."""
        denom = self.total * self.bin_s
        return [b / denom for b in self.bins] if denom else []

    def ratios(self) -> dict[str, float]:
        """Return each team's received / entitled GPU-time, for teams entitled to at least
        MIN_ENTITLED_S GPU-seconds."""
        return {
            t: self.team_alloc_s.get(t, 0.0) / e
            for t, e in sorted(self.team_entitled_s.items())
            if e >= MIN_ENTITLED_S
        }

    def fragmentation(self) -> float:
        return self.frag_s / self.frag_time if self.frag_time else 0.0

    def idle_while_waiting(self) -> float:
        """Return the time-averaged share of GPUs free while some job was pending."""
        denom = self.total * self.waiting_time
        return self.idle_waiting_s / denom if denom else 0.0


def fragmentation_share(hist: Sequence[int], per_worker: int) -> float | None:
    """Return the share of free GPUs in pieces too small for a worker of `per_worker` GPUs.

    `hist[c]` is how many nodes of the gang's flavor have c GPUs free. A node
    with c free GPUs can give the gang whole workers only, so c mod per_worker
    of them are stranded. None when no GPU is free.
    """
    free = stranded = 0
    for c, k in enumerate(hist):
        if k:
            free += k * c
            stranded += k * (c % per_worker)
    return stranded / free if free else None

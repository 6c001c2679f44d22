"""Fair-share arithmetic: usage decay and each team's weighted dominant share.

The formulas are written out in docs/scheduling.md ("Fair share"). In short:

    current_f    = usage_f / denom_f
    historical_f = decayed_usage_f / (denom_f * half_life / ln 2)
    share        = max over flavors f of (current_f + historical_f) / weight

`denom_f` is the team's nominal quota of flavor f; when that is 0 it is the
cohort's total nominal of f, and when that is 0 too, 1 (a team with no quota
at all that still holds GPUs goes to the back).

`half_life / ln 2` is the integral of 2^(-t/half_life) over [0, inf): a team
that has used exactly its nominal quota forever has decayed usage
nominal * half_life / ln 2, so its historical term is 1.0, on the same scale as
its current term. Slurm decays usage the same way (PriorityDecayHalfLife) and
Kueue's admission fair sharing does too (usageHalfLifeTime).

The fair-share order ranks teams by the priority of their next job, Slurm's
multifactor priority with two factors (`priority` below):

    priority = 2^(-share) + age_weight * min(1, age / max_age)

2^(-share) is Slurm's classic fair-share factor 2^(-U/S): 1 for a team that
used nothing, 1/2 at exactly its share. The age factor (PriorityWeightAge,
PriorityMaxAge) grows with the time the job has waited, so a job of a team
above its share is not passed forever by younger jobs of teams below it.
"""

from __future__ import annotations

import math

LN2 = math.log(2.0)


def decay(value: float, elapsed_s: float, half_life: float) -> float:
    """Return `value` decayed over `elapsed_s` seconds: value * 2^(-elapsed/half_life).

    A half-life of 0 or less disables decay, as PriorityDecayHalfLife=0 does in
    Slurm; negative elapsed time (clock skew) is treated as none.
    """
    if half_life <= 0 or elapsed_s <= 0:
        return value
    return value * 2.0 ** (-elapsed_s / half_life)


def accrue(value: float, gpus: float, elapsed_s: float, half_life: float) -> float:
    """Return decayed usage after `elapsed_s` more seconds with `gpus` GPUs in use.

    The new usage is decay(value) plus the decayed integral of the GPUs used
    during the interval: gpus * half_life/ln2 * (1 - 2^(-elapsed/half_life)).
    Without decay (half_life <= 0) that is plainly value + gpus * elapsed.
    """
    if elapsed_s <= 0:
        return value
    if half_life <= 0:
        return value + gpus * elapsed_s
    kept = 2.0 ** (-elapsed_s / half_life)
    return value * kept + gpus * half_life / LN2 * (1.0 - kept)


def historical_term(decayed_gpu_s: float, denom: float, half_life: float) -> float:
    """Return decayed usage as a fraction of `denom` GPUs used forever (see module doc)."""
    if half_life <= 0 or denom <= 0:
        return 0.0
    return decayed_gpu_s * LN2 / (denom * half_life)


def priority(share: float, age_s: float, age_weight: float, max_age_s: float) -> float:
    """Return a job's fair-share priority: fair-share factor + weighted age factor (Slurm).

    The fair-share factor is 2^(-share); the age factor is min(1, age/max_age),
    times `age_weight` (Slurm's PriorityWeightAge over PriorityWeightFairshare).
    A weight or max age of 0 or less turns the age factor off. A team whose
    share is infinite (weight <= 0) stays behind every other team.
    """
    if share == math.inf:
        return -math.inf
    fs = 2.0 ** (-share)
    if age_weight <= 0 or max_age_s <= 0 or age_s <= 0:
        return fs
    return fs + age_weight * min(1.0, age_s / max_age_s)


def weighted_share(terms: list[float], weight: float) -> float:
    """Return the dominant (largest) per-flavor term divided by the team weight.

    A weight of 0 or less puts the team behind every other team.
    """
    if weight <= 0:
        return math.inf
    return (max(terms) if terms else 0.0) / weight

"""Quota completion with more candidates than the exact search takes (rule 3).

When a reclaim's job fits the free GPUs (or its target's victims make room) but its
cohort's quota is still short, more victims are added for quota alone (`_cover`). That
was a greedy cover: least work lost per GPU first, so with more than EXACT_MAX
candidates it could take three jobs where two that lost less work would do (a helper's
brute-force comparison: 5 of 51 over-subscribed cohorts, 6 of 30 others). The greedy set
now bounds an exact search over quota alone (`_exact_cover`), whose checks are a
quota.Probe's, not placements.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import preemption, schedule
from scheduler.quota import Probe, contribution, lendable
from tests.scheduler.helpers import HOUR, NOW, Cluster, examples, preempted

LONG = 100 * HOUR
F = "h100"


def _lost(r) -> float:
    last = r.started_at if r.checkpointed_at is None else max(r.started_at, r.checkpointed_at)
    return r.gpus * max(0.0, NOW - last)


def _cheapest(c: Cluster, job_id: int = 1):
    """Brute force: the cheapest allowed set of victims after which the job fits its
    nominal quota, its cohort's headroom and the free GPUs (one pending job, one
    flavor, no stopping jobs), as (work lost, jobs); None if no set admits it."""
    job = next(j for j in c.pending if j.id == job_id)
    teams = {t.name: t for t in c.teams}
    cohort = [t for t in teams if teams[t].cohort == teams[job.team].cohort]
    used = Counter()
    for r in c.running:
        used[r.team] += r.gpus
    q = teams[job.team].quotas[F]
    borrows = {t: used[t] - teams[t].quotas[F].nominal for t in cohort}
    cands = [
        r for r in c.running
        if r.preemptible and r.team != job.team and r.team in cohort and borrows[r.team] > 0
    ]  # fmt: skip
    free0 = {name: len(n["free"]) for name, n in c.nodes.items()}

    def allowed(s) -> bool:
        per: dict[str, list[int]] = {}
        for r in s:
            per.setdefault(r.team, []).append(r.gpus)
        return all(sum(g) - max(g) < borrows[t] for t, g in per.items())

    def fits(s) -> bool:
        u, free = Counter(used), dict(free0)
        for r in s:
            u[r.team] -= r.gpus
            for w in r.placement:
                free[w.node] += len(w.gpus)
        if u[job.team] + job.gpus > q.nominal:
            return False
        slack = sum(contribution(teams[t].quotas[F], u[t]) for t in cohort)
        own = max(0, q.nominal - lendable(q) - u[job.team])
        if own + max(0, slack) < job.gpus:
            return False
        return max(free.values()) >= job.gpus_per_worker

    best = None
    for mask in range(1 << len(cands)):
        s = [r for i, r in enumerate(cands) if mask >> i & 1]
        cost = (sum(_lost(r) for r in s), len(s))
        if (best is None or cost < best) and allowed(s) and fits(s):
            best = cost
    return best


def _chosen(c: Cluster, plan) -> tuple[float, int]:
    ids = set(preempted(plan))
    victims = [r for r in c.running if r.id in ids]
    return sum(_lost(r) for r in victims), len(victims)


def _quota_short(lender: int, gpus: int, fillers: int) -> Cluster:
    """a's job fits the free GPUs; only the cohort's quota is short: b borrows 3 and d
    borrows 1, so 4 GPUs of borrowing must go. b runs y (1 GPU, 4 s old), m (2 GPUs, 143
    s), o (2 GPUs, 347 s), p (1 GPU, 770 s) and `fillers` old 1-GPU jobs; d two old 1-GPU
    jobs. The cheapest allowed set is {m, o}: 980 GPU-s, 2 jobs (b loses 4, its largest
    2 last: 4 - 2 < 3)."""
    c = Cluster().nodes_(4)
    b_jobs = [(20, 1, 4), (21, 2, 143), (22, 2, 347), (23, 1, 770)]
    b_jobs += [(30 + i, 1, 3000 + 50 * i) for i in range(fillers)]
    d_jobs = [(40, 1, 1761), (41, 1, 3019)]
    c.team("a", nominal=lender, cohort="c")
    c.team("b", nominal=sum(g for _, g, _ in b_jobs) - 3, cohort="c")
    c.team("d", nominal=1, cohort="c")
    free = {f"n{i}": 8 for i in range(4)}
    for team, jobs in (("b", b_jobs), ("d", d_jobs)):
        for i, g, age in jobs:
            node = next(n for n in free if free[n] >= g)
            free[node] -= g
            c.run(i, team, on={node: g}, started=NOW - age, runtime=LONG)
    c.job(1, "a", gpus=gpus, runtime=LONG)
    return c


def test_with_more_candidates_than_the_exact_search_the_cheapest_quota_set_is_taken():
    """14 candidates: the greedy cover took y, m and p (1,060 GPU-s, 3 jobs): once y and
    m were taken, o was no longer allowed (b would stop borrowing before its last job)."""
    for lender, gpus in ((2, 2), (6, 6)):  # over-subscribed by 2; not over-subscribed
        c = _quota_short(lender, gpus, fillers=8)
        plan = schedule(c.snapshot())
        assert sorted(preempted(plan)) == [21, 22]
        assert _chosen(c, plan) == _cheapest(c) == (980.0, 2)


def test_with_twelve_candidates_the_exact_search_agrees():
    c = _quota_short(2, 2, fillers=6)
    assert sorted(preempted(schedule(c.snapshot()))) == [21, 22]


@st.composite
def quota_short(draw):
    """A cohort where a (idle) lends and b and d borrow with 13 to 15 small jobs of mixed
    sizes and ages on four 8-GPU nodes, four GPUs of one left free: a's job fits them,
    and its quota needs some of the borrowers' jobs back."""
    c = Cluster().nodes_(4)
    free = {"n0": 8, "n1": 8, "n2": 8, "n3": 4}  # n3's other 4 stay free
    jobs = []
    for i in range(draw(st.integers(13, 15))):
        g = draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))
        node = next((n for n in free if free[n] >= g), None)
        if node is None:
            break
        free[node] -= g
        jobs.append((100 + i, draw(st.sampled_from("bd")), node, g, draw(st.integers(1, 5000))))
    used = Counter()
    for _, team, _, g, _ in jobs:
        used[team] += g
    gpus = draw(st.integers(1, 4))  # it fits n3's free GPUs: only quota is short
    over = {t: draw(st.integers(min(1, used[t]), used[t])) for t in "bd"}  # each borrows
    lent = over["b"] + over["d"] - draw(st.integers(0, 3))  # a's quota, lent out or more
    c.team("a", nominal=max(gpus, lent), cohort="c")
    c.team("b", nominal=used["b"] - over["b"], cohort="c")
    c.team("d", nominal=used["d"] - over["d"], cohort="c")
    for i, team, node, g, age in jobs:
        c.run(i, team, on={node: g}, started=NOW - age, runtime=LONG)
    c.job(1, "a", gpus=gpus, runtime=LONG)
    return c


@settings(max_examples=examples(50), deadline=None, suppress_health_check=list(HealthCheck))
@given(quota_short())
def test_quota_completion_takes_a_cheapest_set(c):
    best = _cheapest(c)
    plan = schedule(c.snapshot())
    got = _chosen(c, plan) if preempted(plan) else None
    if best is None or best == (0.0, 0):
        return  # no set admits it, or none is needed: other tests say what it is told
    assert got is not None and math.isclose(got[0], best[0]) and got[1] == best[1], (got, best)


def _full() -> Cluster:
    """Four full 8-GPU nodes of cohort c: b (nominal 30) runs 31 GPUs in 13 jobs of the
    same age (n0: six 1-GPU jobs and a 2-GPU job, 106; n1, n2: two 4-GPU jobs each;
    n3: a 4-GPU and a 3-GPU job), d (nominal 0) a non-preemptible 1-GPU job on n3, and
    a (nominal 1) nothing. The cohort's idle quota is 1 - 1 - 1 = -1: a's 1-GPU job
    needs b to give back 2 GPUs in one job (b borrows 1), and a GPU to run on."""
    c = Cluster().nodes_(4)
    c.team("a", nominal=1, cohort="c").team("b", nominal=30, cohort="c")
    c.team("d", nominal=0, cohort="c")
    jobs = [(100 + i, "n0", 1) for i in range(6)] + [(106, "n0", 2)]
    jobs += [(107, "n1", 4), (108, "n1", 4), (109, "n2", 4), (110, "n2", 4)]
    jobs += [(111, "n3", 4), (112, "n3", 3)]
    for i, node, g in jobs:
        c.run(i, "b", on={node: g}, started=NOW - HOUR, runtime=LONG)
    c.run(113, "d", on={"n3": 1}, started=NOW - HOUR, runtime=LONG, preemptible=False)
    c.job(1, "a", gpus=1, runtime=LONG)
    return c


def test_the_victims_that_free_the_quota_may_free_the_place_too():
    """A single-node target was chosen before its quota completion: the cheapest on n0
    was a 1-GPU job, after which b borrowed no more and nothing could free the quota,
    so the 3-GPU job on n3 went (3 GPU-h). The 2-GPU job on n0 frees both the quota
    and a GPU to run on (2 GPU-h): the quota's cheapest cover is a target as well."""
    c = _full()
    plan = schedule(c.snapshot())
    assert preempted(plan) == [106]
    assert _chosen(c, plan) == _cheapest(c) == (7200.0, 1)


def _cheapest_cover(p, job, book, search, chosen, removed, cands):
    """Brute force: the (cost, rank) of the cheapest allowed set of the candidates beyond
    `chosen` after which the job's quota fits (preemption._cover's question)."""
    picked = {id(r) for r in chosen}
    rest = [r for r in cands if id(r) not in picked]
    best = None
    for k in range(1, len(rest) + 1):
        for s in itertools.combinations(rest, k):
            left = dict(removed)
            allowed = True
            for r in sorted(s, key=lambda r: r.job.gpus):
                allowed = allowed and search.allowed(r, left)
                search.add(left, r)
            probe = Probe(p.ledger, book, job.flavor)
            for r in s:
                probe.change(r.book, -r.job.gpus)
            if allowed and preemption.quota_fits(p, job, book, probe):
                key = (search.cost([*chosen, *s]), search.rank(list(s)))
                best = key if best is None or key < best else best
    return best


def test_a_cover_that_needs_its_own_teams_jobs_tries_them_first(monkeypatch):
    """a (nominal 10, lending limit 2) uses 7 with its own low-priority jobs; its
    priority-3 1x6 job would take it to 13, so 3 of its own GPUs must stop, and the
    cohort's slack is short as well. Its own jobs cost most (rule 3), so the exact
    cover tried every allowed set of b's and d's ten jobs first, ran out of its 1,024
    checks, and kept a dearer set ({108, 110, 105} beside the target's victim, where
    {110, 105} does: a review's random case). Every cover asked is now the cheapest.
    (The whole plan was not: {105, 108, 110} on n0 frees both, 4,464 GPU-s against
    5,154, but n0 is not among the two cheapest targets; docs/scheduling.md, Known
    limits. At the session's start it preempted ten jobs, 36,289 GPU-s.) Searched
    class by class (`preemption._classes`: b's and d's priority-0 jobs first, then
    with a's own), the search now finds it: the covers are asked of all candidates at
    once here, as they were, and the plan is checked both ways."""
    c = Cluster().nodes_(4)
    c.team("b", nominal=0, lending_limit=1, cohort="c")
    c.team("d", nominal=2, lending_limit=2, cohort="c")
    c.team("a", nominal=10, lending_limit=2, cohort="c")
    runs = [
        (100, "d", "n1", 1, 3902, 2), (101, "b", "n1", 2, 4073, 0), (102, "d", "n1", 4, 2634, 0),
        (103, "b", "n2", 1, 1571, 0), (104, "b", "n1", 1, 1738, 0), (105, "a", "n0", 4, 873, 0),
        (106, "a", "n0", 2, 4962, 2), (107, "b", "n2", 1, 3149, 0), (108, "d", "n0", 1, 966, 0),
        (109, "b", "n3", 2, 2444, 2), (110, "a", "n0", 1, 6, 0), (111, "b", "n3", 4, 723, 1),
        (112, "b", "n3", 1, 2143, 0), (113, "b", "n2", 4, 414, 0),
    ]  # fmt: skip
    for i, team, node, g, age, priority in runs:
        c.run(i, team, on={node: g}, started=NOW - age, runtime=LONG, priority=priority)
    c.job(1, "a", gpus=6, priority=3, runtime=LONG)
    asked = []
    cover = preemption._cover

    def checked(p, job, book, search, chosen, removed, cands, tx):
        got = cover(p, job, book, search, chosen, removed, cands, tx)
        best = _cheapest_cover(p, job, book, search, chosen, removed, cands)
        asked.append((best, got and (search.cost([*chosen, *got[0]]), search.rank(got[0]))))
        return got

    with monkeypatch.context() as m:
        m.setattr(preemption, "_cover", checked)
        m.setattr(preemption, "_classes", lambda p, job, pool, book, cands, tx: [cands])
        plan = schedule(c.snapshot())
    assert asked and all(best == got for best, got in asked), asked
    assert _chosen(c, plan) == (5154.0, 3)
    assert _chosen(c, schedule(c.snapshot())) == (4464.0, 3)  # class by class

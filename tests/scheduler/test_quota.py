"""Quotas with Kueue's semantics: nominal, borrowing from a cohort, lending limits."""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import schedule
from scheduler.model import Quota
from scheduler.preemption import _lacking, quota_fits, quota_lacks, quota_short
from scheduler.quota import Ledger, Probe, contribution
from tests.scheduler.helpers import FLAVOR, Cluster, admitted, examples, make_team, reasons

ADMIT = "admit"


def cluster(*teams, nodes=8):
    """A roomy cluster (8 nodes x 8 GPUs, one block) so only quota decides."""
    c = Cluster().nodes_(nodes)
    for name, kw in teams:
        c.team(name, **kw)
    return c


def within_nominal():
    c = cluster(("a", {"nominal": 16}))
    c.job(1, "a", workers=1, gpus=8)
    return c, {1: (ADMIT, 0)}


def over_nominal_without_cohort():
    c = cluster(("a", {"nominal": 8}))
    c.run(10, "a", on={"n0": 8})
    c.job(1, "a", gpus=8)
    return c, {1: "quota"}


def borrows_idle_quota_of_its_cohort():
    c = cluster(("a", {"nominal": 8, "cohort": "c"}), ("b", {"nominal": 16, "cohort": "c"}))
    c.job(1, "a", workers=2, gpus=8)
    return c, {1: (ADMIT, 8)}


def borrowing_limit_caps_usage():
    c = cluster(
        ("a", {"nominal": 8, "cohort": "c", "borrowing_limit": 4}),
        ("b", {"nominal": 16, "cohort": "c"}),
    )
    c.run(10, "a", on={"n0": 4})
    c.job(1, "a", workers=3, gpus=4)  # 4 + 12 = 16 > 8 + 4
    # 4 + 8 = 12: exactly the limit; short enough not to delay job 1's quota hold
    c.job(2, "a", workers=2, gpus=4, runtime=1000)
    return c, {1: "quota", 2: (ADMIT, 4)}


def bigger_than_nominal_plus_borrowing_limit_never_fits():
    c = cluster(
        ("a", {"nominal": 8, "cohort": "c", "borrowing_limit": 4}),
        ("b", {"nominal": 16, "cohort": "c"}),
    )
    c.job(1, "a", workers=2, gpus=8)
    return c, {1: "never_fits"}


def lending_limit_caps_what_others_borrow():
    c = cluster(
        ("a", {"nominal": 8, "cohort": "c"}),
        ("b", {"nominal": 16, "cohort": "c", "lending_limit": 4}),
    )
    c.job(1, "a", workers=2, gpus=8)  # would borrow 8, b lends at most 4
    c.job(2, "a", workers=3, gpus=4)  # borrows exactly 4
    return c, {1: "never_fits", 2: (ADMIT, 4)}


def cohort_busy_when_lenders_use_their_quota():
    c = cluster(("a", {"nominal": 8, "cohort": "c"}), ("b", {"nominal": 16, "cohort": "c"}))
    c.run(10, "b", on={"n0": 8, "n1": 4})
    c.job(1, "a", workers=2, gpus=8)  # needs 8 borrowed, b has 4 idle
    return c, {1: "cohort_busy"}


def no_cohort_no_borrowing():
    c = cluster(("a", {"nominal": 8}), ("b", {"nominal": 16}))
    c.job(1, "a", workers=2, gpus=8)
    return c, {1: "never_fits"}


def nominal_lent_out_waits_without_preemption():
    c = cluster(("a", {"nominal": 16, "cohort": "c"}), ("b", {"nominal": 0, "cohort": "c"}))
    c.run(10, "b", on={"n0": 8, "n1": 8})
    c.job(1, "a", workers=2, gpus=8)
    return c, {1: "cohort_busy"}


def stopping_jobs_still_count_as_usage():
    c = cluster(("a", {"nominal": 8}))
    c.run(10, "a", on={"n0": 8}, stopping=True)
    c.job(1, "a", gpus=8)
    return c, {1: "quota"}


def non_lendable_part_is_always_its_own():
    # a lends at most 8 of its 16; b borrows those 8; a still gets its other 8.
    c = cluster(
        ("a", {"nominal": 16, "cohort": "c", "lending_limit": 8}),
        ("b", {"nominal": 0, "cohort": "c"}),
    )
    c.run(10, "b", on={"n0": 8})
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=8, submitted=0.0 + 10**6)
    return c, {1: (ADMIT, 0), 2: "cohort_busy"}


def team_missing_from_snapshot_has_no_quota():
    c = cluster(("a", {"nominal": 8}))
    c.job(1, "ghost", gpus=1)
    return c, {1: "never_fits"}


SCENARIOS = [
    within_nominal,
    over_nominal_without_cohort,
    borrows_idle_quota_of_its_cohort,
    borrowing_limit_caps_usage,
    bigger_than_nominal_plus_borrowing_limit_never_fits,
    lending_limit_caps_what_others_borrow,
    cohort_busy_when_lenders_use_their_quota,
    no_cohort_no_borrowing,
    nominal_lent_out_waits_without_preemption,
    stopping_jobs_still_count_as_usage,
    non_lendable_part_is_always_its_own,
    team_missing_from_snapshot_has_no_quota,
]


# Strict fifo would block job 2 behind a quota-blocked job 1; see test_policies.
@pytest.mark.parametrize("policy", ["fairshare", "fifo-backfill"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_quota_scenarios(scenario, policy):
    c, expect = scenario()
    plan = schedule(c.snapshot(policy=policy, preemption=False))
    got = reasons(plan)
    borrowed = {a.job_id: a.borrowed for a in plan.admissions}
    for job_id, want in expect.items():
        if isinstance(want, tuple):
            assert job_id in admitted(plan), (job_id, got.get(job_id))
            assert borrowed[job_id] == want[1]
        else:
            assert got[job_id] == want, plan.verdicts


@pytest.mark.parametrize(
    "quota, usage, want",
    [
        (Quota(8), 0, 8),  # all idle quota is lendable
        (Quota(8), 5, 3),
        (Quota(8), 8, 0),
        (Quota(8), 11, -3),  # borrowing 3
        (Quota(8, lending_limit=2), 0, 2),
        (Quota(8, lending_limit=2), 7, 1),
        (Quota(0), 4, -4),
    ],
)
def test_contribution_to_cohort_slack(quota, usage, want):
    assert contribution(quota, usage) == want


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 16),  # nominal
            st.one_of(st.none(), st.integers(0, 8)),  # borrowing limit
            st.one_of(st.none(), st.integers(0, 16)),  # lending limit
            st.integers(0, 24),  # usage
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 3),
    st.integers(1, 8),
)
def test_a_gpu_given_back_frees_at_most_a_gpu_of_headroom(teams, who, gives):
    """Ledger.headroom, the used side of a nominal quota and Ledger.room_parts rise by at
    most one per GPU any team of the cohort gives back, the limit's and unlent parts only
    with the team's own: what preemption.quota_lacks counts on (a search skips asking,
    or ends a branch, until as many GPUs as the job lacks could be given back)."""
    ledger = Ledger(
        [
            make_team(f"t{i}", n, cohort="c", borrowing_limit=b, lending_limit=lend)
            for i, (n, b, lend, _) in enumerate(teams)
        ],  # fmt: skip
        half_life=0,
    )
    for i, (*_, used) in enumerate(teams):
        ledger.add(ledger.book(f"t{i}"), FLAVOR, used)
    book, other = ledger.book("t0"), ledger.book(f"t{who % len(teams)}")
    gives = min(gives, other.usage[FLAVOR])
    probe = Probe(ledger, book, FLAVOR)
    before = (probe.headroom(), -probe.used(), *probe.parts())
    probe.change(other, -gives)
    after = (probe.headroom(), -probe.used(), *probe.parts())
    for a, b in zip(after, before, strict=True):  # headroom, used and room_parts' three
        assert a == b or 0 <= a - b <= gives  # (equal: a limit of none, infinite)
    if other is not book:  # its limit and the part it never lends move with its own only
        assert after[1:4] == before[1:4]
    together = (after[3] + after[4]) - (before[3] + before[4])
    assert 0 <= together <= gives  # its unlent part and the slack, together
    assert probe.headroom() == ledger.headroom_with(book, FLAVOR, {other: -gives})


@st.composite
def _ledgers(draw):
    """1-4 teams in a cohort or none, random limits and usage, a job of up to 12 GPUs,
    maybe try_priority_preempt's cap, and GPUs given back one job at a time."""
    n = draw(st.integers(1, 4))
    cohort = draw(st.sampled_from([None, "c"]))
    teams = [
        make_team(
            f"t{i}",
            draw(st.integers(0, 12)),
            cohort=cohort,
            borrowing_limit=draw(st.one_of(st.none(), st.integers(0, 8))),
            lending_limit=draw(st.one_of(st.none(), st.integers(0, 12))),
        )
        for i in range(n)
    ]
    ledger = Ledger(teams, half_life=3600.0)
    for t in teams:
        ledger.add(ledger.book(t.name), FLAVOR, draw(st.integers(0, 20)))
    gives = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, 6)), max_size=6))
    return ledger, draw(st.integers(1, 12)), draw(st.one_of(st.none(), st.integers(0, 20))), gives


@settings(max_examples=examples(200), deadline=None)
@given(_ledgers())
def test_what_a_job_lacks_is_zero_exactly_when_its_quota_fits(case):
    """preemption.quota_lacks splits what a job's quota lacks into GPUs its own team must
    give back and GPUs any team of the cohort may: nothing lacking is quota_fits, and a
    job fits after giving back some GPUs only if the first figures allowed it (what the
    exact quota cover's branch ends and _quota_from's skips count on; a review's
    property)."""
    ledger, gpus, cap, gives = case
    me = ledger.book("t0")
    p = SimpleNamespace(ledger=ledger, own_cap=None if cap is None else (me, cap))
    job = SimpleNamespace(gpus=gpus, flavor=FLAVOR)
    probe = Probe(ledger, me, FLAVOR)
    first = quota_lacks(p, job, me, probe)
    for t, g in [(None, 0), *gives]:
        if t is not None:
            other = ledger.book(f"t{t}")
            probe.change(other, -min(g, other.used(FLAVOR) + probe.deltas.get(other, 0)))
        fits = quota_fits(p, job, me, probe)
        assert (not _lacking(quota_lacks(p, job, me, probe), 0, 0)) == fits
        assert (quota_short(p, job, me, probe) <= 0) == fits
        if fits:
            mine, every = -probe.deltas.get(me, 0), -sum(probe.deltas.values())
            assert not _lacking(first, mine, every)

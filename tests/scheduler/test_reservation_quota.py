"""A GPU reservation holds the quota its job needs as well as its GPUs.

Backfill promises the first blocked job of a flavor its start: nothing admitted after
its reservation may delay it (scheduler.backfill). A job that would run past the
reservation's start on GPUs the reservation does not need took the quota the reserved
job needs instead: a review's case, a gang told "reserved for it from" +8 min that
waited `cohort_busy` for an hour once its GPUs were free (the known limit of
docs/scheduling.md until 2026-12-03). Each case failed before.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler import schedule
from scheduler.backfill import Reservation, _released
from scheduler.core import Pass
from tests.scheduler.helpers import (
    FLAVOR,
    HOUR,
    NOW,
    Cluster,
    Sim,
    admitted,
    examples,
    make_job,
    preempted,
    verdict,
)

MIN = 60.0


def _cluster() -> Cluster:
    """a (nominal 8) waits for n1 (free at +8 min) and n2 for its 2x8 gang, which
    borrows 8 of the cohort's idle quota (f's 8: the cohort's quota exceeds its GPUs);
    n3's 4 GPUs are free and the gang cannot use them."""
    c = Cluster().nodes_(3).node("n3", gpus=4)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=8, cohort="c").team("f", nominal=8, cohort="c")
    c.team("e", nominal=8)
    c.run(10, "d", on={"n0": 8}, runtime=10 * HOUR, started=NOW)
    c.run(11, "e", on={"n1": 8}, runtime=8 * MIN, started=NOW)
    c.job(1, "a", workers=2, gpus=8, runtime=2 * HOUR, submitted=NOW - 100)
    return c


def _start(sim: Sim, job_id: int, passes: int = 30) -> float | None:
    return sim.start_of(job_id, MIN, passes)


def test_a_later_borrower_may_not_take_the_quota_a_reserved_gang_needs():
    c = _cluster()
    c.job(2, "b", gpus=4, runtime=4 * HOUR, submitted=NOW - 50)
    plan = schedule(c.snapshot())
    v = verdict(plan, 1)
    assert v.reason_code == "reserved" or "reserved" in v.message, v.message
    assert v.estimated_start == NOW + 8 * MIN
    assert 2 not in admitted(plan)
    held = verdict(plan, 2)
    assert held.reason_code == "reserved"
    assert (
        "it would take quota that job 1 needs when the GPUs reserved for it are free"
        in held.message
    ), held.message
    assert "could start now if its max runtime were at most 8 min" in held.message
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_a_borrower_that_ends_before_the_reservation_still_backfills():
    c = _cluster()
    c.job(2, "b", gpus=4, runtime=5 * MIN, submitted=NOW - 50)
    plan = schedule(c.snapshot())
    assert 2 in admitted(plan)
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_the_gangs_own_team_may_not_take_it_either():
    """A later job of a's own, within a's nominal quota, leaves the gang 8 more to
    borrow than the cohort has."""
    c = _cluster()
    c.job(2, "a", gpus=4, runtime=4 * HOUR, submitted=NOW - 50)
    plan = schedule(c.snapshot())
    assert 2 not in admitted(plan)
    assert verdict(plan, 2).reason_code == "reserved"
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_another_teams_job_within_its_nominal_quota_is_never_held():
    """f takes back its own idle quota: guaranteed, whatever the reservation needs (a
    known limit: the gang may then wait longer)."""
    c = _cluster()
    c.job(2, "f", gpus=4, runtime=4 * HOUR, submitted=NOW - 50)
    assert 2 in admitted(schedule(c.snapshot()))


def test_a_borrower_that_leaves_the_gang_enough_quota_backfills():
    """With 12 idle GPUs of quota beyond the gang's need, b's 4 take none of it."""
    c = _cluster().team("g", nominal=4, cohort="c")
    c.job(2, "b", gpus=4, runtime=4 * HOUR, submitted=NOW - 50)
    plan = schedule(c.snapshot())
    assert 2 in admitted(plan)
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_a_job_that_fits_only_on_the_reserved_gpus_is_promised_a_start_only_if_short():
    """b's 8-GPU job fits only on n2, which the gang needs from +8 min. It is held for the
    gang's quota all the same (quota is asked before GPUs). Ending by +8 min, it may use
    the reserved GPUs as well (they come back in time) and starts: so it is told, and
    it does; a second longer, it does not. Asked of the free GPUs the reservation
    leaves, it was told it could not start now even if it were shorter."""
    c = _cluster()
    c.job(2, "b", gpus=8, runtime=4 * HOUR, submitted=NOW - 50)
    v = verdict(schedule(c.snapshot()), 2)
    assert "it would take quota that job 1 needs" in v.message, v.message
    assert "it could start now if its max runtime were at most 8 min" in v.message
    c.pending[-1] = make_job(2, "b", gpus=8, runtime=8 * MIN, submitted=NOW - 50)
    assert 2 in admitted(schedule(c.snapshot()))
    c.pending[-1] = make_job(2, "b", gpus=8, runtime=8 * MIN + 1, submitted=NOW - 50)
    assert 2 not in admitted(schedule(c.snapshot()))


def test_quota_the_reservation_gets_back_by_its_start_counts_as_its_own():
    """b's 5-minute job 2 backfills (it ends before the reservation) and takes 4 of the
    gang's 16 for now; counted as the ledger stood, the gang then looked short of quota
    "already", and b's 4-hour job 3 was let through: the gang started after 4 h (a
    review's case). Quota is counted as it will stand at the reservation's start."""
    c = _cluster().node("n4", gpus=4)
    c.job(2, "b", gpus=4, runtime=5 * MIN, submitted=NOW - 50)
    c.job(3, "b", gpus=4, runtime=4 * HOUR, submitted=NOW - 40)
    plan = schedule(c.snapshot())
    assert 2 in admitted(plan) and 3 not in admitted(plan)
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_a_victim_stopping_by_the_reservation_gives_its_quota_back():
    """b's priority job 3 replaces b's own job 30 (its charge and the stopping victim are
    both on the ledger now): the gang looked short, and g's 4-hour borrower 5 was let
    through; at +8 min the gang had 12 of 16 and waited 4 h (a review's case)."""
    c = Cluster().nodes_(3).node("n3", gpus=4).node("n4", gpus=4)
    c.team("a", nominal=8, cohort="c").team("b", nominal=4, cohort="c")
    c.team("d", nominal=8, cohort="c").team("f", nominal=8, cohort="c")
    c.team("g", nominal=0, cohort="c", decayed={FLAVOR: 1e7 * HOUR}).team("e", nominal=8)
    c.run(10, "d", on={"n0": 8}, runtime=10 * HOUR, started=NOW)
    c.run(11, "e", on={"n1": 8}, runtime=8 * MIN, started=NOW)
    c.run(30, "b", on={"n3": 4}, runtime=10 * HOUR, started=NOW - 100)
    c.job(1, "a", workers=2, gpus=8, runtime=2 * HOUR, submitted=NOW - 100)
    c.job(3, "b", gpus=4, priority=10, runtime=4 * HOUR, submitted=NOW - 50)
    c.job(5, "g", gpus=4, runtime=4 * HOUR, submitted=NOW - 40)
    plan = schedule(c.snapshot())
    assert preempted(plan) == [30]
    assert 5 not in admitted(plan)
    assert _start(Sim(c), 1) == NOW + 8 * MIN


def test_a_job_held_for_the_quota_is_estimated_after_the_reserved_job():
    """Held for the gang's quota, b's job was estimated at the reservation's start (+8
    min); the gang then takes the quota b would borrow for its whole 2 h."""
    c = _cluster()
    c.job(2, "b", gpus=4, runtime=4 * HOUR, submitted=NOW - 50)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved"
    sim = Sim(c)
    _start(sim, 2, passes=200)
    assert sim.started[2] == v.estimated_start == NOW + 8 * MIN + 2 * HOUR


@st.composite
def _held_gangs(draw):
    """A cohort where only the reserved gang's team a has nominal quota among the teams
    with jobs (l lends and runs nothing; b and d borrow; x is outside the cohort), on
    2-4 nodes; a's gang is the earliest pending job, a's, b's and d's jobs come after it.
    (a's own later jobs, within its nominal quota or not, are held by a reservation and
    by a's cohort hold alike: when a short borrower let through made the gang wait for
    quota for a pass, one of them took the quota it needed before the cohort hold held
    them too, test_cohort_hold.py.)"""
    c = Cluster().nodes_(draw(st.integers(2, 4)))
    c.team("a", nominal=draw(st.sampled_from([0, 4, 8, 16])), cohort="c")
    c.team("l", nominal=draw(st.sampled_from([0, 8, 16, 24])), cohort="c")
    c.team("b", nominal=0, cohort="c").team("d", nominal=0, cohort="c")
    c.team("x", nominal=32)
    ids = iter(range(100, 200))
    for node in list(c.nodes):
        left, keep = 8, draw(st.integers(0, 4))  # GPUs left free on the node
        while left > keep:
            k = draw(st.integers(1, left - keep))
            left -= k
            team = draw(st.sampled_from("abdx"))
            ends = draw(st.integers(1, 90)) * MIN
            c.run(next(ids), team, on={node: k}, started=NOW - HOUR, runtime=HOUR + ends)
    workers = draw(st.integers(1, 2))
    c.job(1, "a", workers=workers, gpus=draw(st.sampled_from([4, 8])), submitted=NOW - 500)
    for i in range(draw(st.integers(1, 8))):
        team = draw(st.sampled_from("abd"))
        gpus = draw(st.integers(1, 8))
        runtime = draw(st.integers(1, 300)) * MIN
        c.job(10 + i, team, gpus=gpus, runtime=runtime, submitted=NOW - 400 + i)
    return c


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(_held_gangs())
def test_a_reserved_gang_starts_by_its_reservation_whatever_backfills(c):
    """In submit order (FIFO + backfill, nothing submitted later, jobs run exactly their
    max runtime) every job after the reserved gang is behind it at every pass, and no
    other team with jobs has nominal quota to take back: so the gang starts by the
    start it was given at the first pass, GPUs and quota both."""
    plan = schedule(c.snapshot(policy="fifo-backfill"))
    v = verdict(plan, 1) if 1 not in admitted(plan) else None
    assume(v is not None and "reserved for it" in v.message)
    promised = v.estimated_start
    sim = Sim(c, policy="fifo-backfill")
    started = sim.start_of(1, MIN, int((promised - NOW) / MIN) + 2)
    assert started is not None and started <= promised, (v.message, started, promised)


def test_a_later_reservation_counts_the_quota_of_the_reservation_before_it():
    """With two reservations per flavor: a's job 1 (10 h) is reserved from +8 min, a2's
    job 2 from +20 min, and between them they take the cohort's idle quota. b's 4-hour
    borrower left job 1 its quota and, counted as if job 1 were not running at +20 min,
    job 2 its quota too: admitted, job 2 started after 4 h (a review's case)."""
    c = Cluster().nodes_(3).node("n3", gpus=4)
    c.team("a", nominal=8, cohort="c").team("a2", nominal=0, cohort="c")
    c.team("b", nominal=0, cohort="c").team("f", nominal=8, cohort="c")
    c.team("e", nominal=24)
    c.run(20, "e", on={"n0": 8}, runtime=10 * HOUR, started=NOW)
    c.run(21, "e", on={"n1": 8}, runtime=8 * MIN, started=NOW)
    c.run(22, "e", on={"n2": 8}, runtime=20 * MIN, started=NOW)
    c.job(1, "a", gpus=8, runtime=10 * HOUR, submitted=NOW - 300)
    c.job(2, "a2", gpus=8, runtime=2 * HOUR, submitted=NOW - 200)
    c.job(3, "b", gpus=4, runtime=4 * HOUR, submitted=NOW - 100)
    cfg = dict(policy="fifo-backfill", backfill_reservations=2)
    plan = schedule(c.snapshot(**cfg))
    assert admitted(plan) == []
    assert verdict(plan, 3).reason_code == "reserved"
    assert Sim(c, **cfg).start_of(2, MIN, 40) == NOW + 20 * MIN


def test_a_victim_whose_stop_ends_after_the_reservation_gives_nothing_back_by_then():
    """d's job ends at +5 min by its max runtime; preempted now with 10 minutes of
    grace it holds its GPUs until +10 min, after the reservation's +8. Counted before
    the preemption, it stayed given back: the answer depended on when it was asked."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("d", nominal=4, cohort="c")
    c.run(103, "d", on={"n0": 4}, started=NOW - HOUR, runtime=HOUR + 5 * MIN, grace=600.0)
    p = Pass(c.snapshot())
    gang = make_job(1, "a", workers=2, gpus=8)
    early = Reservation(gang, NOW + 8 * MIN, {}, 2)
    assert {b.name: k for b, k in _released(p, early).items()} == {"d": 4}
    (r,) = p.running_of("d", FLAVOR)
    r.stop(p.now)  # as preemption.commit does
    p.stops(p.pools[FLAVOR]).add(r)
    late = Reservation(gang, NOW + 8 * MIN, {}, 2)
    assert _released(p, early) == _released(p, late) == {}

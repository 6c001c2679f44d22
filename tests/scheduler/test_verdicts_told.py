"""What a pending job is told must be true (docs/scheduling.md, "Explain"): a fourth
adversarial tester's cases (2026-12-06), each of which failed before its fix.

Each docstring gives the scenario, what the job was told, and what is true (checked
with tests.scheduler.helpers.Sim where a time is promised: jobs run exactly their max
runtime, nothing new is submitted).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

from scheduler import schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, verdict

LONG_AGO = NOW - 5000  # running jobs started before any pending job was submitted


def _reserved_from(message: str) -> float:
    """Return the instant of "GPUs on N node(s) are reserved for it from T"."""
    text = re.search(r"reserved for it from (\S+?)(?:;|$)", message).group(1)
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _run(c: Cluster, times, **config) -> Sim:
    sim = Sim(c, **config)
    for t in times:
        sim.step(NOW + t)
    return sim


# -- 1. estimated start after the job's own GPU reservation (the "far floor" class) --


def test_a_job_is_not_estimated_after_its_own_gpu_reservation():
    """Default policy (fair share). Team a (cohort c, nominal 8) has its whole quota lent
    to d's non-preemptible job for ~99 h: a's job 1 waits `cohort_busy` under a cohort
    hold at ~+99 h. Team e (no cohort) has a node coming free in 15 s: its job 2 waits
    `no_capacity` and gets the flavor's GPU reservation, "GPUs on 1 node(s) are reserved
    for it from" +15 s. Its estimated start is ~+99 h. It starts at +15 s.

    Was told: reserved from +15 s, and estimated at +98.6 h, in the same verdict. True: +15 s.
    Not a documented approximation: the doc says a job with a reservation starts "no
    earlier than" it and that the reserved job "starts by T" (No starvation); the
    shadow's "never before the job before it" rule is meant to keep GPUs counted, but
    here the job before it is another team's job waiting for quota (not GPUs) whose
    floor comes from its cohort hold, and the shadow lets it book the GPUs job 11 frees
    at +15 s while the clock jumps to its floor (explain.Shadow.start: `clock` is
    shared by every later job). The ~100 h / 15 s case of the brief, still there.
    """
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("d", nominal=0, cohort="c").team("e", nominal=16)
    c.run(10, "d", on={"n0": 8}, started=LONG_AGO, runtime=100 * HOUR, preemptible=False)
    c.run(11, "e", on={"n1": 8}, started=LONG_AGO, runtime=NOW - LONG_AGO + 15)
    c.job(1, "a", gpus=8)
    c.job(2, "e", gpus=8)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "no_capacity"
    reserved = _reserved_from(v.message)
    assert reserved == NOW + 15
    assert _run(c, [0, 15]).started[2] == NOW + 15
    assert v.estimated_start <= reserved, (v.estimated_start - NOW, v.message)


# -- 2. a waiting preemptor's charge never comes back in a hold's quota replay --------


def test_a_quota_hold_counts_a_waiting_preemptors_quota_as_coming_back():
    """No cohort. Team a (nominal 8) runs non-preemptible job 10 (4 GPUs, ~99 h) and job
    11 (4 GPUs). a's priority-1 job 1 (4 GPUs, 60 s) preempts job 11 by priority and
    starts at +30 s; it ends at +90 s. a's priority-1 job 2 (4 GPUs) waits `quota`.

    Was told: estimated start ~+98.6 h (its quota hold's time: when job 10 ends). True: it
    starts at +90 s, when job 1 ends. backfill.quota_free_at replays the team's running
    jobs and this pass's admissions, but job 1's charge (Pass.charge) is in the team's
    usage and never ends in the replay, though its end is known (its victims' stop +
    its max runtime). Its docstring says such a claim makes the time infinite ("no
    quota is held"); any later end of another job makes it finite and wrong. Not
    "ignores quota": this is the quota hold's own quota replay, which the estimate is
    floored at (Explain: "quota | projection, not before its quota hold").
    """
    c = Cluster().nodes_(2)
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR, preemptible=False)
    c.run(11, "a", on={"n1": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.job(1, "a", gpus=4, priority=1, runtime=60)
    c.job(2, "a", gpus=4, priority=1)
    plan = schedule(c.snapshot())
    assert [p.job_id for p in plan.preemptions] == [11]
    v = verdict(plan, 2)
    assert v.reason_code == "quota"
    assert _run(c, [0, 30, 60, 90]).started[2] == NOW + 90
    assert v.estimated_start <= NOW + 90 + 30, (v.estimated_start - NOW, v.message)


def test_a_cohort_hold_counts_a_waiting_preemptors_quota_as_coming_back():
    """Cohort c: a (nominal 8), b and d (nominal 0). d's non-preemptible job 10 borrows 4
    of a's quota for ~99 h, b's job 11 the other 4. a's job 1 (4 GPUs, 60 s) reclaims job
    11, starts at +30 s and ends at +90 s. b's job 2 (4 GPUs) waits `cohort_busy`.

    Was told: estimated start ~+98.6 h (its cohort hold: backfill.cohort_free_at, where a's
    preemptor's charge never ends). True: it starts at +90 s, when a's job 1 ends and
    a's idle quota is lendable again (b's victim backs off and does not compete). Same
    cause as the quota hold's; the cohort hold's time is a quota replay, not the
    shadow's documented quota blindness.
    """
    c = Cluster().nodes_(1)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.team("d", nominal=0, cohort="c")
    c.run(10, "d", on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR, preemptible=False)
    c.run(11, "b", on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.job(1, "a", gpus=4, runtime=60)
    c.job(2, "b", gpus=4)
    plan = schedule(c.snapshot())
    assert [p.job_id for p in plan.preemptions] == [11]
    v = verdict(plan, 2)
    assert v.reason_code == "cohort_busy"
    sim = Sim(c, backoff=(1e6, 1e6))
    for t in (0, 30, 60, 90):
        sim.step(NOW + t)
    assert sim.started[2] == NOW + 90
    assert v.estimated_start <= NOW + 90 + 30, (v.estimated_start - NOW, v.message)


# -- 3. `priority` when the jobs ahead took GPUs the job could never use --------------


def test_priority_is_not_blamed_on_jobs_ahead_that_took_gpus_it_could_not_use():
    """n0 and n1 (8 GPUs) have 4 free each, n2 (4 GPUs) has 1 free. Team a's job 1 (1
    GPU) is admitted on n2 (best fit); a's job 2 (1 worker x 8) fits no node.

    Was told: `priority`, "1 job(s) ahead of it in its queue took 1 GPU this pass" (remedy:
    "the jobs ahead of it ... starting, or a higher priority"). True: it waits for a
    whole node (`fragmented`), with or without job 1: the GPU job 1 took is on a node
    that can never hold it. Pass.ahead_in_queue turns a capacity reason into `priority`
    when free + taken >= its GPUs, a count; for `fragmented` and `topology` that count
    holds always (enough GPUs are free by definition), so any admission of its queue in
    the pass makes it `priority`. Not documented: step 3.7 says "when jobs ahead of it
    ... took the GPUs", i.e. the GPUs it needed.
    """
    c = Cluster().node("n0").node("n1").node("n2", gpus=4)
    c.team("a", nominal=64)
    c.run(10, on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.run(11, on={"n1": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.run(12, on={"n2": 3}, started=LONG_AGO, runtime=100 * HOUR)
    c.job(1, gpus=1)
    c.job(2, gpus=8)
    snap = c.snapshot()
    alone = schedule(replace(snap, pending=tuple(j for j in snap.pending if j.id != 1)))
    assert verdict(alone, 2).reason_code == "fragmented"  # job 1 changes nothing for it
    v = verdict(schedule(snap), 2)
    assert v.reason_code == "fragmented", v.message


# -- 4. a gang held by a quota or cohort hold skips the whole-workers floor -----------


def test_a_quota_held_gang_is_not_estimated_before_its_workers_fit_whole():
    """No cohort. n0 (8 GPUs) holds a's job 10 (4 GPUs, ~99 h) and job 11 (4 GPUs, ends
    at +60 s); n1 (4 GPUs) is free. a (nominal 12) uses 8; its 1x8 job 1 waits `quota`
    with a quota hold at +60 s.

    Was told: estimated start +60 s (by count, 4 free on n1 + 4 freed on n0). True: it fits
    only n0, whole at ~+98.6 h; at the next pass it is told so (`fragmented`, +98.6 h)
    and it starts then. The doc: "A gang ... also starts no earlier than its workers fit
    whole on nodes" (explain._whole_workers); estimate_starts skips that floor for every
    job in `reserved`, which includes quota and cohort holds, whose start is quota only,
    not a placement ("Not for a job with a reservation or a preemptor: their GPUs are
    placed already" is true of GPU reservations only).
    """
    c = Cluster().node("n0", gpus=8).node("n1", gpus=4)
    c.team("a", nominal=12)
    c.run(10, "a", on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.run(11, "a", on={"n0": 4}, started=LONG_AGO, runtime=NOW - LONG_AGO + 60)
    c.job(1, "a", gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "quota"
    whole = NOW + 100 * HOUR - (NOW - LONG_AGO)  # job 10 ends
    sim = _run(c, [0, 60, HOUR, whole - NOW - 10])
    assert 1 not in sim.started
    sim.step(whole)
    assert sim.started[1] == whole
    assert v.estimated_start >= whole - 60, (v.estimated_start - NOW, v.message)


def test_a_cohort_held_gang_is_not_estimated_before_its_workers_fit_whole():
    """Cohort c: lender l (nominal 12) runs job 10 (4 GPUs on n0, ~99 h) and job 11 (4
    GPUs on n0, ends at +60 s); n1 (4 GPUs) is free. a (nominal 0) borrows: its 1x8 job
    1 waits `cohort_busy` ("can give it only 4 more now") with a cohort hold at +60 s.

    Was told: estimated start +60 s. True: it fits only n0, whole at ~+98.6 h, and starts
    then. Same cause: the hold's `whole` projection (backfill._whole) is built only when
    a later job of its own team asks (_takes_own_gangs), and the whole-workers floor is
    skipped for every held job.
    """
    c = Cluster().node("n0", gpus=8).node("n1", gpus=4)
    c.team("a", nominal=0, cohort="c").team("l", nominal=12, cohort="c")
    c.run(10, "l", on={"n0": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.run(11, "l", on={"n0": 4}, started=LONG_AGO, runtime=NOW - LONG_AGO + 60)
    c.job(1, "a", gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "cohort_busy"
    whole = NOW + 100 * HOUR - (NOW - LONG_AGO)
    sim = _run(c, [0, 60, HOUR, whole - NOW - 10])
    assert 1 not in sim.started
    sim.step(whole)
    assert sim.started[1] == whole
    assert v.estimated_start >= whole - 60, (v.estimated_start - NOW, v.message)


# -- 5. an estimate of "now" for a gang no node can ever hold -------------------------


def test_a_job_no_node_can_ever_hold_is_not_estimated_to_start_now():
    """Two 8-GPU nodes, each with one unhealthy GPU (7 healthy). a's job 1 needs 1
    worker x 8.

    Was told: `fragmented` (fine) with estimated start NOW. True: no node will ever hold it
    with the snapshot's GPUs (it needs an unhealthy GPU back); the backfill projection
    never places it. The doc: the estimate is "None when the job can never fit";
    test_explain.py's `test_unhealthy_gpus_make_a_job_unestimable` makes it None when
    the count is short, but explain._whole_workers answers `now` when reserve() finds no
    time ("the shadow's count stands"), so the count's "now" is kept.
    """
    c = Cluster().node("n0", unhealthy=1).node("n1", unhealthy=1)
    c.team("a", nominal=64)
    c.job(1, gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "fragmented"
    assert _run(c, [0, 60, 10 * HOUR]).started == {}
    assert v.estimated_start is None, (v.estimated_start - NOW, v.message)


# -- 6. "would start when K of its GPUs are freed" ignoring the cohort ----------------


def test_the_quota_sentence_does_not_promise_a_start_the_cohort_cannot_give():
    """Cohort c: l (nominal 8) uses 6 on a non-preemptible ~99 h job, so 2 of its quota are
    idle; d (nominal 0, borrowing limit 4) borrows 1 with job 10, which ends at +60 s.
    d's job 1 needs 4: 1 + 4 > 4, `quota`.

    Was told: "would start when 1 of its GPUs is freed", estimated +60 s, and its team's
    quota was held from +60 s. True: at +60 s job 10 ends, and job 1 waits `cohort_busy`
    ("cohort c can give it only 2 more now") until l's job ends, ~99 h: the shortfall
    was worked out against the team's limit alone, not what the cohort can lend.
    """
    c = Cluster().nodes_(2)
    c.team("l", nominal=8, cohort="c").team("d", nominal=0, cohort="c", borrowing_limit=4)
    c.run(10, "d", on={"n0": 1}, started=LONG_AGO, runtime=NOW - LONG_AGO + 60)
    c.run(11, "l", on={"n0": 6}, started=LONG_AGO, runtime=100 * HOUR, preemptible=False)
    c.job(1, "d", gpus=4)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "quota"
    assert v.message.endswith(
        "would start when 1 of its GPUs is freed; even then cohort c could give it only 2 "
        "more, so 2 more of the cohort's quota must come free"
    ), v.message
    ends = LONG_AGO + 100 * HOUR  # l's job, and the quota it holds
    sim = Sim(c)
    sim.step(NOW)
    after = sim.step(NOW + 60)  # job 10, d's 1 GPU, has ended
    assert 1 not in sim.started and verdict(after, 1).reason_code == "cohort_busy"
    assert v.estimated_start == ends, (v.estimated_start - NOW, v.message)


# -- 7. a job held by its team's quota hold is estimated at the hold's time -----------


def test_a_job_held_by_its_teams_quota_hold_is_not_estimated_when_the_hold_takes_the_quota():
    """No cohort, a (nominal 6) uses 4: job 10 (2 GPUs) ends at +60 s, job 11 (2 GPUs)
    runs ~99 h. a's job 1 (4 GPUs, 1 h) waits `quota` and holds the team's quota from +60
    s; a's job 2 (2 GPUs, 10 h) is held `reserved` ("it could start now if its max
    runtime were at most 1 min").

    Was told: estimated start +60 s. True: at +60 s job 1 takes the quota (6 of 6) and job 2
    starts at +1 h 1 min, when job 1 ends. The estimate is floored at nothing but the
    shadow's GPU count. Borderline with "it ignores quota", but the same mistake was
    fixed for the two sibling holds (explain._quota_back_at: RESERVED_QUOTA and
    OWN_HOLD, "Floored at the reservation's start alone, a job was told +8 min and
    started after the reserved gang's 2 h"); a plain quota hold (nodes == 0) and a
    cohort hold's held borrowers (COHORT_HOLD) still get that old answer.
    """
    c = Cluster().node("n0")
    c.team("a", nominal=6)
    c.run(10, "a", on={"n0": 2}, started=LONG_AGO, runtime=NOW - LONG_AGO + 60)
    c.run(11, "a", on={"n0": 2}, started=LONG_AGO, runtime=100 * HOUR)
    c.job(1, "a", gpus=4, runtime=HOUR)
    c.job(2, "a", gpus=2, runtime=10 * HOUR)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved" and "needs the team's quota" in v.message
    sim = _run(c, [0, 60, 120, HOUR, HOUR + 60])
    assert sim.started == {1: NOW + 60, 2: NOW + HOUR + 60}
    assert v.estimated_start >= NOW + HOUR + 60 - 30, (v.estimated_start - NOW, v.message)


# -- 8. "N are free but at most M on one node": N and M of two different views -------


def test_the_fragmented_sentence_counts_the_free_gpus_of_one_node_as_it_counts_the_total():
    """n0 has 6 free GPUs (2 busy until +60 s), n1 has 4 free. a's job 1 (1x8) takes the
    flavor's reservation on n0, which holds n0's 6 free GPUs. a's job 2 (1x8, 10 h)
    cannot pass it.

    Was told: "10 are free but at most 4 on one node". True: n0 has 6 free (held for job 1),
    n1 has 4: the total (Pass.shortfall with `extra` = the held GPUs) counts the held
    GPUs, the per-node figure (index.most_free() with them hidden) does not, so the
    sentence's two numbers contradict each other (10 free on two nodes with at most 4
    each). Not an approximation the doc lists.
    """
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=64)
    c.run(10, "a", on={"n0": 2}, started=LONG_AGO, runtime=NOW - LONG_AGO + 60)
    c.run(11, "a", on={"n1": 4}, started=LONG_AGO, runtime=100 * HOUR)
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=8, runtime=10 * HOUR)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "fragmented"
    m = re.search(r"(\d+) are free but at most (\d+) on one node", v.message)
    assert m and m.group(1) == "10", v.message
    assert m.group(2) == "6", v.message

"""What a waiting job is told is true of the snapshot and of what then happens.

Each case is one a review found false (issue 13: "tells every pending job why it waits
and when it should start"; defect 5, the sentence when reclaim cannot help): the
numbers in the sentence, the jobs it names, and the estimated start, checked against
the multi-pass run where a time is promised (tests.scheduler.helpers.Sim).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given

from scheduler import schedule
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, verdict
from tests.scheduler.test_properties import ANY_SNAPSHOT, SETTINGS


def _time(message: str, pattern: str) -> float:
    """Return the instant a message names after `pattern` (ISO 8601, UTC)."""
    text = re.search(pattern, message).group(1)
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def test_lent_quota_comes_back_when_the_borrowers_lend_it_not_when_their_jobs_end():
    """b (nominal 8, lending limit 0) and d (nominal 0) run non-preemptible jobs on a's
    lent 8. b's 8-GPU job ends in an hour, but b then lends none of its own idle quota:
    only the 4 it borrowed come back, and a's quota is whole when d's job ends, in 5 h.
    Counted as every GPU of the ending jobs, the sentence said "at the latest" in an
    hour."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=8, cohort="c", lending_limit=0)
    c.team("d", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 8}, preemptible=False, runtime=HOUR, started=NOW)
    c.run(11, "b", on={"n1": 4}, preemptible=False, runtime=10 * HOUR, started=NOW)
    c.run(12, "d", on={"n1": 4}, preemptible=False, runtime=5 * HOUR, started=NOW)
    c.job(1, "a", gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert "run non-preemptible jobs of team b, d" in v.message
    latest = _time(v.message, r"at the latest (\S+)$")  # rounded up to the minute
    assert Sim(c).start_of(1, 600.0, 40) == NOW + 5 * HOUR
    assert 0 <= latest - (NOW + 5 * HOUR) < 60
    assert v.estimated_start == NOW + 5 * HOUR


def test_a_preemptor_is_estimated_at_its_victims_stop_not_behind_the_job_before_it():
    """a's job 1 holds a's quota for 10 h; a's job 2 preempts a's low-priority job 11 and
    starts when it has stopped, 30 s later. The shadow, which starts no job before the
    one ahead of it, estimated it 10 h away."""
    c = Cluster().node("n0", gpus=8).node("n1", gpus=4)
    c.team("a", nominal=12).team("e", nominal=4)
    c.run(10, "a", on={"n0": 4}, preemptible=False, runtime=10 * HOUR, started=NOW)
    c.run(12, "e", on={"n0": 4}, runtime=10 * HOUR, started=NOW)
    c.run(11, "a", on={"n1": 4}, runtime=10 * HOUR, started=NOW)
    c.job(1, "a", gpus=8, priority=1)
    c.job(2, "a", gpus=4, priority=1)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "waiting_for_preemption"
    assert v.estimated_start == NOW + 30 == Sim(c).start_of(2, 30.0, 3)


def test_a_preemptor_names_its_victims_and_waits_for_the_last_of_them():
    """a's 8-GPU job reclaims b's job 10 on its target node and b's job 12 (grace 600 s)
    on another node, for quota. Counted from the target's nodes alone, it was told
    "2 job(s) it preempted (10) ... by" +30 s, and started at +600 s."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c").team("e", nominal=8)
    c.run(10, "b", on={"n0": 4}, runtime=10 * HOUR)
    c.run(12, "b", on={"n1": 4}, runtime=10 * HOUR, grace=600)
    c.run(13, "e", on={"n1": 4}, runtime=10 * HOUR)
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert sorted(p.job_id for p in plan.preemptions) == [10, 12]
    v = verdict(plan, 1)
    assert "waits for 2 job(s) it preempted (10, 12) to free their GPUs" in v.message
    assert _time(v.message, r"by (\S+?)(?:;|$)") == NOW + 600 == Sim(c).start_of(1, 30.0, 30)


def test_a_job_already_stopping_on_the_target_is_not_called_a_victim():
    """Team e's job 11 was stopping already on a's target node; a preempted b's 10 and
    12, and was told "waits for 2 job(s) it preempted (10, 11)"."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c").team("e", nominal=8)
    c.run(10, "b", on={"n0": 4}, runtime=10 * HOUR)
    c.run(12, "b", on={"n1": 4}, runtime=10 * HOUR)
    c.run(11, "e", on={"n0": 4}, stopping=True, stop_requested=NOW - 5, grace=600)
    c.run(13, "e", on={"n1": 4}, runtime=10 * HOUR)
    c.job(1, "a", gpus=8)
    plan = schedule(c.snapshot())
    assert sorted(p.job_id for p in plan.preemptions if p.preemptor_id == 1) == [10, 12]
    assert "waits for 2 job(s) it preempted (10, 12) and 1 stopping job(s) (11)" in (
        verdict(plan, 1).message
    )


def test_a_job_waiting_for_stopping_quota_names_its_cohorts_stopping_jobs_only():
    """a waits for b's stopping job 10 to give back the cohort's quota (n3 is free). It
    was also told it waited for team e's job 11 (outside the cohort, another node, an
    hour of grace), and estimated an hour away; it starts at the next pass."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c").team("e", nominal=8)
    c.team("d", nominal=8, cohort="c")
    c.run(10, "b", on={"n0": 4, "n2": 4}, stopping=True, stop_requested=NOW - 5)
    c.run(13, "d", on={"n0": 4}, runtime=10 * HOUR)
    c.run(14, "d", on={"n1": 4}, runtime=10 * HOUR)
    c.run(11, "e", on={"n1": 4}, stopping=True, stop_requested=NOW - 5, grace=3600)
    c.run(16, "e", on={"n2": 4}, runtime=10 * HOUR)
    c.node("n3", gpus=8)
    c.job(1, "a", gpus=8)
    v = verdict(schedule(c.snapshot()), 1)
    assert "waits for stopping jobs (10) to free" in v.message
    assert v.estimated_start == NOW + 25
    sim = Sim(c)
    sim.stop_at[10], sim.stop_at[11] = NOW + 25, NOW + 3595
    assert sim.start_of(1, 30.0, 3) == NOW + 30


def test_a_job_its_quota_refuses_anyway_is_not_promised_a_start_by_a_hold():
    """a uses 12 of 16 and job 1 holds a's quota from +2 h. Job 2 (6 GPUs) was told
    `reserved`: "it could start now if its max runtime were at most 2 h"; shorter, it is
    told `quota` (12 + 6 > 16). Now it is told that its quota refuses it too, long or
    short. Likewise behind a cohort hold, a borrower the cohort cannot take."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=16)
    c.run(10, "a", on={"n0": 8}, runtime=2 * HOUR, started=NOW)
    c.run(11, "a", on={"n1": 4}, runtime=3 * HOUR, started=NOW)
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=6, runtime=4 * HOUR)
    for runtime in (4 * HOUR, HOUR):
        pending = (c.pending[0], replace(c.pending[1], max_runtime=runtime))
        v = verdict(schedule(replace(c.snapshot(), pending=pending)), 2)
        assert "could start now if" not in v.message, v.message
        if v.reason_code == "reserved":
            assert "so it could not start now even if it ended sooner" in v.message

    c = Cluster().nodes_(3)
    c.team("a", nominal=0, cohort="c").team("b", nominal=0, cohort="c")
    c.team("l", nominal=8, cohort="c")
    c.run(10, "l", on={"n0": 4}, runtime=2 * HOUR, started=NOW)
    c.run(11, "b", on={"n1": 4}, runtime=3 * HOUR, started=NOW)
    c.job(1, "a", gpus=8)
    c.job(2, "b", gpus=6, runtime=4 * HOUR)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved", v.message
    assert "cohort c can give it only 0 more now, so it could not start now" in v.message


def test_a_team_is_not_said_to_use_a_gpu_twice():
    """No cohort: a's job 1 preempts a's job 10 (8 GPUs) by priority. Job 2 was told
    "team a uses 16 (8 of them for its jobs waiting for preemption) of 8 nominal": the
    8 GPUs job 10 frees are the 8 charged to job 1."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 8}, runtime=10 * HOUR, priority=0)
    c.job(1, "a", gpus=8, priority=5)
    c.job(2, "a", gpus=1, priority=1)
    msg = verdict(schedule(c.snapshot()), 2).message
    assert "team a uses 8 (8 of them for its jobs waiting for preemption) of 8 nominal" in msg


def test_a_teams_usage_and_its_preemptors_part_are_of_one_moment():
    """d's job 1 was told "team d uses 0 (4 of them for its jobs waiting for preemption)":
    the 0 when job 1 was considered, the 4 charged later in the pass to job 2."""
    c = Cluster().node("n0", gpus=8).node("n1", gpus=4)
    c.team("d", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 4}, preemptible=False, runtime=HOUR, started=NOW)
    c.run(11, "b", on={"n1": 4}, runtime=10 * HOUR, started=NOW)
    c.job(1, "d", gpus=8)
    c.job(2, "d", gpus=4)
    msg = verdict(schedule(c.snapshot()), 1).message
    assert "team d uses 0 of 8 nominal" in msg, msg


def test_an_array_task_is_told_which_tasks_take_its_arrays_slots():
    """Limit %2, no task running, tasks 1 and 2 wait for quota: task 3 was told "array 7
    already has 2 tasks running"."""
    c = Cluster().nodes_(1)
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 8}, runtime=2 * HOUR, started=NOW)
    for i in (1, 2, 3):
        c.job(i, "a", gpus=4)
    c.pending = [replace(j, array_id=7, array_limit=2) for j in c.pending]
    msg = verdict(schedule(c.snapshot()), 3).message
    assert "array 7 has 0 tasks running and 2 ahead of it in the queue" in msg, msg


def test_a_held_job_refused_by_quota_is_told_of_its_teams_stopping_jobs():
    """a's job 2 (2 GPUs) is held by job 1's quota hold, and a's quota refuses it now
    because a's stopping job still holds 2: told only "a uses 6 of 8 ... could not start
    now", it read as if 6 + 2 fitted 8."""
    c = Cluster().node("n0", gpus=16)
    c.team("a", nominal=8)
    c.run(10, "a", on={"n0": 2}, stopping=True, stop_requested=NOW - 5, runtime=100 * HOUR)
    c.run(11, "a", on={"n0": 6}, runtime=HOUR)
    c.job(1, "a", gpus=4, runtime=100 * HOUR)
    c.job(2, "a", gpus=2, runtime=100 * HOUR)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved"
    assert "team a uses 6 of 8 nominal (its stopping jobs hold 2 more until they stop)" in (
        v.message
    )


def test_a_preemptor_still_names_its_quota_victim_at_the_next_pass():
    """a's 8-GPU job preempts b's job 11 on its target n1 (30 s of grace) and b's job 10
    on n0 for quota (600 s). At the next pass, 10 s later, it reserved again and said
    "waits for stopping jobs (11) ... by" +30 s, estimated then; job 10 stops at +600."""
    c = Cluster().node("n0").node("n1")
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c").team("x", nominal=4)
    c.run(90, "x", on={"n0": 4}, preemptible=False, runtime=100 * HOUR)
    c.run(10, "b", on={"n0": 4}, runtime=100 * HOUR, grace=600.0)
    c.run(11, "b", on={"n1": 4}, runtime=100 * HOUR, grace=30.0)
    c.job(1, "a", gpus=8, runtime=100 * HOUR)
    sim = Sim(c)
    first = sim.step(NOW)
    assert sorted(p.job_id for p in first.preemptions) == [10, 11]
    v = verdict(sim.step(NOW + 10), 1)
    assert v.reason_code == "waiting_for_preemption"
    assert "waits for 2 job(s) it preempted (11, 10)" in v.message, v.message
    assert v.estimated_start == NOW + 600


def test_the_lent_sentence_counts_the_teams_stopping_job_as_gone():
    """a (nominal 8) has a 4-GPU job stopping; b (nominal 0) runs the other 4 of a's
    quota on a non-preemptible job. a's 8-GPU job is within nominal once its job has
    stopped, and reclaim cannot free b's GPUs; counted with the stopping job, a looked
    at its nominal quota and the sentence said only "would start when 8 GPUs of the
    cohort are freed" (a review's case; with b on all 8 the sentence was there)."""
    c = Cluster().nodes_(3)
    c.team("a", nominal=8, cohort="c").team("b", nominal=0, cohort="c")
    c.run(10, "a", on={"n0": 4}, stopping=True, stop_requested=NOW - 5, runtime=100 * HOUR)
    c.run(11, "b", on={"n1": 4}, preemptible=False, runtime=2 * HOUR, started=NOW)
    c.job(1, "a", gpus=8, runtime=100 * HOUR)
    v = verdict(schedule(c.snapshot()), 1)
    assert v.reason_code == "cohort_busy"
    assert "the 4 GPUs lent from team a's quota run non-preemptible jobs of team b" in v.message
    latest = _time(v.message, r"at the latest (\S+)$")  # b's job ends, rounded up
    assert 0 <= latest - (NOW + 2 * HOUR) < 60


def _victims_on_a_cordoned_node(on_n9: int):
    """a (nominal 2, d lends 1) uses 3 GPUs; its priority-1 job 1 preempts its two newest
    jobs for quota, `on_n9` of them on n9, which is cordoned (out of the snapshot) from
    the first pass on. Returns job 1's verdict at the next pass, both still stopping."""
    c = Cluster().node("n0", gpus=4).node("n9", gpus=4)
    c.team("a", nominal=2, cohort="c").team("d", nominal=1, cohort="c")
    on = ["n0"] * (3 - on_n9) + ["n9"] * on_n9
    for i, node in enumerate(on):
        c.run(10 + i, "a", on={node: 1}, started=NOW - 300 + 100 * i, runtime=100 * HOUR)
    c.job(1, "a", gpus=1, priority=1, runtime=100 * HOUR)
    sim = Sim(c)
    nodes = sim._nodes
    sim._nodes = lambda: tuple(n for n in nodes() if n.name != "n9")
    assert sorted(p.job_id for p in sim.step(NOW).preemptions) == [11, 12]
    return verdict(sim.step(NOW + 10), 1)


def test_a_preemptor_names_its_victims_on_a_cordoned_node():
    """Its earlier victims were looked for on the schedulable nodes only: one on the
    cordoned node was left out ("waits for 1 job(s) it preempted (11)"), and with both
    there it was told "by now" and estimated at the next pass, 20 s early."""
    v = _victims_on_a_cordoned_node(1)
    assert "waits for 2 job(s) it preempted (11, 12)" in v.message, v.message
    v = _victims_on_a_cordoned_node(2)
    assert "waits for 2 job(s) it preempted (11, 12)" in v.message, v.message
    assert "by now" not in v.message
    assert v.estimated_start == NOW + 30


_COULD_START = re.compile(
    r"could start now if its max runtime were at most ((?:\d+ (?:d|h|min|s) ?)+)"
)
_UNIT = {"d": 86400, "h": 3600, "min": 60, "s": 1}


def _seconds(words: str) -> float:
    """Return the seconds of a duration in words ('3 h 20 min'), as timewords wrote it."""
    parts = words.split()
    return float(sum(int(n) * _UNIT[u] for n, u in zip(parts[::2], parts[1::2], strict=True)))


@SETTINGS
@given(ANY_SNAPSHOT)
def test_a_job_told_it_could_start_now_if_shorter_does_start_when_it_is(snap):
    """Every "it could start now if its max runtime were at most D" is true of the
    snapshot: with that max runtime the job is admitted in the same pass. A review
    found it said of jobs behind a quota or cohort hold that no free GPU could hold,
    and of jobs their own quota refused. Working it out changes no plan: the plan with
    explain off is the same."""
    snap = replace(snap, config=replace(snap.config, explain=True))
    plan = schedule(snap)
    quiet = schedule(replace(snap, config=replace(snap.config, explain=False)))
    assert (quiet.admissions, quiet.preemptions) == (plan.admissions, plan.preemptions)
    assert quiet.reservations == plan.reservations
    assert [(v.job_id, v.reason_code) for v in quiet.verdicts] == [
        (v.job_id, v.reason_code) for v in plan.verdicts
    ]
    for v in plan.verdicts:
        m = _COULD_START.search(v.message)
        if m is None:
            continue
        runtime = max(1.0, _seconds(m.group(1)))
        pending = tuple(
            replace(j, max_runtime=runtime) if j.id == v.job_id else j for j in snap.pending
        )
        again = schedule(replace(snap, pending=pending))
        started = {a.job_id for a in again.admissions}
        assert v.job_id in started, (v.message, verdict(again, v.job_id).message)


def test_a_second_preemptor_waits_for_the_earlier_victims_quota_it_counts_on():
    """b borrows all 6 of the cohort's quota. a's job 1 reclaims 2 by preempting b's job
    10 (4 GPUs, 90 s of grace); d's job 2 needs 4: job 10's other 2 and 2 more, b's job 11
    (30 s). It counted on job 10's quota, but named only its own victim and was told it
    would start in 30 s; it started at 90 s, when job 10 had stopped."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=2, cohort="c").team("d", nominal=4, cohort="c")
    c.team("b", nominal=0, cohort="c")
    c.run(10, "b", on={"n0": 4}, grace=90, started=NOW - 60, runtime=10 * HOUR)
    c.run(11, "b", on={"n1": 2}, grace=30, started=NOW - 600, runtime=10 * HOUR)
    c.job(1, "a", gpus=2)
    c.job(2, "d", gpus=4)
    plan = schedule(c.snapshot())
    assert [(x.job_id, x.preemptor_id) for x in plan.preemptions] == [(10, 1), (11, 2)]
    v = verdict(plan, 2)
    assert "waits for 1 job(s) it preempted (11) and 1 stopping job(s) (10)" in v.message, v.message
    assert _time(v.message, r"by (\S+?)(?:;|$)") == NOW + 90 == Sim(c).start_of(2, 30.0, 10)
    assert v.estimated_start == NOW + 90


def test_working_out_a_sentence_fills_no_cache_a_later_decision_reads():
    """Backfill.start_by (explanations only) asked d's held job 2 about its quota, which
    filled Pass.reclaimable's cache for team w before x's reclaim stopped b's job 10;
    the stale figure then refused e's borrower (`_takes_usable`) that the same pass
    without explanations admitted (a review's case)."""
    c = Cluster().nodes_(4)
    c.team("w", nominal=16, cohort="c", decayed={"h100": 1e8})
    c.team("x", nominal=8, cohort="c", decayed={"h100": 1e6})
    c.team("b", nominal=6, cohort="c").team("l", nominal=16, cohort="c")
    c.team("d", nominal=0, cohort="c").team("e", nominal=0, cohort="c", decayed={"h100": 5e7})
    long = 100 * HOUR
    c.run(10, "b", on={"n0": 2}, started=NOW - HOUR, runtime=long)
    c.run(11, "b", on={"n1": 6}, started=NOW - HOUR, runtime=long)
    c.run(12, "l", on={"n2": 4}, started=NOW - HOUR, runtime=3 * HOUR)
    c.run(13, "l", on={"n3": 4}, started=NOW - HOUR, runtime=long)
    c.job(1, "d", workers=4, gpus=8, runtime=long)
    c.job(2, "d", gpus=4, runtime=long)
    c.job(3, "x", workers=4, gpus=8, priority=1)
    c.job(4, "x", gpus=8, runtime=long)
    c.job(5, "e", gpus=2, runtime=600)
    c.job(6, "w", workers=3, gpus=8, priority=1)
    c.job(7, "w", gpus=8, runtime=long)
    on, off = schedule(c.snapshot(explain=True)), schedule(c.snapshot(explain=False))
    assert [a.job_id for a in off.admissions] == [5]
    assert (on.admissions, on.preemptions) == (off.admissions, off.preemptions)


def test_a_hold_due_now_is_named_as_the_reason_not_the_free_gpus():
    """a's job 10 is past its max runtime, so job 1's quota hold starts now: job 2 (2
    GPUs, n1 has 8 free) cannot pass it however short. It was told "nor do the free GPUs
    it may use hold it now"; they do."""
    c = Cluster().nodes_(2)
    c.team("a", nominal=12)
    c.run(10, "a", on={"n0": 8}, started=NOW - 2 * HOUR, runtime=HOUR)
    c.job(1, "a", gpus=8)
    c.job(2, "a", gpus=2)
    v = verdict(schedule(c.snapshot()), 2)
    assert v.reason_code == "reserved"
    assert "free GPUs" not in v.message
    assert "overdue, due to end now, so it could not start now even if it ended sooner" in v.message

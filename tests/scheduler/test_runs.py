"""Random runs over many passes: jobs arrive, run, end and are reclaimed (issue 13).

The single-pass properties (test_properties.py) and the two-pass reclaim properties
(test_reclaim*.py) start from one snapshot. Here a random cluster of two flavors,
with borrowing and lending limits and a team outside the cohort, is driven for a
dozen passes 30 s apart while jobs arrive, end and are requeued, every plan applied
(tests.scheduler.helpers.Sim), and at every pass:

- no GPU and no quota is over-committed (per team: nominal + borrowing limit; per
  cohort and flavor: nothing borrowed that nobody lends, lending limits included);
- victims are preemptible, not already stopping, and not admitted by the same plan
  (a pass may reclaim a borrower's job that sits on its preemptor's target node and
  lend the quota left over to another job of that borrower elsewhere: that is not
  lending and reclaiming the same quota, so it is not checked here);
- a preemptor that is still within its team's nominal quota when its victims have
  stopped is admitted then, and no such preemptor preempts in two passes (one reclaim
  costs one round of victims, whatever arrived meanwhile);
- a lone within-nominal job that reclaim could place (`reclaim_could_place`) starts
  by the pass after next: one grace period.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from scheduler import Quota, Team
from tests.scheduler.helpers import HOUR, NOW, Cluster, Sim, admitted, examples, make_job, preempted

FLAVORS = ("h100", "a100")
STEP = 30.0  # the grace period (RunningJob's default); passes run every STEP or more often
# Victims stop after these fractions of their grace period, in turn (a victim's workers
# exit when it has checkpointed, often well before): () is the whole grace period.
EARLY = st.sampled_from([(), (), (0.0,), (0.5, 1.0), (0.0, 0.3, 1.0)])
GRACE = 30.0
PASSES = 12


@st.composite
def runs(draw):
    every = draw(st.sampled_from([STEP, STEP, 15.0, 10.0]))  # seconds between passes
    c = Cluster()
    per_block = draw(st.integers(1, 3))
    for i in range(draw(st.integers(2, 6))):
        b = i // per_block
        c.node(
            f"n{i}",
            gpus=draw(st.sampled_from([4, 8, 8])),
            flavor=draw(st.sampled_from(["h100", "h100", "a100"])),
            block=f"b{b}",
            rack=f"r{b}",
        )
    total = Counter()
    for n in c.nodes.values():
        total[n["flavor"]] += n["gpus"]
    names = ["a", "b", "d", "e"]  # e: outside the cohort
    teams, left = [], dict(total)
    for name in names:
        quotas = {}
        for f in FLAVORS:
            nominal = draw(st.integers(0, left.get(f, 0)))
            left[f] = left.get(f, 0) - nominal  # nominal quotas add up to no more than the GPUs
            limit = st.none() | st.integers(0, 8)
            quotas[f] = Quota(nominal, draw(limit), draw(limit))
        teams.append(Team(name, 1.0, None if name == "e" else "c", quotas, {}))
    c.teams = teams
    arrivals = []
    ids = iter(range(1, 10_000))
    if draw(st.booleans()):  # a flood: one team fills a flavor with small long jobs
        f = draw(st.sampled_from([f for f in FLAVORS if total[f]]))
        team = draw(st.sampled_from(["a", "b", "d"]))
        left = total[f] - draw(st.integers(0, 2))
        while left > 0:
            k = min(left, draw(st.sampled_from([1, 1, 2, 4])))
            left -= k
            arrivals.append(
                (0, make_job(next(ids), team, gpus=k, submitted=NOW, runtime=100 * HOUR, flavor=f))
            )
    for step in range(PASSES):
        for _ in range(draw(st.integers(0, 3) if step else st.integers(1, 6))):
            workers = draw(st.integers(1, 2))
            arrivals.append(
                (
                    step,
                    make_job(
                        next(ids),
                        draw(st.sampled_from(names)),
                        workers=workers,
                        gpus=draw(st.sampled_from([1, 2, 4, 8] if workers == 1 else [2, 4, 8])),
                        priority=draw(st.sampled_from([0, 0, 1, 2])),
                        queue=draw(st.sampled_from(["q", "q", "r"])),
                        submitted=NOW + step * every,
                        runtime=draw(st.sampled_from([15.0, 45.0, 200.0, 100 * HOUR])),
                        flavor=draw(st.sampled_from(FLAVORS)),
                        preemptible=draw(st.sampled_from([True, True, True, False])),
                    ),
                )
            )
    config = {
        "backfill": draw(st.booleans()),
        "backfill_reservations": draw(st.sampled_from([1, 1, 3])),
        "reclaim_backoff": draw(st.booleans()),
        "max_wait": draw(st.sampled_from([0.0, 0.0, 120.0])),
        "explain": draw(st.booleans()),
    }
    backoff = draw(st.sampled_from([(0.0, 0.0), (0.0, 0.0), (60.0, 3600.0)]))
    return c, arrivals, config, backoff, every, draw(EARLY)


def usage_of(running) -> Counter:
    used = Counter()
    for r in running:
        used[(r.team, r.flavor)] += r.gpus
    return used


def quotas_hold(teams, used) -> bool:
    try:
        check_quotas(teams, used)
    except AssertionError:
        return False
    return True


def check_quotas(teams, used):
    for t in teams:
        for f, q in t.quotas.items():
            u = used[(t.name, f)]
            if t.cohort is None:
                assert u <= q.nominal, (t.name, f, u)
            elif q.borrowing_limit is not None:
                assert u <= q.nominal + q.borrowing_limit, (t.name, f, u)
    for f in FLAVORS:
        borrowed = lent = 0
        for t in teams:
            if t.cohort is None:
                continue
            q, u = t.quotas.get(f, Quota(0)), used[(t.name, f)]
            lend = q.nominal if q.lending_limit is None else min(q.nominal, q.lending_limit)
            borrowed += max(0, u - q.nominal)
            lent += min(max(0, q.nominal - u), lend)
        assert borrowed <= lent, (f, borrowed, lent, used)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(runs())
def test_random_runs_keep_quotas_and_reclaim_in_one_round(run):
    c, arrivals, config, backoff, every, early = run
    note(
        describe(c, arrivals, config, backoff) + f"\npasses every {every:g} s, early stops {early}"
    )
    waits = math.ceil(GRACE / every)  # passes from a preemption to its victims' stop
    sim = Sim(c, backoff=backoff, early=early, preemption=True, **config)
    nominal = {(t.name, f): q.nominal for t in c.teams for f, q in t.quotas.items()}
    claims: dict[int, int] = {}  # preemptor -> the pass by which it must be admitted
    lone: dict[int, int] = {}  # a lone within-nominal job -> the pass by which it starts
    for step in range(PASSES):
        now = NOW + step * every
        for when, job in arrivals:
            if when == step:
                sim.submit(job)
        sim._finish(now)  # who runs when the pass looks (step() finds nothing more to end)
        used = usage_of(sim.running.values())
        settled = usage_of(r for r in sim.running.values() if not r.stopping)
        pending = dict(sim.pending)
        before = dict(sim.running)
        for job_id in [j for j in lone if j in pending]:  # still alone in its flavor?
            f = pending[job_id].flavor
            if any(
                o.flavor == f and o.id != job_id and o.eligible_at <= now for o in pending.values()
            ):
                del lone[job_id]  # another job came: reclaim_could_place's premise is gone
        for job in reclaim_could_place(sim, c.teams, used, nominal, now):
            lone.setdefault(job.id, step + waits)
        plan = sim.step(now)
        note(
            f"pass {step}: admit {admitted(plan)} preempt {[(p.job_id, p.preemptor_id) for p in plan.preemptions]}"
        )
        assert not set(preempted(plan)) & set(admitted(plan)), "admitted and preempted at once"
        check_quotas(c.teams, usage_of(sim.running.values()))
        for p in plan.preemptions:
            victim = before[p.job_id]
            assert victim.preemptible and not victim.stopping
        check_messages(plan, pending, before, nominal)
        if config["explain"]:  # else every verdict has its reason's fixed text
            check_waits_name_stopping_jobs(plan, sim.running, now)
        # A claim falls due at the first pass after its victims' grace period: if its
        # team is still within its nominal quota with it (its stopping jobs left out),
        # it is admitted then, and until then it preempts nothing more.
        for job_id, due in list(claims.items()):
            job = pending.get(job_id)
            if job is None:
                del claims[job_id]  # admitted meanwhile
                continue
            key = (job.team, job.flavor)
            if settled[key] + job.gpus > nominal[key]:
                continue  # no claim at this pass (docs/scheduling.md, "Known limits")
            again = [p.job_id for p in plan.preemptions if p.preemptor_id == job_id]
            assert again == [], f"preemptor {job_id} preempted again at pass {step}"
            if due <= step:
                del claims[job_id]
                assert job_id in admitted(plan), (
                    f"preemptor {job_id} not admitted once its victims stopped (pass {step})"
                )
        for p in plan.preemptions:
            claims.setdefault(p.preemptor_id, step + waits)
        late = [j for j, due in lone.items() if due == step and j not in sim.started]
        assert late == [], f"reclaim could place {late}, not started by pass {step}"


def reclaim_could_place(sim, teams, used, nominal, now) -> list:
    """Return the pending jobs that preemption alone must start within two passes.

    Such a job is the only eligible pending job of its flavor (nothing competes for
    the GPUs, no other job's reservation holds any), of a team in the cohort, no job
    of the flavor is stopping, and it is within its team's nominal quota once its
    team's preemptible jobs of its queue with a lower priority are gone (priority
    victims). Its gang fits on the free GPUs plus those victims' plus, if its team is
    below its nominal quota, those of the preemptible jobs of teams whose preemptible
    GPUs of the flavor are all borrowed (every one of them may be a victim: its team
    still borrows before each), whole workers per node inside one block; and with all
    those jobs gone it fits the cohort's quota (the borrowers' non-preemptible jobs
    may hold quota it lent: then reclaim cannot give it all back, and its reason says
    so)."""
    cohort = {t.name for t in teams if t.cohort is not None}
    eligible = [j for j in sim.pending.values() if j.eligible_at <= now]
    out = []
    for job in eligible:
        f, key = job.flavor, (job.team, job.flavor)
        if sum(j.flavor == f for j in eligible) != 1 or job.team not in cohort:
            continue
        runs = [r for r in sim.running.values() if r.flavor == f]
        if any(r.stopping for r in runs):
            continue
        lower = [
            r
            for r in runs
            if r.team == job.team
            and r.queue == job.queue
            and r.priority < job.priority
            and r.preemptible
        ]
        if used[key] - sum(r.gpus for r in lower) + job.gpus > nominal[key]:
            continue
        victims = list(lower)
        if used[key] < nominal[key]:
            for t in cohort - {job.team}:
                mine = [r for r in runs if r.team == t and r.preemptible]
                if mine and sum(r.gpus for r in mine) <= used[(t, f)] - nominal[(t, f)]:
                    victims += mine
        freeable, after = Counter(), Counter(used)
        for r in victims:
            after[(r.team, f)] -= r.gpus
            for w in r.placement:
                freeable[w.node] += len(w.gpus)
        after[key] += job.gpus
        if not quotas_hold(teams, after):
            continue  # even with all of them reclaimed, the cohort cannot lend it the rest
        blocks = Counter()
        for name, n in sim.nodes.items():
            if n["flavor"] == f:
                blocks[n["block"]] += (len(n["free"]) + freeable[name]) // job.gpus_per_worker
        if freeable and max(blocks.values(), default=0) >= job.workers:
            out.append(job)
    return out


@st.composite
def floods(draw):
    """Team b, with no quota, or a, fills the cluster with long 1- to 4-GPU jobs and
    2-worker gangs (some not preemptible) at pass 0; then a and d submit one job or gang
    at a time, some passes apart, some of a's with a higher priority, some followed by a
    short job of their team."""
    every = draw(st.sampled_from([STEP, STEP, 15.0]))
    c = Cluster()
    per_block = draw(st.integers(1, 3))
    for i in range(draw(st.integers(2, 6))):
        b = i // per_block
        c.node(f"n{i}", gpus=draw(st.sampled_from([4, 8, 8])), block=f"b{b}", rack=f"r{b}")
    total = sum(n["gpus"] for n in c.nodes.values())
    nominal_a = draw(st.integers(1, total))
    nominal_d = draw(st.integers(0, total - nominal_a))
    c.team("a", nominal=nominal_a, cohort="c").team("d", nominal=nominal_d, cohort="c")
    c.team("b", nominal=0, cohort="c")
    ids = iter(range(1, 10_000))
    flood = draw(st.sampled_from(["b", "b", "a"]))
    arrivals, left = [], total - draw(st.integers(0, 2))
    while left > 0:
        workers, k = draw(st.sampled_from([(1, 1), (1, 1), (1, 2), (1, 4), (2, 1), (2, 2)]))
        workers, k = (workers, k) if workers * k <= left else (1, 1)
        left -= workers * k
        job = make_job(next(ids), flood, workers=workers, gpus=k, submitted=NOW, runtime=100 * HOUR)
        arrivals.append((0, replace(job, preemptible=draw(st.sampled_from([True] * 5 + [False])))))
    step = 1
    while step < PASSES - 2:
        team = draw(st.sampled_from(["a", "a", "d"]))
        workers = draw(st.integers(1, 3))
        per_worker = draw(st.sampled_from([1, 2, 4, 8]))
        arrivals.append(
            (
                step,
                make_job(
                    next(ids),
                    team,
                    workers=workers,
                    gpus=per_worker,
                    submitted=NOW + step * every,
                    runtime=draw(st.sampled_from([45.0, 100 * HOUR])),
                    priority=draw(st.sampled_from([0, 0, 1])),
                ),
            )
        )
        if draw(st.integers(0, 3)) == 0:  # a short job of the team behind it: held by the
            # claim of a preemptor of its team (Pass.claim_wait), it must not cost it the claim
            short = make_job(
                next(ids),
                team,
                gpus=draw(st.sampled_from([1, 2, 4])),
                submitted=NOW + step * every,
                runtime=draw(st.sampled_from([10.0, 20.0])),
            )
            arrivals.append((step, short))
        step += draw(st.integers(1, 4))
    config = {"backfill": draw(st.booleans()), "explain": draw(st.booleans())}
    config |= {"backfill_reservations": 1, "reclaim_backoff": False, "max_wait": 0.0}
    return c, arrivals, config, (0.0, 0.0), every, draw(EARLY)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(floods())
def test_a_flood_of_small_borrowers_is_reclaimed_in_one_grace_period(run):
    """The same checks on runs built for reclaim under fragmentation: one team's small
    jobs everywhere, then within-nominal jobs and gangs of the others, one at a time."""
    test_random_runs_keep_quotas_and_reclaim_in_one_round.hypothesis.inner_test(run)


RECLAIM = re.compile(
    r"uses (\d+) of (\d+) nominal, while team (\w+) borrows \((\d+) used of (\d+) nominal\)"
)
TEAM_USES = re.compile(r"team (\w+) uses (\d+) of (\d+) nominal")
LENT = re.compile(
    r"the (\d+) GPUs? lent from team \w+'s quota run non-preemptible jobs of team ([\w, ]+), so"
)


def check_messages(plan, pending, before, nominal):
    """What the messages say of usage is true, each GPU counted once.

    A reclaim's message: the preemptor's team, with the job and without its own jobs
    the preemptor also preempts (by priority), within its nominal quota; the victim's
    team above its own. A verdict's "team t uses U of N nominal": N is the
    quota, and U no more than the team holds after the plan plus the GPUs charged to
    its preemptors waiting for victims (never "12 of 8" for 8 held)."""
    own = Counter()  # preemptor -> GPUs of its own team's jobs it preempts
    for p in plan.preemptions:
        if before[p.job_id].team == pending[p.preemptor_id].team:
            own[p.preemptor_id] += before[p.job_id].gpus
    for p in plan.preemptions:
        if p.reason_code != "reclaim":
            continue
        m = RECLAIM.search(p.message)
        assert m, p.message
        used, quota, victim_team, v_used, v_quota = m.groups()
        job = pending[p.preemptor_id]
        after = int(used) - own[job.id] + job.gpus
        assert after <= int(quota) == nominal[(job.team, job.flavor)], p.message
        assert int(v_used) > int(v_quota) == nominal[(victim_team, job.flavor)], p.message
        assert victim_team == before[p.job_id].team
    held = Counter()
    for r in before.values():
        held[(r.team, r.flavor)] += r.gpus
    for a in plan.admissions:
        job = pending[a.job_id]
        held[(job.team, job.flavor)] += job.gpus
    for v in plan.verdicts:
        if v.reason_code == "waiting_for_preemption":
            job = pending[v.job_id]
            held[(job.team, job.flavor)] += job.gpus
    for v in plan.verdicts:
        job = pending[v.job_id]
        m = LENT.search(v.message)
        if m:  # "reclaim cannot help": the named teams' non-preemptible GPUs beyond nominal
            fixed = Counter()
            for r in before.values():
                if r.flavor == job.flavor and not r.preemptible and not r.stopping:
                    fixed[r.team] += r.gpus
            beyond = sum(
                max(0, fixed[t] - nominal[(t, job.flavor)]) for t in m.group(2).split(", ")
            )
            assert 0 < int(m.group(1)) <= beyond, (v.message, fixed)
        for team, used, quota in TEAM_USES.findall(v.message):
            if team != job.team:
                continue
            key = (team, job.flavor)
            assert int(quota) == nominal[key], v.message
            assert 0 <= int(used) <= held[key], (v.message, held[key])


WAITS = re.compile(
    r"waits for (?:(\d+) job\(s\) it preempted \(([\d, .]+)\))?(?: and )?"
    r"(?:(?:\d+ stopping job\(s\)|stopping jobs) \(([\d, .]+)\))?(?: and )?"
    r"(?:\d+ job\(s\) that reach their max run time \(([\d, .]+)\))? to free"
)


def _ids(text):
    return [int(i) for i in (text or "").replace(", ...", "").split(", ") if i]


def check_waits_name_stopping_jobs(plan, running, now=None, grace=30.0):
    """A job told it waits for jobs to stop names jobs that are stopping: "N job(s) it
    preempted" are its victims still stopping (this plan's and earlier ones'), and the
    others were stopping already and are not its victims; the jobs "that reach their
    max run time" run and do so within a grace period of `now`."""
    by: dict[int, set] = {}
    for r in running.values():
        if r.stopping and r.preempted_by is not None:
            by.setdefault(r.preempted_by, set()).add(r.id)
    for p in plan.preemptions:
        by.setdefault(p.preemptor_id, set()).add(p.job_id)
    for v in plan.verdicts:
        if v.reason_code != "waiting_for_preemption":
            continue
        m = WAITS.search(v.message)
        assert m and (m.group(1) or m.group(3) or m.group(4)), v.message
        new, victims, others, ending = m.groups()
        for i in _ids(ending):
            r = running[i]
            assert not r.stopping and i not in by.get(v.job_id, ()), v.message
            if now is not None:
                assert now <= r.started_at + r.max_runtime <= now + grace, v.message
        mine = {i for i in by.get(v.job_id, set()) if running[i].stopping}
        assert int(new or 0) == len(mine), (v.message, mine)
        if len(mine) <= 5:
            assert set(_ids(victims)) == mine, (v.message, mine)
        for i in _ids(others):
            assert running[i].stopping and i not in mine, v.message


def describe(c, arrivals, config, backoff) -> str:
    """The scenario, readable: hypothesis prints it with a failing case."""
    lines = [f"config={config} requeue backoff={backoff}"]
    for name, n in c.nodes.items():
        lines.append(f"node {name} {n['flavor']} {n['gpus']} {n['block']}")
    for t in c.teams:
        lines.append(f"team {t.name} cohort={t.cohort} {dict(t.quotas)}")
    for step, j in arrivals:
        lines.append(
            f"pass {step}: job {j.id} {j.team} {j.workers}x{j.gpus_per_worker} {j.flavor}"
            f" queue={j.queue} prio={j.priority} runtime={j.max_runtime:g}"
            f" preemptible={j.preemptible}"
        )
    return "\n".join(lines)


def test_a_reserved_target_is_kept_across_passes():
    """Passes every 15 s, grace 30 s. Found by the random runs: a's 2x4 gang job 27
    preempted b's job 4 and a's jobs 24 and 25 to free n2 and n3, and b's job 7 then
    reclaimed d's job 19 for quota; when job 27's victims had stopped, job 7 (its victim
    still stopping) reserved again first by best fit and picked n3 beside its victim, so
    job 27 no longer fitted in its block and preempted a's job 23 as well. Each keeps
    the target its last pass stored (PendingJob.reserved_on, Plan.reservations; the
    direct table is test_reclaim_adversarial.py's
    test_a_preemptor_keeps_its_target_and_falls_back_when_it_is_gone). With victims
    chosen for the least work lost (tests/scheduler/test_victim_sets.py) the same
    arrivals now make job 27 take b's and d's 1-GPU jobs instead; what must hold is the
    same: it starts, and every preemptor takes one round of victims."""
    c = Cluster()
    for name, flavor, gpus, block in [
        ("n0", "h100", 4, "b0"),
        ("n1", "a100", 4, "b0"),
        ("n2", "h100", 4, "b1"),
        ("n3", "h100", 8, "b1"),
        ("n4", "h100", 8, "b2"),
        ("n5", "h100", 8, "b2"),
    ]:
        c.node(name, gpus=gpus, flavor=flavor, block=block, rack=block.replace("b", "r"))
    zero = Quota(0)
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(13), "a100": zero}, {}),
        Team("b", 1.0, "c", {"h100": Quota(7, 2, None), "a100": zero}, {}),
        Team("d", 1.0, "c", {"h100": zero, "a100": zero}, {}),
        Team("e", 1.0, None, {"h100": Quota(8), "a100": zero}, {}),
    ]
    gpus_b = [1, 1, 1, 4, 1, 1, 2, 1, 1, 1, 2, 4, 4, 4, 4]
    arrivals = [(0, i, "b", 1, g, 100 * HOUR) for i, g in enumerate(gpus_b, start=1)]
    arrivals += [(0, 16, "a", 1, 1, 45, "a100"), (0, 17, "a", 1, 1, 45)]
    arrivals += [(0, 18, "a", 1, 1, 200), (0, 19, "d", 1, 1, 200), (2, 20, "a", 1, 1, 45)]
    arrivals += [(3, 21, "e", 1, 8, 200), (3, 22, "a", 1, 1, 45), (4, 23, "a", 2, 2, 200)]
    arrivals += [(5, 24, "a", 1, 1, 45), (5, 25, "a", 1, 1, 45), (6, 26, "a", 1, 1, 45)]
    arrivals += [(6, 27, "a", 2, 4, 45, "h100", 1)]
    sim = Sim(c, preemption=True, backfill=False)
    rounds: dict[int, set[int]] = {}  # preemptor -> the passes it preempted in
    for step, plan in scripted(sim, arrivals, 15.0, 10):
        for p in plan.preemptions:
            rounds.setdefault(p.preemptor_id, set()).add(step)
    assert 27 in sim.started and 27 in rounds
    assert all(len(steps) == 1 for steps in rounds.values()), rounds


def test_kept_claims_are_honoured_in_queue_order():
    """Found by the random runs at 20x (make fuzz-scheduler). Cohort c: a (nominal 1), d
    (3), b (0); b's flood borrows all 4 GPUs of quota as 1-GPU jobs on n0. a's job 16
    reclaims one; d's job 17 (1 GPU) reclaims job 3 at pass 2; d's job 18 (2 GPUs)
    reclaims job 2 at pass 3, counting a's job 16, which reaches its max runtime 30 s
    later, as ending. At pass 4 both victims have stopped: 17's quota is free now, 18's
    only once job 16 has ended. Largest first (claim_key), 18 was admitted and took the
    quota 17's victim had freed, and 17 waited for job 16 instead. In queue order, each
    starts at the first pass after its own wait."""
    c = Cluster()
    c.node("n0", gpus=4, block="b0", rack="r0")
    for i in range(1, 5):
        c.node(f"n{i}", gpus=8, block=f"b{i}", rack=f"r{i}")
    c.team("a", nominal=1, cohort="c").team("d", nominal=3, cohort="c")
    c.team("b", nominal=0, cohort="c")
    sizes = [1] * 6 + [2] * 4 + [4] * 5
    arrivals = [(0, i, "b", 1, k, 100 * HOUR) for i, k in enumerate(sizes, start=1)]
    arrivals += [(1, 16, "a", 1, 1, 45), (2, 17, "d", 1, 1, 45), (3, 18, "d", 1, 2, 45)]
    sim = Sim(c, early=(0.5, 1.0), preemption=True, backfill=False, explain=False)
    for step, plan in scripted(sim, arrivals, 15.0, 6):
        if step == 3:
            assert preempted(plan) == [2]
    assert sim.started[17] == NOW + 60.0  # pass 4: its victim has stopped
    assert sim.started[18] == NOW + 75.0  # pass 5: a's job 16 has ended


def test_a_claim_survives_its_victim_ending_by_itself():
    """Passes every 10 s, grace 30 s. b's job 19 reclaims d's job 12, which ends by itself
    (it runs 45 s of its 200 s max runtime) 5 s later, before its grace period: no
    stopping or requeued victim names job 19 any more. Its stored reservation is its claim: it starts at the next
    pass. Considered as usual instead, it lost b's quota to b's earlier job 18 (which
    then borrowed), waited, and was started only three passes later."""
    c = Cluster()
    for i in range(5):
        c.node(f"n{i}", gpus=4, flavor="h100", block=f"b{i}", rack=f"r{i}")
    zero = Quota(0)
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(4), "a100": zero}, {}),
        Team("b", 1.0, "c", {"h100": Quota(5), "a100": zero}, {}),
        Team("d", 1.0, "c", {"h100": Quota(3), "a100": zero}, {}),
    ]
    every = 10.0
    arrivals = [(0, i, "a", 1, 1, 45) for i in (1, 2, 3, 5)]
    arrivals += [(0, 4, "b", 2, 2, 200, "h100"), (0, 6, "a", 1, 1, 45, "a100")]
    arrivals += [(1, i, "a", 1, 1, 45, "a100") for i in (7, 8, 9)]
    arrivals += [(2, 10, "a", 1, 1, 45, "h100"), (2, 11, "a", 1, 1, 45, "h100")]
    arrivals += [(2, 12, "d", 2, 2, 200, "h100"), (3, 13, "a", 1, 1, 45, "h100")]
    arrivals += [(3, 14, "a", 1, 1, 45, "h100"), (4, 15, "a", 1, 2, 45, "h100")]
    arrivals += [(4, 16, "a", 1, 1, 45, "h100"), (5, 17, "a", 1, 1, 45, "h100")]
    arrivals += [(5, 18, "b", 1, 2, 45, "h100"), (6, 19, "b", 1, 1, 45, "h100")]
    arrivals += [(8, 20, "d", 1, 1, 45, "h100")]
    sim = Sim(c, preemption=True, backfill=False)
    sim.runs[12] = 45.0
    starts = {}
    for step, plan in scripted(sim, arrivals, every, 10):
        starts.update((a, step) for a in admitted(plan))
        if step == 6:
            assert [(p.job_id, p.preemptor_id) for p in plan.preemptions] == [(12, 19)]
    assert starts[19] == 7


def test_two_targets_on_one_node_are_kept_apart():
    """Passes every 15 s, grace 30 s. b's 2x2 job 18 reclaims four of a's 1-GPU jobs
    and reserves 4 GPUs of n2 (one of a victim's, three free); a pass later d's job 19
    reclaims four more, on n2 too, and reserves the other 4. When job 18's victims
    have stopped, job 19's still stop: 18 starts on the 4 GPUs of n2 now free, and 19 a
    pass later, on what its own victims free (a target is a number of GPUs per node:
    kept in any order, 19 took 18's free GPUs and 18 waited for 19's victims)."""
    c = Cluster()
    for name, gpus in [("n0", 4), ("n1", 4), ("n2", 8), ("n3", 4)]:
        c.node(name, gpus=gpus, flavor="h100", block="b" + name[1], rack="r" + name[1])
    c.teams = [
        Team("a", 1.0, "c", {"h100": Quota(5)}, {}),
        Team("b", 1.0, "c", {"h100": Quota(4)}, {}),
        Team("d", 1.0, "c", {"h100": Quota(4)}, {}),
    ]
    every = 15.0
    arrivals = [(0, i, "a", 1, 1, 100 * HOUR) for i in range(1, 15)]
    arrivals += [(0, 15, "a", 1, 2, 100 * HOUR), (0, 16, "a", 1, 4, 100 * HOUR)]
    arrivals += [(2, 18, "b", 2, 2, 45), (3, 19, "d", 1, 4, 45)]
    sim = Sim(c, preemption=True, backfill=False)
    starts = {}
    for step, plan in scripted(sim, arrivals, every, 7):
        starts.update((a, step) for a in admitted(plan))
        if step == 3:
            assert {r.job_id: r.nodes for r in plan.reservations} == {
                18: (("n2", 4),),
                19: (("n2", 4),),
            }
    assert (starts[18], starts[19]) == (4, 5)
    assert sorted(set(sim.preempted)) == list(range(6, 14))


def scripted(sim, arrivals, every: float, passes: int):
    """Run `passes` passes `every` seconds apart, submitting each arrival at its pass, and
    yield (pass, plan). An arrival: (pass, id, team, workers, GPUs per worker, max
    runtime[, flavor[, priority]]), submitted when its pass runs."""
    for step in range(passes):
        for when, i, team, workers, gpus, runtime, *rest in arrivals:
            if when == step:
                extra = dict(zip(("flavor", "priority"), rest, strict=False))
                submitted = NOW + when * every
                job = make_job(i, team, workers=workers, gpus=gpus, submitted=submitted, **extra)
                sim.submit(replace(job, max_runtime=runtime))
        yield step, sim.step(NOW + step * every)

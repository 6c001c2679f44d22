"""Benchmark job dependencies on PostgreSQL: the full scheduling pass with N jobs held
for their dependencies waiting (they are not in the snapshot), and what releasing or
cancelling them costs the transition that triggers it.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench \\
        .venv/bin/python bench/bench_dependencies.py [--pending 10000] [--held 10000] [--repeat 5]

It fills bench_pass.py's cluster (1,000 nodes × 8 GPUs, 50 teams, ~70 % of the GPUs
held, N pending gangs), adds `--held` jobs that wait (`afterok`) on running jobs, and
then times passes alternately with the held jobs in place (A) and with the same rows
ended (B, `cancelled`: the same table size, nothing held), so the ratio A/B is what
held jobs cost the pass. Then: one parent with all the held jobs as children ends
(succeeded: every child released; failed: every child cancelled), timed as the one
transition that does it (inline) and as the transition plus the follow-up task that
judges them when they are more than SETTLE_INLINE_MAX (deferred), and one safety
sweep over all of them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from django.db import transaction  # noqa: E402
from django.db.models import Count  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.bench_pass import (  # noqa: E402  (sets Django up)
    connection,
    ensure_database,
    last_id,
    populate,
    run_pass,
    undo_pass,
)
from portal.core.actions import dependencies  # noqa: E402
from portal.core.actions.dependencies import sweep_held_jobs  # noqa: E402
from portal.core.actions.jobs import transition  # noqa: E402
from portal.core.models import Allocation, Job, JobDependency, JobEvent, Worker  # noqa: E402
from portal.core.scheduling.snapshot import build_snapshot  # noqa: E402
from scheduler.model import PolicyConfig  # noqa: E402


def add_held(count: int) -> list[int]:
    """`count` pending jobs held on `afterok` of running jobs (one edge each)."""
    parents = list(Job.objects.filter(state="running").values_list("pk", flat=True)[:count])
    template = Job.objects.filter(state="pending").first()
    jobs = []
    for k in range(count):
        job = Job(
            team_id=template.team_id,
            queue_id=template.queue_id,
            flavor_id=template.flavor_id,
            name="held",
            image="img",
            command=["true"],
            max_runtime_seconds=3600,
            dependency=f"afterok:{parents[k % len(parents)]}",
            awaiting_dependency=True,
            reason_code="dependency",
            reason="Waits for its dependencies.",
        )
        jobs.append(job)
    jobs = Job.objects.bulk_create(jobs, batch_size=5000)
    JobDependency.objects.bulk_create(
        (
            JobDependency(child=j, parent_id=parents[k % len(parents)], type="afterok")
            for k, j in enumerate(jobs)
        ),
        batch_size=5000,
    )
    return [j.pk for j in jobs]


def vacuum() -> None:
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE core_job, core_jobdependency, core_jobevent")


def timed_passes(repeat: int, held: list[int], marks, pending, running) -> dict[str, list]:
    """Alternate A (held) and B (the same rows ended) passes; each followed by undo."""
    out = {"A": [], "B": []}
    for _ in range(repeat):
        for label in ("A", "B"):
            state = "pending" if label == "A" else "cancelled"
            Job.objects.filter(pk__in=held).update(state=state)
            vacuum()
            t0 = time.perf_counter()
            result = run_pass()
            wall = time.perf_counter() - t0
            s = result.summary()
            out[label].append((wall, s["queries"], s["admitted"]))
            undo_pass(marks, pending, running)
    Job.objects.filter(pk__in=held).update(state="pending")
    return out


def timed_snapshots(repeat: int, held: list[int]) -> dict[str, list[float]]:
    """build_snapshot alone (the only step that could read held jobs), alternating A/B."""
    out = {"A": [], "B": []}
    config = PolicyConfig()
    for _ in range(repeat):
        for label in ("A", "B"):
            Job.objects.filter(pk__in=held).update(state="pending" if label == "A" else "cancelled")
            vacuum()
            t0 = time.perf_counter()
            snapshot, _ = build_snapshot(timezone.now(), config)
            out[label].append(time.perf_counter() - t0)
            assert not {j.id for j in snapshot.pending} & set(held)
    Job.objects.filter(pk__in=held).update(state="pending")
    return out


def one_parent_ends(held: list[int], state: str, inline: bool) -> tuple[float, float, dict]:
    """Make every held job a child of one running parent and end the parent; return the
    transition's wall time, the follow-up task's (0 when inline), and the children's
    states. `inline` judges them inside the transition (SETTLE_INLINE_MAX raised);
    otherwise the transition queues them and the task's work is timed on its own."""
    parent = Job.objects.filter(state="running").values_list("pk", flat=True).first()
    JobDependency.objects.filter(child_id__in=held).update(parent_id=parent)
    Job.objects.filter(pk__in=held).update(
        state="pending", awaiting_dependency=True, reason_code="dependency", finished_at=None
    )
    vacuum()
    queued = []
    saved = dependencies.SETTLE_INLINE_MAX, dependencies._settle_later
    dependencies.SETTLE_INLINE_MAX = 10**9 if inline else saved[0]
    dependencies._settle_later = queued.extend  # the broker is not part of this benchmark
    try:
        t0 = time.perf_counter()
        with transaction.atomic():
            transition(
                [parent],
                from_states=["running"],
                to_state=state,
                kind=state,
                finished_at=timezone.now(),
                exit_code=0 if state == "succeeded" else 1,
            )
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        if queued:
            dependencies.settle_in_batches(queued)
        task = time.perf_counter() - t0 if queued else 0.0
    finally:
        dependencies.SETTLE_INLINE_MAX, dependencies._settle_later = saved
    counts = dict(
        Job.objects.filter(pk__in=held)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    Job.objects.filter(pk=parent).update(state="running", finished_at=None, exit_code=None)
    return wall, task, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--held", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    ensure_database()
    populate(args.nodes, args.pending)
    pending = list(Job.objects.filter(state="pending").values_list("pk", flat=True))
    running = list(Job.objects.filter(state="running").values_list("pk", flat=True))
    held = add_held(args.held)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    marks = {
        "allocation": last_id(Allocation),
        "worker": last_id(Worker),
        "event": last_id(JobEvent),
    }
    print(f"{len(pending)} pending, {len(held)} held, {len(running)} running")

    out = timed_passes(args.repeat, held, marks, pending, running)
    for label, rows in out.items():
        walls = [w for w, _, _ in rows]
        print(
            f"{label} ({'held waiting' if label == 'A' else 'same rows ended'}): "
            + ", ".join(f"{w:.3f}" for w in walls)
            + f" s; median {statistics.median(walls):.3f} s; queries {sorted({q for _, q, _ in rows})}; "
            f"admitted {sorted({a for _, _, a in rows})}"
        )
    a = statistics.median(w for w, _, _ in out["A"])
    b = statistics.median(w for w, _, _ in out["B"])
    print(f"A/B median ratio {a / b:.3f}")
    snaps = timed_snapshots(args.repeat * 2, held)
    for label, walls in snaps.items():
        print(
            f"snapshot {label}: "
            + ", ".join(f"{w:.3f}" for w in walls)
            + f" s; median {statistics.median(walls):.3f} s"
        )
    print(
        f"snapshot A/B median ratio {statistics.median(snaps['A']) / statistics.median(snaps['B']):.3f}"
    )

    for run in ("first", "second"):
        t0 = time.perf_counter()
        totals = sweep_held_jobs()
        print(
            f"sweep ({run}) over {len(held)} held jobs: {time.perf_counter() - t0:.3f} s, {totals}"
        )
    for inline in (True, False):
        for state in ("succeeded", "failed"):
            wall, task, counts = one_parent_ends(held, state, inline)
            how = "inline" if inline else "deferred"
            print(
                f"one parent {state} with {len(held)} children ({how}): transition "
                f"{wall:.3f} s, follow-up task {task:.3f} s, children {counts}"
            )
            JobEvent.objects.filter(pk__gt=marks["event"]).delete()


if __name__ == "__main__":
    main()

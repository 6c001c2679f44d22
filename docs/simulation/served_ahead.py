"""What filled fair share's longest wait on one Philly window, and the longest wait by class.

    .venv/bin/python docs/simulation/served_ahead.py 2 640      # window 2 (Oct 2), 640 GPUs

Replays the window (as bench/scan_traces.py does, every default) under fair share,
FIFO and FIFO + backfill with every attempt logged (a subclass of the simulator), then
prints, for fair share's longest-waiting job J: the GPU-time of the cluster during
J's wait by who held it (jobs running when J was submitted, J's team's earlier jobs,
other teams' jobs submitted after J, within nominal quota or borrowing), the same
for J's wait under FIFO, when 2 (J's) GPUs of later jobs had started, and the
longest wait of the jobs within their team's nominal quota when submitted (in the
fair-share replay) and of the others under each policy. docs/simulation.md,
"Bounded waits: what the goal asks of fair share". About 5 minutes on 2 shared cores.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import scan_traces as st  # noqa: E402

from scheduler import PolicyConfig  # noqa: E402
from scheduler.sim import SimConfig, Simulator  # noqa: E402
from scheduler.sim.cluster import homogeneous, quota_teams  # noqa: E402

H = 3600.0


class Logged(Simulator):
    """The simulator, logging each attempt: [id, team, gpus, start, end, borrowed, submitted]."""

    def __init__(self, *args, **kw) -> None:
        self.within: dict[int, bool] = {}  # job -> within its team's nominal when submitted
        super().__init__(*args, **kw)
        self.attempts: list[list] = []
        self.open: dict[int, list] = {}

    def _arrive(self, r) -> None:
        self.within[r.job.id] = self._within_nominal(r)
        super()._arrive(r)

    def _start(self, r, admission) -> None:
        super()._start(r, admission)
        job = r.job
        a = [job.id, job.team, job.gpus, self.now, None, admission.borrowed > 0, job.submitted_at]
        self.attempts.append(a)
        self.open[job.id] = a

    def _release(self, r) -> None:
        a = self.open.pop(r.job.id, None)
        if a is not None:
            a[4] = self.now
        super()._release(r)


def replay(lo: float, hi: float, gpus: int, policy: str):
    jobs = [j for j in st._JOBS if lo <= j.submitted_at < hi]
    nodes = homogeneous(gpus // st.GPUS_PER_NODE, st.GPUS_PER_NODE)
    jobs = [replace(j, flavor=nodes[0].flavor) for j in jobs]
    teams = quota_teams(jobs, nodes)
    config = SimConfig(policy=PolicyConfig(policy=policy, explain=False))
    return Logged(jobs, nodes, teams, config).run(), teams


def held_during(sim, J, start: float, gpus: int) -> None:
    """Print the GPU-time of the cluster during J's wait [submitted, start) by holder."""
    s = J.job.submitted_at
    cats: dict[tuple, float] = {}
    for a in sim.attempts:
        lo, hi = max(a[3], s), min(start if a[4] is None else a[4], start)
        if hi <= lo or a[0] == J.job.id:
            continue
        when = "running at its submit" if a[3] <= s else ("before it" if a[6] <= s else "after it")
        who = "own team" if a[1] == J.job.team else "other teams"
        key = (when, who, "borrowing" if a[5] else "within nominal")
        cats[key] = cats.get(key, 0.0) + a[2] * (hi - lo) / H
    for key in sorted(cats):
        print(
            f"    {' / '.join(key)}: {cats[key]:,.0f} GPU-h = {cats[key] / gpus:.1f} h of the cluster"
        )
    total = sum(cats.values())
    print(
        f"    total {total:,.0f} of {gpus * (start - s) / H:,.0f} GPU-h ({(start - s) / H:.1f} h)"
    )


def first_later(sim, J, start: float, borrowing: bool) -> float:
    """Return when J's GPUs' worth of later jobs of other teams had started (from J's submit)."""
    got, s = 0, J.job.submitted_at
    for a in sorted(sim.attempts, key=lambda a: a[3]):
        if a[1] != J.job.team and a[6] > s and s < a[3] < start and a[5] == borrowing:
            got += a[2]
            if got >= J.job.gpus:
                return a[3] - s
    return start - s


def main() -> int:
    win, gpus = int(sys.argv[1]), int(sys.argv[2])
    st._init(str(st.TRACE))
    lo, hi = st.windows(st._JOBS, 2)[win]
    (fs, teams), (fifo, _), (fb, _) = (
        replay(lo, hi, gpus, p) for p in ("fairshare", "fifo", "fifo-backfill")
    )
    nominal = {t.name: sum(q.nominal for q in t.quotas.values()) for t in teams}
    J = max((r for r in fs.recs.values() if r.finished is not None), key=lambda r: r.waited)
    start = max(a[3] for a in fs.attempts if a[0] == J.job.id)  # its last attempt
    fifo_max = max(r.waited for r in fifo.recs.values() if r.finished is not None)
    print(
        f"{st.day(lo)} / {gpus}: job {J.job.id} of {J.job.team} (nominal {nominal[J.job.team]}), "
        f"{J.job.gpus} GPUs: fair share {J.waited / H:.1f} h, FIFO {fifo.recs[J.job.id].waited / H:.1f}"
        f" h; FIFO's longest {fifo_max / H:.1f} h"
    )
    print("  fair share, during its wait:")
    held_during(fs, J, start, gpus)
    print("  FIFO, during its wait:")
    held_during(fifo, J, fifo.recs[J.job.id].first_start, gpus)
    for label, borrowing in (("within nominal", False), ("borrowing", True)):
        t = first_later(fs, J, start, borrowing)
        print(
            f"  {J.job.gpus} GPUs of later jobs of other teams, {label}, started by +{t / H:.2f} h"
        )
    for label, within in (("within nominal when submitted", True), ("would borrow", False)):
        cells = []
        for name, sim in (("fair share", fs), ("FIFO", fifo), ("FIFO + backfill", fb)):
            waits = [
                r.waited
                for r in sim.recs.values()
                if r.finished is not None and fs.within.get(r.job.id) == within
            ]
            cells.append(f"{name} {max(waits, default=0) / H:.1f} h")
        print(f"  longest wait, jobs {label}: {', '.join(cells)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

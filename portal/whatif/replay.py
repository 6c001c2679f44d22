"""Run a what-if: the period's job history replayed as configured and with the change.

Both replays use the scheduler core through scheduler.sim, with the portal's
policy (portal.core.scheduling.policy_config) and requeue backoff, the
cluster's current nodes and teams (portal.whatif.history), and each job's
declared max runtime as the scheduler's estimate. Progress goes to the row at most every PROGRESS_WRITE_S.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from portal.core.scheduling import policy_config
from portal.whatif import history
from portal.whatif.models import WhatIfRun
from scheduler.sim import SimConfig, simulate
from scheduler.sim.compare import apply_change, compare
from scheduler.sim.trace import records_to_jobs

log = logging.getLogger(__name__)

PROGRESS_WRITE_S = 0.5
# A run still `running` this long after it started lost its worker: it may be claimed again.
STALE_AFTER = timedelta(hours=1)
# Keys of a simulation summary kept in the stored results (not the per-size table).
SUMMARY_KEYS = (
    "jobs",
    "unfinished",
    "avg_wait_s",
    "median_wait_s",
    "p90_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "avg_jct_s",
    "utilization",
    "jain_fairness",
    "preemptions",
    "lost_gpu_hours",
    "sim_wall_s",
)


class Progress:
    """Writes the run's progress, mapping each replay onto its half of the bar."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.last = 0.0

    def reach(self, value: float) -> None:
        """Write a stage boundary now, whatever the throttle says."""
        self.last = time.monotonic()
        WhatIfRun.objects.filter(pk=self.run_id).update(progress=value)

    def part(self, first: float, share: float):
        def report(done: float) -> None:
            now = time.monotonic()
            if now - self.last >= PROGRESS_WRITE_S:
                self.last = now
                value = min(1.0, first + share * done)
                WhatIfRun.objects.filter(pk=self.run_id).update(progress=value)

        return report


def claim(run_id: int) -> WhatIfRun | None:
    """Mark a queued (or abandoned) run running; None if another worker has it or it is done."""
    now = timezone.now()
    claimable = WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.QUEUED)
    stale = WhatIfRun.objects.filter(
        pk=run_id, status=WhatIfRun.Status.RUNNING, started_at__lt=now - STALE_AFTER
    )
    if not (
        claimable.update(status="running", started_at=now, progress=0.0)
        or stale.update(started_at=now, progress=0.0)
    ):
        return None
    return WhatIfRun.objects.select_related("team", "flavor", "team__cohort").get(pk=run_id)


def execute(run_id: int) -> None:
    """Claim the run, replay it twice, store the comparison or the error."""
    run = claim(run_id)
    if run is None:
        log.info("what-if %s is not queued; nothing to do", run_id)
        return
    try:
        results = replay(run, Progress(run.pk))
    except Exception as exc:  # noqa: BLE001 — any failure is the run's result, shown to its owner
        log.exception("what-if %s failed", run_id)
        WhatIfRun.objects.filter(pk=run_id).update(
            status=WhatIfRun.Status.FAILED,
            error=str(exc)[:2000] or type(exc).__name__,
            finished_at=timezone.now(),
        )
        return
    WhatIfRun.objects.filter(pk=run_id).update(
        status=WhatIfRun.Status.DONE, progress=1.0, results=results, finished_at=timezone.now()
    )


def replay(run: WhatIfRun, progress: Progress) -> dict:
    """Return the results document: setup, both summaries, and the per-team comparison."""
    progress.reach(0.01)
    nodes = history.cluster_nodes()
    if not nodes:
        raise ValueError("the cluster has no nodes with GPUs to replay the history on")
    teams = history.cluster_teams()
    jobs = records_to_jobs(history.job_records(run.period_start, run.period_end))
    flavor = run.flavor.name if run.flavor else None
    changed_teams = apply_change(teams, run.team.slug, run.change, run.value, flavor)
    policy = policy_config()
    setup = {
        "policy": policy.policy,
        "reclaim_backoff": policy.reclaim_backoff,
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "jobs": len(jobs),
        "change": run.describe(),
        "cohorts": {t.name: t.cohort for t in teams},
    }
    if not jobs:
        return {"setup": setup, "teams": [], "note": "No jobs were submitted in this period."}
    config = SimConfig(
        policy=policy,
        runtime_estimate="declared",
        requeue_backoff_s=settings.BERTH["REQUEUE_BACKOFF_BASE_S"],
        requeue_backoff_max_s=settings.BERTH["REQUEUE_BACKOFF_MAX_S"],
    )
    # Progress bands: models.RUN_STAGES.
    progress.reach(0.05)
    base = simulate(jobs, nodes, teams, config, progress.part(0.05, 0.45)).summary
    progress.reach(0.5)
    after = simulate(jobs, nodes, changed_teams, config, progress.part(0.5, 0.45)).summary
    progress.reach(0.95)
    return {
        "setup": setup,
        "baseline": {k: base[k] for k in SUMMARY_KEYS},
        "changed": {k: after[k] for k in SUMMARY_KEYS},
        "teams": compare(base, after),
    }

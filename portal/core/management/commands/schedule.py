"""Run one scheduling pass now; --dry-run prints the plan without writing."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand

from portal.core.scheduling import run_pass


def _when(ts):
    return (
        datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        if ts is not None
        else "unknown"
    )


class Command(BaseCommand):
    help = "Run one scheduling pass (as Celery beat does); --dry-run prints the plan and writes nothing."

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the plan, change nothing."
        )

    def handle(self, *args, dry_run=False, **options):
        result = run_pass(dry_run=dry_run)
        if result is None:
            self.stderr.write("Another scheduling pass is running; nothing done.")
            return
        plan, write = result.plan, self.stdout.write
        verb = "would admit" if dry_run else "admitted"
        for a in plan.admissions:
            where = ", ".join(f"rank {p.rank}@{p.node}×{len(p.gpus)}" for p in a.placement)
            write(
                f"{verb} job {a.job_id}: {where}"
                + (f" (borrows {a.borrowed})" if a.borrowed else "")
            )
        for p in plan.preemptions:
            write(
                f"{'would preempt' if dry_run else 'preempted'} job {p.job_id} [{p.reason_code}]: {p.message}"
            )
        for v in plan.verdicts:
            write(
                f"pending job {v.job_id} #{v.position} [{v.reason_code}] start ≈ {_when(v.estimated_start)}: {v.message}"
            )
        s = result.summary()
        write(
            f"pass: {s['pending']} pending, {s['admitted']} admitted, {s['preempted']} preempted, "
            f"{s['duration_ms']} ms, {s['queries']} queries{' (dry run, nothing written)' if dry_run else ''}"
        )

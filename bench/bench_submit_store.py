"""CPU of the single-submission store statement per job, by rows a statement: the
batch insert (statements.insert_jobs_with_events) run in a loop on one connection,
PostgreSQL's share read from its backend's /proc entry, the client's from
process_time. Run bench_api.py or bench_submit_cpu.py against the database first
(it needs their team-0, ci-0 and token).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench_cpu \\
        .venv/bin/python bench/bench_submit_store.py [--jobs 4000] [--rows 1 8 32] \\
        [--plan-cache-mode auto|force_custom_plan|force_generic_plan]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench_cpu")


def backend_cpu(connection) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--plan-cache-mode", default="")
    args = parser.parse_args()
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from bench.bench_api import JOB
    from portal.core import statements
    from portal.core.access import SUBMIT_ROLES
    from portal.core.actions import jobs
    from portal.core.actions.tokens import authenticate_for_submit
    from portal.core.jobspec import clean_job_spec
    from portal.core.lookups import RememberedLookups
    from portal.core.models import ApiToken, Job, Queue, Team

    if args.plan_cache_mode:
        with connection.cursor() as cursor:
            cursor.execute(f"SET plan_cache_mode = {args.plan_cache_mode}")
    team = Team.objects.get(slug="team-0")
    queue = Queue.objects.get(team=team, name="default")
    user = get_user_model().objects.get(username="ci-0")
    spec = clean_job_spec(team, dict(JOB), RememberedLookups(team, queues=[queue]))
    token = ApiToken.objects.filter(user=user).first()
    grant = authenticate_for_submit(token.token_hash, "team-0", "default")
    for n in args.rows:
        now = timezone.now()
        fields = jobs._job_fields(team, spec, user, None, "", now)
        event = jobs._submitted_event_fields(team, spec, user, now)
        batch = [statements.NewJob(fields, event, grant.guard)] * n
        for _ in range(10):  # prepared after 5 runs
            statements.insert_jobs_with_events(batch, SUBMIT_ROLES)
        Job.objects.filter(state="pending").update(state="succeeded")
        cpu, client, wall = backend_cpu(connection), time.process_time(), time.perf_counter()
        for i in range(args.jobs // n):
            assert all(statements.insert_jobs_with_events(batch, SUBMIT_ROLES))
            if i % max(1, 200 // n) == 0:
                Job.objects.filter(state="pending").update(state="succeeded")
        cpu = backend_cpu(connection) - cpu
        client, wall = time.process_time() - client, time.perf_counter() - wall
        done = args.jobs // n * n
        print(
            f"{n} rows a statement: PostgreSQL {cpu / done * 1e3:.3f} ms a job, "
            f"client {client / done * 1e3:.3f} ms, wall {wall / done * 1e3:.3f} ms"
        )


if __name__ == "__main__":
    main()

"""Replay a trace through the scheduling core (python -m scheduler.sim), or the database's own history.

    manage.py simulate --trace philly.csv --nodes 64 --gpus-per-node 8 --policy all
    manage.py simulate --from-db --start 2025-01-01 --end 2025-01-15 --policy all
    manage.py simulate --from-db --start ... --end ... --export history.json

--from-db replays the jobs submitted in [--start, --end) on the cluster's
current nodes with the teams' current quotas, as the what-if does; --export
writes that history as a Berth trace (JSON with its nodes and teams) that
`python -m scheduler.sim --format berth --trace history.json` replays without
a database.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim import cli
from scheduler.sim.trace import parse_time, records_to_jobs


class Command(BaseCommand):
    help = "Replay a trace, or this database's job history, through the scheduling core."

    def add_arguments(self, parser):
        cli.add_arguments(parser)
        parser.add_argument(
            "--from-db", action="store_true", help="replay this database's jobs in [--start, --end)"
        )
        parser.add_argument("--export", help="write the database's history as a Berth trace JSON")

    def handle(self, *args, **options):
        ns = argparse.Namespace(**options)
        started = time.perf_counter()
        if not (options["from_db"] or options["export"]):
            if not options["trace"]:
                raise CommandError("give --trace, or --from-db / --export")
            cli.report(cli.run(ns), ns, started)
            return
        from portal.core.scheduling import policy_config
        from portal.whatif import history

        if not options["start"] or not options["end"]:
            raise CommandError("--from-db and --export need --start and --end")
        start, end = (datetime.fromtimestamp(parse_time(options[k]), UTC) for k in ("start", "end"))
        if options["export"]:
            Path(options["export"]).write_text(
                json.dumps(history.export(start, end), indent=1) + "\n"
            )
            self.stderr.write(f"wrote {options['export']}")
            if not options["from_db"]:
                return
        jobs = records_to_jobs(history.job_records(start, end))
        if not jobs:
            raise CommandError("no jobs were submitted in that period")
        portal = policy_config()  # what the what-if replays with, unless a flag says otherwise
        if not options["policy"]:
            ns.policy = [portal.policy]
        if ns.half_life is None:
            ns.half_life = portal.half_life
        if ns.reclaim_backoff is None:
            ns.reclaim_backoff = portal.reclaim_backoff
        ns.trace, ns.format = "database", "berth"
        results = cli.run_policies(
            ns, jobs, history.cluster_nodes(), history.cluster_teams(), ["berth: this database"]
        )
        cli.report(results, ns, started)

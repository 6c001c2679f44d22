"""CPU one single submission costs in the web process, measured in-process: the WSGI
application called directly (no HTTP server, no client processes), so the figure
is the Django side alone and far less noisy than bench_api.py on a shared machine.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/berth_bench_cpu \\
    REDIS_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/bench_submit_cpu.py [--requests 3000] [--tree PATH]

`--tree` runs another checkout's code with this script (e.g. a `git worktree` of
an older commit), to compare before and after in one sitting: run both, alternating.
Each request is a Bearer-token submission of bench_api.py's job; pending jobs are
moved on every 200 requests so the queue stays short. Reports the median CPU
(process time) per request over 5 batches, and bulk submissions' CPU per job.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--bulk", type=int, default=1000, help="jobs per bulk request")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="bulk jobs that differ as a sweep's do (name and env), not one job repeated",
    )
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="instead: cProfile N warm single submissions and print where their CPU goes",
    )
    parser.add_argument(
        "--profile-bulk",
        type=int,
        default=0,
        metavar="N",
        help="instead: cProfile N warm bulk requests (--bulk jobs each) and print where their CPU goes",
    )
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    os.chdir(args.tree)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/berth_bench_cpu")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
    os.environ["BERTH_API_RATE"] = "100000000/min"
    import django

    django.setup()
    from bench.bench_api import JOB, ensure_database, populate
    from portal.core.models import Job

    ensure_database()
    token = populate(1)[0]
    from portal.wsgi import application as app  # the tree's own: what gunicorn serves

    single = json.dumps(JOB).encode()
    sweep = [{"name": f"lr-{i}", "env": {"SEED": "1", "LR": f"{i}e-5"}} for i in range(args.bulk)]
    jobs = [
        JOB | {"gpus_per_worker": 1} | (sweep[i] if args.sweep else {}) for i in range(args.bulk)
    ]
    bulk = json.dumps({"jobs": jobs}).encode()

    def post(path: str, body: bytes) -> str:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "HTTP_HOST": "localhost",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_AUTHORIZATION": f"Bearer {token}",
        }
        status = []
        chunks = app(environ, lambda s, h, exc=None: status.append(s))
        b"".join(chunks)
        getattr(chunks, "close", lambda: None)()
        return status[0]

    def batch(path: str, body: bytes, n: int) -> float:
        cpu = 0.0
        for i in range(n):
            if i % 200 == 0:
                Job.objects.filter(state="pending").update(state="succeeded")
            start = time.process_time()
            status = post(path, body)
            cpu += time.process_time() - start
            assert status.startswith("201"), status
        return cpu / n

    print(f"tree {args.tree}")
    batch("/api/v1/jobs/", single, 200)  # warm-up
    if args.profile:
        profile(lambda: batch("/api/v1/jobs/", single, args.profile), args.profile)
        return
    if args.profile_bulk:
        batch("/api/v1/jobs/bulk/", bulk, 1)  # warm-up
        n = args.profile_bulk
        profile(lambda: batch("/api/v1/jobs/bulk/", bulk, n), n * args.bulk, BULK_STEPS, "jobs")
        return
    per_request = [batch("/api/v1/jobs/", single, args.requests // 5) for _ in range(5)]
    print(
        f"single submit: {statistics.median(per_request) * 1000:.3f} ms CPU per request "
        f"(batches: {', '.join(f'{x * 1000:.3f}' for x in per_request)})"
    )
    per_bulk = [batch("/api/v1/jobs/bulk/", bulk, 1) for _ in range(6)][1:]
    print(
        f"bulk submit: {statistics.median(per_bulk) / args.bulk * 1e6:.1f} µs CPU per job "
        f"({args.bulk} jobs per request{', a sweep' if args.sweep else ''})"
    )


# Where a submission's CPU goes: (label, function as pstats names it, file suffix). Each
# share is the function's cumulative time; nested ones are inside the ones above them.
STEPS = [
    (
        "WSGI handler (Django request/response, all middleware, the view)",
        "__call__",
        "handlers/wsgi.py",
    ),
    ("  the view (submit_job_view)", "submit_job_view", "views/submit.py"),
    ("    authenticate (token digest, remembered token)", "_caller", "views/submit.py"),
    ("    throttle (Redis round trip)", "_throttle", "views/submit.py"),
    ("    read body: JSON + field types", "_read", "views/submit.py"),
    ("    submit action", "submit", "actions/submit.py"),
    ("      validate (clean_job_spec)", "clean_job_spec", "core/jobspec.py"),
    ("      store (submit_job)", "submit_job", "actions/jobs.py"),
    ("        the insert statement (execute)", "execute", "psycopg/cursor.py"),
    ("    receipt (to_representation + render)", "render", "renderers.py"),
]


# The same for a bulk request, per job (bench_submit_cpu.py --profile-bulk).
BULK_STEPS = [
    ("WSGI handler (Django, middleware, DRF, the view)", "__call__", "handlers/wsgi.py"),
    ("  DRF's request parse (JSON)", "_parse", "rest_framework/request.py"),
    ("  envelope (BulkEnvelopeSerializer)", "is_valid", "rest_framework/serializers.py"),
    ("  field types (serializers.parse)", "parse", "api/serializers.py"),
    ("  submit_many", "submit_many", "actions/submit.py"),
    ("    validate (clean_job_spec)", "clean_job_spec", "core/jobspec.py"),
    ("    store (submit_jobs)", "submit_jobs", "actions/jobs.py"),
    ("      fingerprints", "_bulk_fingerprint", "actions/jobs.py"),
    ("      job rows (_job_fields)", "_job_fields", "actions/jobs.py"),
    ("      the inserts (insert_rows)", "insert_rows", "core/db.py"),
    ("        columns (row_columns)", "row_columns", "core/db.py"),
    ("        execute", "execute", "psycopg/cursor.py"),
    ("  render (JSON)", "render", "renderers.py"),
]


def profile(run, n: int, steps=None, unit: str = "submissions") -> None:
    """cProfile `run` (n submissions) and print the CPU of each step per submission."""
    steps = steps or STEPS
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.process_time)  # CPU, not waiting on PostgreSQL
    start = time.process_time()
    profiler.runcall(run)
    total = time.process_time() - start
    stats = pstats.Stats(profiler).stats
    calls = sum(v[1] for v in stats.values())
    print(
        f"{n} {unit}, {total / n * 1000:.3f} ms CPU each under cProfile, {calls / n:,.0f} calls each"
    )
    for label, name, suffix in steps:
        cum = sum(v[3] for k, v in stats.items() if k[2] == name and k[0].endswith(suffix))
        print(f"  {label:<66} {cum / n * 1000:7.3f} ms  {cum / total:5.1%}")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    if os.environ.get("PROFILE_OUT"):
        profiler.dump_stats(os.environ["PROFILE_OUT"])
    if os.environ.get("PROFILE_CUM"):
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(os.environ["PROFILE_CUM"], 40)


if __name__ == "__main__":
    main()

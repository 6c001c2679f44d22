"""Traces: the jobs a simulation replays, and readers for three formats.

A trace is a list of TraceJob, sorted by (submitted_at, id). Readers:

- philly: Microsoft Philly as processed for Pollux (timestamp, duration,
  num_gpus, gpu_time, cluster). The tenant is the virtual cluster; a job of
  more than `worker_gpus` GPUs is a gang of ceil(n / worker_gpus) workers of
  `worker_gpus` (8: Philly's 8-GPU servers), smaller jobs are one worker.
- openb: Alibaba cluster-trace-gpu-v2023 pods (openb_pods.csv). The tenant is
  the pod's `qos` class (LS, BE, Burstable, Guaranteed): the trace has no
  user or team column, and qos is the one that splits the workload into
  groups with different service expectations. A pod asks for `num_gpu` whole
  GPUs; a fractional pod (gpu_milli < 1000, num_gpu 1) is counted as one
  whole GPU, since Berth does not share GPUs. Pods without GPUs and pods never
  scheduled (no scheduled_time, so no run time) are skipped. Run time is
  deletion_time - scheduled_time; times are seconds from the trace's start,
  taken as seconds since the epoch (1970-01-01 UTC). `gpu_spec` names a GPU
  model when set; it is empty in the public trace, so the job has no flavor
  and the cluster assigns one (cluster.assign_flavors).
- berth: Berth's own job history, as CSV or JSON (BERTH_FIELDS below). The
  portal's what-if exports the database's jobs in this shape and the
  simulator reads it through the same function (records_to_jobs).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: a gang that really ran for `duration` seconds.

    `flavor` None: any GPU flavor will do (the cluster picks one).
    `max_runtime` None: the trace does not say what the user declared.
    """

    id: int
    team: str
    submitted_at: float
    duration: float
    workers: int
    gpus_per_worker: int
    flavor: str | None = None
    max_runtime: float | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    preemptible: bool = True

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


@dataclass(frozen=True, slots=True)
class Trace:
    jobs: tuple[TraceJob, ...]
    notes: tuple[str, ...] = ()  # what the reader did to the raw data, for the report


FORMATS = ("philly", "openb", "berth")


def parse_time(text: str | float | int) -> float:
    """Return seconds since the epoch from an ISO 8601 time (UTC if naive) or a number."""
    if isinstance(text, int | float):
        return float(text)
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def load(
    path: str | Path,
    fmt: str = "philly",
    *,
    start: float | None = None,
    end: float | None = None,
    worker_gpus: int = 8,
) -> Trace:
    """Read a trace file and keep the jobs submitted in [start, end)."""
    if fmt == "philly":
        trace = read_philly(path, worker_gpus)
    elif fmt == "openb":
        trace = read_openb(path)
    elif fmt == "berth":
        trace = read_berth(path)
    else:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    return window(trace, start, end)


def window(trace: Trace, start: float | None, end: float | None) -> Trace:
    """Return the jobs submitted in [start, end) (None: unbounded)."""
    lo = -math.inf if start is None else start
    hi = math.inf if end is None else end
    jobs = tuple(j for j in trace.jobs if lo <= j.submitted_at < hi)
    return Trace(jobs, trace.notes)


def _sorted(jobs: Iterable[TraceJob]) -> tuple[TraceJob, ...]:
    return tuple(sorted(jobs, key=lambda j: (j.submitted_at, j.id)))


def gang_shape(gpus: int, worker_gpus: int) -> tuple[int, int]:
    """Return (workers, GPUs per worker): one worker up to `worker_gpus`, else workers of that size."""
    if gpus <= worker_gpus:
        return 1, gpus
    return -(-gpus // worker_gpus), worker_gpus


def read_philly(path: str | Path, worker_gpus: int = 8) -> Trace:
    """Read Philly's CSV; ids are 1.. in (submit time, row) order."""
    rows = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            t = parse_time(row["timestamp"])
            rows.append((t, i, row))
    rows.sort(key=lambda r: (r[0], r[1]))
    jobs = []
    uneven = 0
    for n, (t, _, row) in enumerate(rows, start=1):
        gpus = int(row["num_gpus"])
        workers, per_worker = gang_shape(gpus, worker_gpus)
        uneven += workers * per_worker != gpus
        jobs.append(TraceJob(n, row["cluster"], t, float(row["duration"]), workers, per_worker))
    notes = [
        f"philly: tenant = virtual cluster; gangs of > {worker_gpus} GPUs split into workers of {worker_gpus}"
    ]
    if uneven:
        notes.append(f"philly: {uneven} jobs rounded up to whole workers of {worker_gpus} GPUs")
    return Trace(tuple(jobs), tuple(notes))


def read_openb(path: str | Path) -> Trace:
    """Read openb_pods.csv (see the module doc for what is kept and how)."""
    jobs, cpu_only, unscheduled, fractional = [], 0, 0, 0
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: (int(r["creation_time"]), r["name"]))
    for row in rows:
        gpus = int(row["num_gpu"])
        if gpus <= 0:
            cpu_only += 1
            continue
        if not row["scheduled_time"] or not row["deletion_time"]:
            unscheduled += 1
            continue
        if int(row["gpu_milli"] or 1000) < 1000:
            fractional += 1
        duration = max(1.0, float(int(row["deletion_time"]) - int(row["scheduled_time"])))
        jobs.append(
            TraceJob(
                len(jobs) + 1,
                row["qos"] or "none",
                float(row["creation_time"]),
                duration,
                1,
                gpus,
                flavor=row.get("gpu_spec") or None,
            )
        )
    notes = (
        "openb: tenant = qos class; times are seconds since the trace start (shown as 1970 dates)",
        f"openb: {fractional} fractional-GPU pods (gpu_milli < 1000) count as 1 whole GPU",
        f"openb: skipped {cpu_only} pods without GPUs and {unscheduled} never scheduled",
    )
    return Trace(_sorted(jobs), notes)


# --- Berth's own job history ---------------------------------------------------------

BERTH_FIELDS = {
    # field: (required, meaning)
    "id": (True, "job id, an integer unique in the trace"),
    "team": (True, "team slug"),
    "submitted_at": (True, "ISO 8601 time (UTC if naive) or seconds since the epoch"),
    "duration_s": (True, "seconds it ran: finished_at - started_at, or its max runtime"),
    "workers": (False, "gang workers, default 1"),
    "gpus_per_worker": (False, "GPUs per worker, default 1"),
    "flavor": (False, "GPU flavor name; empty: any"),
    "max_runtime_s": (False, "max runtime the user declared (--runtime-estimate declared)"),
    "queue": (False, "queue name, default 'default'"),
    "priority": (False, "integer, default 0"),
    "preemptible": (False, "true/false, default true"),
}


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() not in ("0", "false", "no", "")


def record_to_job(rec: Mapping) -> TraceJob:
    """Return a TraceJob from one Berth record (a CSV row or a JSON object)."""
    missing = [k for k, (req, _) in BERTH_FIELDS.items() if req and rec.get(k) in (None, "")]
    if missing:
        raise ValueError(f"berth trace record {rec.get('id')!r} lacks {', '.join(missing)}")
    max_rt = rec.get("max_runtime_s")
    return TraceJob(
        id=int(rec["id"]),
        team=str(rec["team"]),
        submitted_at=parse_time(rec["submitted_at"]),
        duration=max(1.0, float(rec["duration_s"])),
        workers=int(rec.get("workers") or 1),
        gpus_per_worker=int(rec.get("gpus_per_worker") or 1),
        flavor=str(rec["flavor"]) if rec.get("flavor") else None,
        max_runtime=float(max_rt) if max_rt not in (None, "") else None,
        queue=str(rec.get("queue") or DEFAULT_QUEUE),
        priority=int(rec.get("priority") or 0),
        preemptible=_bool(rec.get("preemptible", True)),
    )


def records_to_jobs(records: Iterable[Mapping]) -> tuple[TraceJob, ...]:
    return _sorted(record_to_job(r) for r in records)


def read_berth(path: str | Path) -> Trace:
    """Read a Berth export: CSV with BERTH_FIELDS columns, or JSON {"jobs": [...]} / [...]."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text())
        records = data["jobs"] if isinstance(data, dict) else data
    else:
        with open(path, newline="") as f:
            records = list(csv.DictReader(f))
    return Trace(records_to_jobs(records), ("berth: Berth job history export",))


def job_to_record(job: TraceJob) -> dict:
    """Return the Berth record of a job (the inverse of record_to_job)."""
    return {
        "id": job.id,
        "team": job.team,
        "submitted_at": datetime.fromtimestamp(job.submitted_at, UTC).isoformat(),
        "duration_s": job.duration,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "flavor": job.flavor or "",
        "max_runtime_s": job.max_runtime,
        "queue": job.queue,
        "priority": job.priority,
        "preemptible": job.preemptible,
    }


def with_flavor(job: TraceJob, flavor: str) -> TraceJob:
    return replace(job, flavor=flavor)

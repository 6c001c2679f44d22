"""Berth's Prometheus metrics, built from the database at every scrape.

Many web processes on many machines answer /metrics, and the state they
describe is changed by Celery workers elsewhere, so nothing is counted in a
process: gauges come from a handful of aggregate queries over the current rows,
counters and histograms from append-only rows (portal.ops.tallies). Any process
therefore returns the same cluster-wide values, and a scrape costs a fixed
number of queries whatever the number of jobs (tests/ops assert both).

Names follow Kueue's where one exists (pending / admitted / preempted
workloads, admission wait, quota nominal / borrowed / used, weighted share),
with teams in the place of ClusterQueues and queues in that of LocalQueues;
per-GPU telemetry uses dcgm-exporter's names and labels. docs/operations.md
is the reference.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, Sum
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from portal.core.budgets import budget_statuses
from portal.core.models import (
    Allocation,
    Gpu,
    Job,
    Node,
    Queue,
    SchedulingPass,
)
from portal.core.scheduling.teams import scheduler_teams
from portal.ops import tallies as t
from scheduler import model as m
from scheduler.standing import standings

State = Job.State
NODE_STATES = ("ready", "not_ready", "unknown", "cordoned", "draining")
GPU_STATES = ("free", "allocated", "unschedulable", "unhealthy", "lost")
# Label values that always exist, so that rate() sees a counter's first increment.
PREEMPTION_REASONS = ("reclaim", "priority")
REQUEUE_REASONS = ("requeued", "node_lost", "worker_lost")
FINISHED_STATES = tuple(str(s) for s in Job.TERMINAL_STATES)
XID = re.compile(r"\bXID\s*(\d+)", re.IGNORECASE)


# What a scrape may ask for with ?collect=… (node_exporter's collect[] parameter): the
# per-GPU series are most of the payload on a big cluster (8,000 GPUs → 56,000 samples),
# so Prometheus may scrape them in their own job, less often.
SECTIONS = ("cluster", "gpus")


def registry(
    now: datetime | None = None, sections: tuple[str, ...] = SECTIONS
) -> CollectorRegistry:
    """A registry with only Berth's cluster-wide collector (no per-process metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ClusterCollector(now, sections))
    return reg


class ClusterCollector(Collector):
    def __init__(self, now: datetime | None = None, sections: tuple[str, ...] = SECTIONS):
        self.now = now
        self.sections = sections

    def collect(self) -> Iterator[Metric]:
        now = self.now or timezone.now()
        rows = _gpu_rows()
        if "cluster" in self.sections:
            teams = scheduler_teams(now, settings.BERTH["FAIRSHARE_HALF_LIFE_S"])
            yield from _job_metrics(teams)
            yield from _quota_metrics(teams, now)
            yield from _budget_metrics(now)
            yield from _node_metrics()
            yield _gpu_states(rows)
            yield from _pass_metrics()
            yield from _durable_metrics(teams, t.tallies(now))
        if "gpus" in self.sections:
            yield from _gpu_telemetry(rows)


# --- teams ----------------------------------------------------------------------------------


def _slug(teams: dict[int, m.Team], team_id: int) -> str:
    info = teams.get(team_id)
    return info.name if info else str(team_id)


def _quota_keys(teams: dict[int, m.Team]) -> list[tuple[str, str]]:
    return [(info.name, flavor) for info in teams.values() for flavor in info.quotas]


# --- jobs -----------------------------------------------------------------------------------


def _job_metrics(teams: dict[int, m.Team]) -> Iterator[Metric]:
    """Pending / running / preempting jobs (one grouped query) and queue limits (one)."""
    pending = Counter()
    zeros = dict.fromkeys(_quota_keys(teams), 0)
    demand, running, preempting = Counter(zeros), Counter(zeros), Counter(zeros)
    rows = (
        Job.objects.filter(state__in=Job.OPEN_STATES)
        .values_list("team_id", "queue__name", "flavor__name", "state", "reason_code")
        .annotate(n=Count("id"), gpus=Sum(F("workers") * F("gpus_per_worker")))
        .order_by()
    )
    for team_id, queue, flavor, state, reason, n, gpus in rows:
        team = _slug(teams, team_id)
        if state == State.PENDING:
            pending[(team, f"{team}/{queue}", reason or "unknown")] += n
            demand[(team, flavor)] += gpus
        else:
            (preempting if state == State.PREEMPTING else running)[(team, flavor)] += n
    yield _gauge(
        "berth_pending_jobs",
        "Jobs waiting for admission, by queue (team/queue) and the reason code of their verdict.",
        ["team", "queue", "reason"],
        pending,
    )
    yield _gauge(
        "berth_pending_gpus", "GPUs requested by pending jobs.", ["team", "flavor"], demand
    )
    yield _gauge(
        "berth_running_jobs",
        "Jobs admitted or running (holding their admission).",
        ["team", "flavor"],
        running,
    )
    yield _gauge(
        "berth_preempting_jobs",
        "Jobs told to stop for a preemption whose workers have not all stopped yet.",
        ["team", "flavor"],
        preempting,
    )
    limits = {
        (_slug(teams, team_id), f"{_slug(teams, team_id)}/{name}"): limit
        for team_id, name, limit in Queue.objects.values_list(
            "team_id", "name", "max_pending_jobs"
        ).order_by()
    }
    yield _gauge(
        "berth_queue_max_pending_jobs",
        "A queue's pending-job limit; submissions beyond it get HTTP 429.",
        ["team", "queue"],
        limits,
    )


# --- quota and fair share -----------------------------------------------------------------


def _quota_metrics(teams: dict[int, m.Team], now: datetime) -> Iterator[Metric]:
    """Quota nominal / limits / used / borrowed and each team's weighted share."""
    used = Counter({key: 0 for key in _quota_keys(teams)})
    for team_id, flavor, n in (
        Allocation.objects.filter(active=True)
        .values_list("job__team_id", "job__flavor__name")
        .annotate(n=Count("id"))
        .order_by()
    ):
        used[(_slug(teams, team_id), flavor)] += n
    cohort = {info.name: info.cohort or "" for info in teams.values()}
    quota = {(info.name, f): q for info in teams.values() for f, q in info.quotas.items()}
    labels = ["team", "cohort", "flavor"]

    def series(value) -> dict:
        return {
            (team, cohort.get(team, ""), flavor): v
            for (team, flavor), q in sorted(quota.items())
            if (v := value(q, used[(team, flavor)])) is not None
        }

    yield _gauge(
        "berth_quota_nominal_gpus",
        "GPUs of a flavor guaranteed to a team (Kueue's nominalQuota).",
        labels,
        series(lambda q, _: q.nominal),
    )
    yield _gauge(
        "berth_quota_borrowing_limit_gpus",
        "Most GPUs a team may borrow above its nominal quota (absent: no limit).",
        labels,
        series(lambda q, _: q.borrowing_limit),
    )
    yield _gauge(
        "berth_quota_lending_limit_gpus",
        "Most of its idle nominal GPUs a team lends to its cohort (absent: all of them).",
        labels,
        series(lambda q, _: q.lending_limit),
    )
    all_used = {(team, cohort.get(team, ""), flavor): n for (team, flavor), n in used.items()}
    yield _gauge(
        "berth_quota_used_gpus",
        "GPUs a team's jobs hold now (active allocations, stopping jobs included).",
        labels,
        all_used,
    )
    borrowed = {
        key: max(0, n - (quota.get((key[0], key[2])) or m.Quota(0)).nominal)
        for key, n in all_used.items()
    }
    yield _gauge(
        "berth_quota_borrowed_gpus",
        "GPUs a team uses above its nominal quota, borrowed from its cohort.",
        labels,
        borrowed,
    )
    yield from _share_metrics(teams, used, now)


def _share_metrics(teams: dict[int, m.Team], used: Counter, now: datetime) -> Iterator[Metric]:
    """Each team's weighted dominant share, as the scheduler computes it."""
    half_life = settings.BERTH["FAIRSHARE_HALF_LIFE_S"]
    standing = standings(teams.values(), used, half_life)
    share = GaugeMetricFamily(
        "berth_team_fair_share",
        "Weighted dominant share: current plus decayed usage over nominal quota, divided by "
        "the team weight (lower goes first; Kueue's weighted share).",
        labels=["team", "cohort"],
    )
    weight = GaugeMetricFamily("berth_team_weight", "A team's fair-share weight.", labels=["team"])
    for info in teams.values():
        share.add_metric([info.name, info.cohort or ""], standing[info.name].share)
        weight.add_metric([info.name], info.weight)
    yield share
    yield weight


def _budget_metrics(now: datetime) -> Iterator[Metric]:
    """GPU-hour budgets: used in the period so far, the hard limit and the soft threshold."""
    rows = budget_statuses(now)
    labels = ["team", "flavor", "period"]

    def series(value) -> dict:
        return {(b.team, b.flavor, b.period): v for b in rows if (v := value(b)) is not None}

    yield _gauge(
        "berth_budget_used_gpu_hours",
        "GPU-hours a team used of a flavor in its budget's period so far (month or window).",
        labels,
        series(lambda b: b.used),
    )
    yield _gauge(
        "berth_budget_limit_gpu_hours",
        "A team's GPU-hour budget of a flavor: at it, new jobs wait (budget_exhausted).",
        labels,
        series(lambda b: b.limit),
    )
    yield _gauge(
        "berth_budget_soft_gpu_hours",
        "A budget's soft threshold in GPU-hours: crossing it warns once per period.",
        labels,
        series(lambda b: b.soft),
    )


# --- nodes and GPUs -----------------------------------------------------------------------


def _node_state(condition: str, cordon: str) -> str:
    """Node.state without a model instance: not ready wins over the admin's cordon."""
    if condition != Node.Condition.READY:
        return condition
    return cordon if cordon != Node.Cordon.NONE else "ready"


def _node_metrics() -> Iterator[Metric]:
    counts = Counter()
    for flavor, condition, cordon, n in (
        Node.objects.values_list("flavor__name", "condition", "cordon")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[(flavor, _node_state(condition, cordon))] += n
    for flavor in {f for f, _ in counts}:
        for state in NODE_STATES:
            counts[(flavor, state)] += 0
    yield _gauge("berth_nodes", "Nodes by GPU flavor and state.", ["flavor", "state"], counts)


class GpuRow(NamedTuple):
    index: int
    uuid: str
    model: str
    health: str
    reason: str
    util: float | None
    used_mib: int | None
    total_mib: int
    temp: float | None
    power: float | None
    hostname: str
    condition: str
    cordon: str
    flavor: str
    held: bool

    @property
    def state(self) -> str:
        """lost > unhealthy > allocated > unschedulable (node not ready or cordoned) > free."""
        if self.health in (Gpu.Health.LOST, Gpu.Health.UNHEALTHY):
            return self.health
        if self.held:
            return "allocated"
        if _node_state(self.condition, self.cordon) != "ready":
            return "unschedulable"
        return "free"


def _gpu_rows() -> list[GpuRow]:
    held = Allocation.objects.filter(gpu=OuterRef("pk"), active=True)
    rows = (
        Gpu.objects.annotate(held=Exists(held))
        .values_list(
            "index",
            "uuid",
            "product_name",
            "health",
            "health_reason",
            "utilization_pct",
            "memory_used_mib",
            "memory_mib",
            "temperature_c",
            "power_w",
            "node__hostname",
            "node__condition",
            "node__cordon",
            "node__flavor__name",
            "held",
        )
        .order_by("node__hostname", "index", "pk")
    )
    return [GpuRow._make(row) for row in rows]


# dcgm-exporter's field, its help text, and how to read it from a GPU row.
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.util),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g.used_mib),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: g.total_mib - g.used_mib if g.used_mib is not None and g.total_mib else None,
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temp),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", lambda g: last_xid(g)),
)
DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]


def last_xid(gpu: GpuRow) -> int:
    """The XID the agent reported ("XID 79") while the GPU is unhealthy, else 0 as DCGM."""
    if gpu.health != Gpu.Health.UNHEALTHY:
        return 0
    found = XID.search(gpu.reason or "")
    return int(found.group(1)) if found else 0


def _gpu_states(rows: list[GpuRow]) -> Metric:
    counts = Counter((g.flavor, g.state) for g in rows)
    for flavor in {g.flavor for g in rows}:
        for state in GPU_STATES:
            counts[(flavor, state)] += 0
    return _gauge(
        "berth_gpus",
        "GPUs by flavor and state: free (schedulable), allocated, unschedulable (healthy "
        "and idle on a node that is not ready or is cordoned), unhealthy, lost.",
        ["flavor", "state"],
        counts,
    )


def _gpu_telemetry(rows: list[GpuRow]) -> Iterator[Metric]:
    """The agents' last telemetry of each GPU on a Ready node, as dcgm-exporter names it."""
    live = [
        (g, _dcgm_labels(g))
        for g in rows
        if g.health != Gpu.Health.LOST and g.condition == Node.Condition.READY
    ]
    healthy = GaugeMetricFamily(
        "berth_gpu_healthy",
        "1 when the agent reports the GPU healthy, 0 for XID or ECC errors.",
        labels=DCGM_LABELS,
    )
    for g, labels in live:
        healthy.add_metric(labels, 1 if g.health == Gpu.Health.HEALTHY else 0)
    yield healthy
    for name, help_text, read in DCGM_FIELDS:
        family = GaugeMetricFamily(name, help_text, labels=DCGM_LABELS)
        for g, labels in live:
            value = read(g)
            if value is not None:
                family.add_metric(labels, value)
        yield family


def _dcgm_labels(g: GpuRow) -> list[str]:
    return [str(g.index), g.uuid, f"nvidia{g.index}", g.model, g.hostname]


# --- scheduling passes and durable counters ---------------------------------------------------


def _pass_metrics() -> Iterator[Metric]:
    last = (
        SchedulingPass.objects.filter(dry_run=False, error="")
        .order_by("-started_at")
        .values_list("started_at", "duration_ms")
        .first()
    )
    family = GaugeMetricFamily(
        "berth_scheduling_pass_last_success_timestamp_seconds",
        "Unix time at which the last successful scheduling pass finished.",
    )
    if last:
        family.add_metric([], last[0].timestamp() + last[1] / 1000)
    yield family


def _durable_metrics(teams: dict[int, m.Team], c: Counter) -> Iterator[Metric]:
    """Counters and histograms from portal.ops.tallies, with every team's series present."""
    slugs = {pk: info.name for pk, info in teams.items()}
    team_ids = sorted(slugs, key=slugs.get)
    admitted = CounterMetricFamily(
        "berth_admitted_jobs",
        "Jobs admitted (each admission of a requeued job counts).",
        labels=["team"],
    )
    preempted = CounterMetricFamily(
        "berth_preempted_jobs",
        "Jobs preempted, by reason (reclaim, priority).",
        labels=["team", "reason"],
    )
    requeued = CounterMetricFamily(
        "berth_requeued_jobs",
        "Jobs put back in their queue: after a preemption (requeued) or a lost node or worker.",
        labels=["team", "reason"],
    )
    finished = CounterMetricFamily(
        "berth_finished_jobs", "Jobs that ended, by final state.", labels=["team", "state"]
    )
    for key in [k for k in c if k[0] in ("admitted", "preempted", "requeued", "finished")]:
        if key[1] not in slugs:
            team_ids.append(key[1])  # a team deleted since; keep its history visible
    for team_id in dict.fromkeys(team_ids):
        team = slugs.get(team_id, str(team_id))
        admitted.add_metric([team], c[("admitted", team_id)])
        _labelled(preempted, c, "preempted", team_id, team, PREEMPTION_REASONS)
        _labelled(requeued, c, "requeued", team_id, team, REQUEUE_REASONS)
        _labelled(finished, c, "finished", team_id, team, FINISHED_STATES)
    yield from (admitted, preempted, requeued, finished)
    waits = HistogramMetricFamily(
        "berth_admission_wait_time_seconds",
        "Time from a job's submission or requeue to its admission (Kueue's admission wait).",
        labels=["team"],
    )
    for team_id in dict.fromkeys(team_ids):
        buckets = [c[("wait_bucket", team_id, i)] for i in range(len(t.WAIT_BUCKETS) + 1)]
        waits.add_metric(
            [slugs.get(team_id, str(team_id))],
            _cumulative(t.WAIT_BUCKETS, buckets),
            c[("wait_sum", team_id)],
        )
    yield waits
    passes = HistogramMetricFamily(
        "berth_scheduling_pass_duration_seconds",
        "Duration of successful scheduling passes (snapshot, plan, commit).",
    )
    buckets = [c[("pass_bucket", i)] for i in range(len(t.PASS_BUCKETS) + 1)]
    passes.add_metric([], _cumulative(t.PASS_BUCKETS, buckets), c[("pass_sum",)])
    yield passes


def _labelled(family, c: Counter, kind: str, team_id: int, team: str, known: tuple) -> None:
    values = {reason: 0 for reason in known}
    for key, n in c.items():
        if key[0] == kind and key[1] == team_id:
            values[key[2]] = values.get(key[2], 0) + n
    for reason, n in sorted(values.items()):
        family.add_metric([team, reason], n)


def _cumulative(bounds: tuple[float, ...], counts: list[float]) -> list[tuple[str, float]]:
    """Per-bucket counts → Prometheus' cumulative `le` buckets, ending with +Inf."""
    out, running = [], 0.0
    for bound, n in zip((*bounds, float("inf")), counts, strict=True):
        running += n
        out.append((floatToGoString(bound), running))
    return out


def _gauge(name: str, help_text: str, labels: list[str], values: dict) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family

"""Read models of the dashboard's pages, each a fixed number of queries.

Numbers shared with the API (quota, fair share, showback, waits) come from
portal.core.reports; this module shapes them for pages and adds what only the
pages need: queue rows with who is ahead, a job's history, the cluster grid.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.paginator import Paginator
from django.db.models import Count, Max, Q
from django.utils import timezone

from portal.core import budgets, reports
from portal.core.actions.arrays import ArrayState, array_states, collapse_arrays
from portal.core.models import Allocation, Gpu, Job, JobArray, JobEvent, Node, Team, Worker
from portal.dashboard.format import duration, relative
from scheduler.reasons import remedy

State = Job.State
QUEUE_ORDER = ("queue__name", "-priority", "submitted_at", "id")
PENDING_PER_PAGE = 50
AHEAD_SHOWN = 10
WORKERS_SHOWN = 64
LOGS_SHOWN = 8
LOG_TAIL_LINES = 15  # a log box shows this many last lines; "show all" opens the rest


# --- team overview -------------------------------------------------------------------


@dataclass
class Gauge:
    """One GPU flavor of a team's quota, drawn as a ring: used within nominal, then borrowed."""

    usage: reports.FlavorUsage

    @property
    def scale(self) -> int:
        return max(self.usage.nominal, self.usage.used, 1)

    @property
    def within_pct(self) -> float:
        return round(100 * min(self.usage.used, self.usage.nominal) / self.scale, 1)

    @property
    def borrowed_pct(self) -> float:
        return round(100 * self.usage.borrowed / self.scale, 1)

    @property
    def percent_of_nominal(self) -> int | None:
        if not self.usage.nominal:
            return None
        return round(100 * self.usage.used / self.usage.nominal)


def gauges(team: Team) -> list[Gauge]:
    return [Gauge(u) for u in reports.quota_usage(team)]


@dataclass
class BudgetGauge:
    """One GPU-hour budget drawn as a bar: used, the soft threshold and the forecast,
    on a scale of the limit (of the use, past it); a forecast past the end is cut there
    and said in words (`forecast_over`)."""

    status: budgets.BudgetStatus

    @property
    def scale(self) -> float:
        return max(self.status.limit, self.status.used)

    @property
    def forecast_over(self) -> bool:
        return (self.status.forecast or 0.0) > self.status.limit

    def _pct(self, value: float | None) -> float | None:
        return None if value is None else round(100 * min(value, self.scale) / self.scale, 1)

    @property
    def used_pct(self) -> float:
        return self._pct(self.status.used)

    @property
    def soft_pct(self) -> float | None:
        return self._pct(self.status.soft)

    @property
    def limit_pct(self) -> float:
        return self._pct(self.status.limit)

    @property
    def forecast_pct(self) -> float | None:
        return self._pct(self.status.forecast)


def budget_gauges(team: Team) -> list[BudgetGauge]:
    return [BudgetGauge(b) for b in budgets.team_budgets(team.pk, timezone.now())]


def cooldowns(team: Team, now: datetime) -> list[reports.FlavorBackoff]:
    """The flavors the team may not borrow at `now`: its reclaim backoffs still cooling
    down (BERTH_RECLAIM_BACKOFF); one whose cooldown ended holds nothing back."""
    return [b for b in reports.reclaim_backoff(team, now) if b.may_borrow_from > now]


@dataclass
class StandingRow:
    standing: reports.Standing
    rank: int  # 1 = served first
    is_self: bool
    demand: dict[str, dict[str, int]]  # flavor -> {"used", "pending"}
    top_share: float  # the cohort's largest share: the bar's full width

    @property
    def bar_pct(self) -> float:
        return min(100.0, round(100 * self.standing.share / self.top_share, 1))


def standing_rows(team: Team) -> list[StandingRow]:
    """The cohort's teams, served first at the top, with what each holds and waits for."""
    standings = reports.cohort_standing(team)
    demand = reports.cohort_demand(team)
    top = max((s.share for s in standings), default=0.0) or 1.0
    return [
        StandingRow(s, i, s.team == team.slug, demand.get(s.team, {}), top)
        for i, s in enumerate(standings, start=1)
    ]


@dataclass
class Showback:
    """GPU-hours per day and flavor (reports.gpu_hours_by_day) with totals."""

    days: list[dict]
    flavors: list[str]
    totals: dict[str, float]

    @property
    def total(self) -> float:
        return round(sum(self.totals.values()), 1)

    def table(self) -> list[tuple[str, list[float], float]]:
        """(date, GPU-hours per flavor, total) per day, oldest first."""
        rows = []
        for d in self.days:
            values = [d[f] for f in self.flavors]
            rows.append((d["date"], values, round(sum(values), 2)))
        return rows

    def chart(self) -> dict:
        return {
            "labels": [d["date"] for d in self.days],
            "series": [{"label": f, "data": [d[f] for d in self.days]} for f in self.flavors],
        }


def showback(team: Team, days: int = 30) -> Showback:
    rows = reports.gpu_hours_by_day(team, days)
    flavors = [k for k in (rows[0] if rows else {}) if k != "date"]
    totals = {f: round(sum(r[f] for r in rows), 1) for f in flavors}
    return Showback(days=rows, flavors=flavors, totals=totals)


def waits(team: Team) -> list[dict]:
    """reports.wait_by_week with the waits also written for people."""
    return [
        w | {"median_text": duration(w["median_wait_s"]), "p90_text": duration(w["p90_wait_s"])}
        for w in reports.wait_by_week(team)
    ]


def wait_chart(weeks: list[dict]) -> dict:
    return {
        "labels": [w["week"] for w in weeks],
        "median_min": [round(w["median_wait_s"] / 60, 1) for w in weeks],
        "p90_min": [round(w["p90_wait_s"] / 60, 1) for w in weeks],
    }


def recent_jobs(team: Team, limit: int = 6) -> list[Job]:
    return list(
        Job.objects.filter(team=team)
        .select_related("submitted_by", "flavor", "queue")
        .order_by("-submitted_at", "-id")[:limit]
    )


# --- queue ---------------------------------------------------------------------------


@dataclass
class PendingRow:
    job: Job
    position: int | None  # 1-based within its queue, the scheduler's queue order; None: held
    queue_size: int
    ahead: Job | None  # the job directly ahead of it in its queue
    waited: str
    estimate: str
    # A job array's pending tasks are one row, at its first pending task (`job`).
    array: ArrayState | None = None

    @property
    def remedy(self) -> str:
        return remedy(self.job.reason_code)

    @property
    def array_display(self) -> str:
        """squeue's `12_[3-9%3]` for the array's pending tasks."""
        return self.array.display

    @property
    def array_counts(self) -> list[tuple[str, int]]:
        """The array's tasks per state, states with none left out, in life order."""
        return [(s, self.array.counts[s]) for s in State.values if self.array.counts.get(s)]


def pending_page(team: Team, page_number, now: datetime):
    """One page of the team's pending jobs in queue order, with positions and who is ahead.

    The order is the scheduler's within a queue (priority, then submit time,
    then id: scheduler.ordering.queue_key), so positions match its verdicts. A job
    array's pending tasks are one entry, at its first one, with the array's counts per
    state (as squeue collapses them): positions count entries. Jobs held for their
    dependencies are not in that order (the scheduler does not see them:
    actions.dependencies): they come after each queue's others, without a position.
    """
    pending = collapse_arrays(Job.objects.filter(team=team, state=State.PENDING))
    counted = pending.values_list("queue__name", "awaiting_dependency").annotate(n=Count("pk"))
    sizes, queued = defaultdict(int), defaultdict(int)
    for name, held, n in counted.values_list("queue__name", "awaiting_dependency", "n"):
        sizes[name] += n
        queued[name] += 0 if held else n
    paginator = Paginator(range(sum(sizes.values())), PENDING_PER_PAGE)
    page = paginator.get_page(page_number)
    start = page.start_index() - 1 if paginator.count else 0
    lead_in = 1 if start > 0 else 0
    order = (QUEUE_ORDER[0], "awaiting_dependency", *QUEUE_ORDER[1:])
    jobs = list(
        pending.select_related("submitted_by", "flavor", "queue").order_by(*order)[
            start - lead_in : start + PENDING_PER_PAGE
        ]
    )
    offsets, total = {}, 0
    for name in sorted(sizes):
        offsets[name], total = total, total + sizes[name]
    arrays = _array_states(jobs[lead_in:])
    rows = []
    for i, job in enumerate(jobs[lead_in:]):
        previous = jobs[i + lead_in - 1] if i + lead_in > 0 else None
        same_queue = previous is not None and previous.queue_id == job.queue_id
        held = job.awaiting_dependency
        rows.append(
            PendingRow(
                job=job,
                position=None if held else start + i + 1 - offsets[job.queue.name],
                queue_size=queued[job.queue.name],
                ahead=previous if same_queue and not held else None,
                waited=duration((now - job.submitted_at).total_seconds()),
                estimate=relative(job.estimated_start_at, now),
                array=arrays.get(job.array_id),
            )
        )
    return rows, page


def _array_states(jobs: list[Job]) -> dict[int, ArrayState]:
    """The ArrayState of each array among the jobs (no query when there is none)."""
    ids = {j.array_id for j in jobs if j.array_id is not None}
    if not ids:
        return {}
    return array_states(list(JobArray.objects.filter(pk__in=ids)))


@dataclass
class RunningRow:
    job: Job
    nodes: list[str]
    elapsed_s: float
    avg_util: float | None

    @property
    def pct(self) -> float:
        return min(100.0, round(100 * self.elapsed_s / self.job.max_runtime_seconds, 1))

    @property
    def elapsed(self) -> str:
        return duration(self.elapsed_s)

    @property
    def max_runtime(self) -> str:
        return duration(self.job.max_runtime_seconds)

    @property
    def idle(self) -> bool:
        return self.avg_util is not None and self.avg_util < reports.IDLE_UTILIZATION_PCT


def running_rows(team: Team, now: datetime) -> list[RunningRow]:
    """The team's admitted, running and preempting jobs with their nodes and elapsed time."""
    jobs = list(
        Job.objects.filter(team=team, state__in=Job.ACTIVE_STATES)
        .select_related("submitted_by", "flavor", "queue")
        .order_by("admitted_at", "id")
    )
    nodes, utils = defaultdict(set), defaultdict(list)
    for job_id, host, util in Allocation.objects.filter(
        active=True, job__in=[j.pk for j in jobs]
    ).values_list("job_id", "node__hostname", "gpu__utilization_pct"):
        nodes[job_id].add(host)
        if util is not None:
            utils[job_id].append(util)
    rows = []
    for job in jobs:
        since = job.started_at or job.admitted_at or now
        u = utils.get(job.pk)
        rows.append(
            RunningRow(
                job=job,
                nodes=sorted(nodes.get(job.pk, ())),
                elapsed_s=max(0.0, (now - since).total_seconds()),
                avg_util=round(sum(u) / len(u), 1) if u else None,
            )
        )
    return rows


def finished_jobs(team: Team, limit: int = 15) -> list[Job]:
    return list(
        Job.objects.filter(team=team, state__in=Job.TERMINAL_STATES)
        .select_related("submitted_by", "flavor")
        .order_by("-finished_at", "-id")[:limit]
    )


# --- job ---------------------------------------------------------------------------


@dataclass
class Preemption:
    event: JobEvent
    reason: str
    preemptor_id: int | None
    preemptor_team: str = ""
    preemptor_name: str = ""  # empty unless the viewer may see that job


@dataclass
class WorkerView:
    worker: Worker
    gpus: list[Gpu] = field(default_factory=list)


@dataclass
class WorkerLog:
    """One worker's reported output: its last lines, and all of it behind "show all"."""

    worker: Worker

    @property
    def lines(self) -> list[str]:
        return self.worker.log_tail.rstrip("\n").split("\n")

    @property
    def tail(self) -> str:
        return "\n".join(self.lines[-LOG_TAIL_LINES:])

    @property
    def hidden(self) -> int:
        """Lines above the tail (0: the tail is all of it)."""
        return max(0, len(self.lines) - LOG_TAIL_LINES)


@dataclass
class JobHistory:
    events: list[JobEvent]
    preemptions: list[Preemption]
    attempt: int | None  # the attempt whose workers are shown
    workers: list[WorkerView]
    more_workers: int

    @property
    def logs(self) -> list[WorkerLog]:
        return [WorkerLog(w.worker) for w in self.workers[:LOGS_SHOWN] if w.worker.log_tail]


def job_history(job: Job, viewer_team_ids: set[int] | None) -> JobHistory:
    """Timeline, preemptions and the latest attempt's workers with their GPUs.

    `viewer_team_ids` are the teams whose job names the viewer may see (None: all).
    """
    events = list(job.events.select_related("actor").order_by("at", "id"))
    preemptions = _preemptions(events, viewer_team_ids)
    attempt = job.worker_set.aggregate(a=Max("attempt"))["a"]
    workers, more = [], 0
    if attempt is not None:
        qs = job.worker_set.filter(attempt=attempt)
        listed = list(qs.select_related("node").order_by("rank")[:WORKERS_SHOWN])
        more = max(0, qs.count() - WORKERS_SHOWN) if len(listed) == WORKERS_SHOWN else 0
        gpus = defaultdict(list)
        for a in (
            Allocation.objects.filter(worker__in=listed)
            .select_related("gpu")
            .order_by("gpu__index")
        ):
            gpus[a.worker_id].append(a.gpu)
        workers = [WorkerView(w, gpus.get(w.pk, [])) for w in listed]
    return JobHistory(events, preemptions, attempt, workers, more)


def _preemptions(events: list[JobEvent], viewer_team_ids: set[int] | None) -> list[Preemption]:
    found = [e for e in events if e.kind == "preempted"]
    ids = {e.data.get("preemptor") for e in found if isinstance(e.data.get("preemptor"), int)}
    by_id = {
        r["pk"]: r
        for r in Job.objects.filter(pk__in=ids).values("pk", "name", "team_id", "team__slug")
    }
    out = []
    for e in found:
        p = Preemption(e, str(e.data.get("reason", "")), e.data.get("preemptor"))
        row = by_id.get(p.preemptor_id)
        if row:
            p.preemptor_team = row["team__slug"]
            if viewer_team_ids is None or row["team_id"] in viewer_team_ids:
                p.preemptor_name = row["name"]
        out.append(p)
    return out


@dataclass
class Ahead:
    count: int
    jobs: list[Job]  # the head of the line, at most AHEAD_SHOWN

    @property
    def position(self) -> int:
        return self.count + 1

    @property
    def more(self) -> int:
        return self.count - len(self.jobs)


def jobs_ahead(job: Job) -> Ahead:
    """Pending jobs of the same queue that go before this one (scheduler.ordering.queue_key)."""
    before = (
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, submitted_at__lt=job.submitted_at)
        | Q(priority=job.priority, submitted_at=job.submitted_at, pk__lt=job.pk)
    )
    qs = Job.objects.filter(
        queue_id=job.queue_id, state=State.PENDING, awaiting_dependency=False
    ).filter(before)
    head = list(qs.select_related("submitted_by").order_by(*QUEUE_ORDER[1:])[:AHEAD_SHOWN])
    count = len(head) if len(head) < AHEAD_SHOWN else qs.count()
    return Ahead(count=count, jobs=head)


def job_parents(job: Job) -> list[Job]:
    """The jobs it depends on (its team's, by the rule of portal.core.jobspec), by id."""
    if not job.dependency:
        return []
    parents = Job.objects.filter(team_id=job.team_id, dependent_edges__child_id=job.pk)
    return list(parents.distinct().order_by("pk").only("pk", "name", "state"))


# --- cluster -------------------------------------------------------------------------


@dataclass
class GpuCell:
    gpu: Gpu
    state: str  # free, ours, other, unhealthy, lost, unschedulable
    team: str = ""
    job_id: int | None = None
    job_name: str = ""
    idle: bool = False  # allocated but under the idle threshold

    @property
    def util(self) -> int | None:
        u = self.gpu.utilization_pct
        return None if u is None else round(u)

    @property
    def label(self) -> str:
        g = self.gpu
        parts = [f"GPU {g.index}", CELL_LABELS[self.state]]
        if self.team:
            who = f"job #{self.job_id} {self.job_name}".strip() if self.job_name else ""
            parts.append(f"team {self.team}" + (f", {who}" if who else ""))
        if g.health != Gpu.Health.HEALTHY and g.health_reason:
            parts.append(g.health_reason)
        if self.util is not None:
            parts.append(f"{self.util}% busy")
        if g.memory_used_mib is not None and g.memory_mib:
            parts.append(f"{g.memory_used_mib / 1024:.0f}/{g.memory_mib / 1024:.0f} GiB")
        if g.temperature_c is not None:
            parts.append(f"{g.temperature_c:.0f} °C")
        if g.power_w is not None:
            parts.append(f"{g.power_w:.0f} W")
        return " · ".join(parts)


CELL_LABELS = {
    "free": "free",
    "ours": "allocated to your team",
    "other": "allocated",
    "unhealthy": "unhealthy",
    "lost": "lost",
    "unschedulable": "free but the node takes no jobs",
}


@dataclass
class NodeCard:
    node: Node
    cells: list[GpuCell]

    @property
    def free(self) -> int:
        return sum(1 for c in self.cells if c.state == "free")

    @property
    def state_label(self) -> str:
        return self.node.state.replace("_", " ")


@dataclass
class ClusterSummary:
    flavor: str
    total: int = 0
    free: int = 0
    ours: int = 0
    other: int = 0
    unhealthy: int = 0
    idle: int = 0  # allocated, under the idle threshold
    nodes_down: int = 0  # not ready or unknown
    nodes_cordoned: int = 0  # cordoned or draining


def cluster_racks(team: Team, *, job_names_of: set[int] | None, now: datetime):
    """Nodes grouped by rack, every GPU a cell; and a summary per flavor. Three queries.

    `job_names_of`: team ids whose job names the viewer may see (None: all). An
    allocated GPU is flagged idle as reports.idle_jobs flags jobs: under the
    threshold, once its job has run past the grace period.
    """
    nodes = list(Node.objects.select_related("flavor").prefetch_related("gpus"))
    settled = now - timedelta(seconds=reports.IDLE_GRACE_S)
    held = {
        gpu_id: (job_id, team_id, slug, name, started is not None and started <= settled)
        for gpu_id, job_id, team_id, slug, name, started in Allocation.objects.filter(
            active=True
        ).values_list(
            "gpu_id", "job_id", "job__team_id", "job__team__slug", "job__name", "job__started_at"
        )
    }
    racks: dict[str, list[NodeCard]] = defaultdict(list)
    summary: dict[str, ClusterSummary] = {}
    for node in nodes:
        s = summary.setdefault(node.flavor.name, ClusterSummary(node.flavor.name))
        cells = [_cell(g, node, held.get(g.pk), team, job_names_of) for g in node.gpus.all()]
        cells.sort(key=lambda c: (c.gpu.index, c.state == "lost"))
        _count(s, node, cells)
        racks[node.rack or "—"].append(NodeCard(node, cells))
    ordered = [
        (rack, sorted(cards, key=lambda c: c.node.hostname)) for rack, cards in racks.items()
    ]
    return sorted(ordered), sorted(summary.values(), key=lambda s: s.flavor)


def _cell(gpu: Gpu, node: Node, held, team: Team, job_names_of) -> GpuCell:
    if gpu.health == Gpu.Health.LOST:
        return GpuCell(gpu, "lost")
    if held:
        job_id, team_id, slug, name, settled = held
        visible = job_names_of is None or team_id in job_names_of
        util = gpu.utilization_pct
        idle = settled and util is not None and util < reports.IDLE_UTILIZATION_PCT
        return GpuCell(
            gpu,
            "ours" if team_id == team.pk else "other",
            team=slug,
            job_id=job_id if visible else None,
            job_name=name if visible else "",
            idle=idle,
        )
    if gpu.health != Gpu.Health.HEALTHY:
        return GpuCell(gpu, "unhealthy")
    return GpuCell(gpu, "free" if node.schedulable else "unschedulable")


def _count(s: ClusterSummary, node: Node, cells: list[GpuCell]) -> None:
    if node.condition != Node.Condition.READY:
        s.nodes_down += 1
    elif node.cordon != Node.Cordon.NONE:
        s.nodes_cordoned += 1
    for c in cells:
        if c.state == "lost":
            continue
        s.total += 1
        if c.state in ("free", "ours", "other"):
            setattr(s, c.state, getattr(s, c.state) + 1)
        elif c.state == "unhealthy":
            s.unhealthy += 1
        s.idle += c.idle

"""What a valid job is, checked the same way for the API, the CLI and the dashboard.

`clean_job_spec` takes already-typed values (the serializer or form parsed
them) and checks them against the team's queues, quotas and nodes. Every
problem is reported per field, all at once, so a user fixes them in one go.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import signal
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, Sum

from portal.core.models import Gpu, GpuFlavor, Job, Node, Queue, Quota, Team
from portal.core.outbound import url_problem
from scheduler import capacity
from scheduler import dependency as dep
from scheduler import model as m

MAX_COMMAND_BYTES = 16 * 1024
MAX_ENV_BYTES = 32 * 1024
MAX_ENV_VARS = 200
MAX_WORKERS = 4096
PRIORITY_RANGE = (-1000, 1000)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: no trailing newline
# A job name as a container engine accepts one (Docker's and Podman's container
# names: [a-zA-Z0-9][a-zA-Z0-9_.-]*), at most a DNS label long (Kubernetes' limit
# for a container name), so it can name the job's containers anywhere.
MAX_NAME_CHARS = 63
JOB_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*\Z")
# An image reference, in the grammar of distribution/reference (Docker, Podman, containerd):
# [domain[:port]/]path[:tag][@digest]; path components lower case; at most 255 characters
# for the name.
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[_.]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::{_TAG})?(?:@{_DIGEST})?\Z"
)
MAX_IMAGE_NAME_CHARS = 255
# Names the agent sets for the gang; a job may not override them.
RESERVED_ENV = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
}
# Dependencies: at most this many parent jobs per job (Slurm sets no limit; a bound
# keeps a submission's lookups and its edge insert small).
MAX_DEPENDENCY_PARENTS = 100
MAX_DEPENDENCY_CHARS = 1000
MAX_ID = 2**63 - 1  # a job id is a bigint
# The state changes a job's `notify` or a team webhook may ask for, in the order an event
# is named when several match (a failed job is `failed` before it is `ended`).
JOB_EVENTS = ("started", "preempted", "failed", "ended")
NOTIFY_DEFAULT_ON = ["ended"]
NOTIFY_FIELDS = {"url", "on", "email"}
SIGNALS = {
    s.name for s in signal.Signals if s.name.startswith("SIG") and not s.name.startswith("SIG_")
}


class SpecError(Exception):
    """Field name → list of messages."""

    def __init__(self, fields: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()))
        self.fields = fields


@dataclass
class JobSpec:
    name: str
    queue: Queue
    flavor: GpuFlavor
    image: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    workers: int = 1
    gpus_per_worker: int = 1
    priority: int = 0
    preemptible: bool = True
    max_runtime_seconds: int = 3600
    checkpoint_signal: str = "SIGTERM"
    grace_period_seconds: int = 30
    # Dependencies (scheduler/dependency.py): (type, parent id) pairs, and singleton.
    depends_on: tuple[tuple[str, int], ...] = ()
    singleton: bool = False
    notify: dict | None = None  # {"url": str | None, "on": [event, …], "email": bool}
    # A task of a job array: set by actions.arrays through submit_many, never from input.
    array_id: int | None = None
    array_index: int | None = None

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def is_dependent(self) -> bool:
        """Whether the job is held for dependencies when it is stored."""
        return bool(self.depends_on) or self.singleton

    @property
    def dependency(self) -> str:
        """The dependencies normalized, as Slurm writes them: `afterok:12:13,singleton`."""
        return format_dependency(self.depends_on, self.singleton)

    def fingerprint(self) -> str:
        """A digest of the request: the same Idempotency-Key with another body is a conflict."""
        # Not dataclasses.asdict: it would deep-copy the Queue and GpuFlavor rows first.
        data = {name: getattr(self, name) for name in _fingerprinted()}
        data |= {"queue": self.queue.name, "flavor": self.flavor.name}
        if self.is_dependent:  # absent otherwise: keys stored before dependencies still match
            data["dependency"] = self.dependency
        if self.notify is None:
            del data["notify"]  # the digest of a job without one is what it was before
        return hashlib.sha256(_SORTED_JSON.encode(data).encode()).hexdigest()


_DEP_FIELDS = ("depends_on", "singleton")
_SORTED_JSON = json.JSONEncoder(sort_keys=True)  # json.dumps(…, sort_keys=True), built once


@functools.cache
def _fingerprinted() -> tuple[str, ...]:
    """The JobSpec fields a fingerprint reads (then queue and flavor by name)."""
    return tuple(f.name for f in fields(JobSpec) if f.name not in _DEP_FIELDS)


class SpecLookups:
    """The team's queues, the flavors and the fit limits a spec is checked against,
    each read once and remembered: validating many specs with one SpecLookups
    (a bulk submission) costs a fixed number of queries, not a few per spec."""

    def __init__(self, team: Team, queues: list[Queue] = ()):
        self.team = team
        self._queues: dict[str, Queue] = {q.name: q for q in queues}
        self._all_queues = False
        self._flavors: dict[str, GpuFlavor] | None = None
        self._nodes: dict[int, tuple[m.Node, ...]] = {}
        self._gangs: dict[tuple[int, int], capacity.GangLimit | None] = {}
        self._ceiling: dict[int, int] = {}
        self._team_jobs: set[int] = set()
        self._fits: dict[tuple[int, int, int], tuple] = {}

    def queue(self, name: str) -> Queue | None:
        if name not in self._queues and not self._all_queues:
            self._load_queues()
        return self._queues.get(name)

    def queue_names(self) -> list[str]:
        if not self._all_queues:
            self._load_queues()
        return sorted(self._queues)

    def _load_queues(self) -> None:
        for queue in Queue.objects.filter(team=self.team):
            queue.team = self.team
            self._queues.setdefault(queue.name, queue)
        self._all_queues = True

    def flavors(self) -> dict[str, GpuFlavor]:
        if self._flavors is None:
            self._flavors = {f.name: f for f in GpuFlavor.objects.all()}
        return self._flavors

    def nodes(self, flavor: GpuFlavor) -> tuple[m.Node, ...]:
        if flavor.pk not in self._nodes:
            self._nodes[flavor.pk] = flavor_nodes(flavor)
        return self._nodes[flavor.pk]

    def largest_node(self, flavor: GpuFlavor) -> int | None:
        """GPUs of the flavor's largest node, or None while no node is registered."""
        return max((n.total_gpus for n in self.nodes(flavor)), default=None)

    def gang_limit(self, flavor: GpuFlavor, per_worker: int) -> capacity.GangLimit | None:
        """The largest gang of `per_worker`-GPU workers the flavor's nodes can host;
        ask only for a `per_worker` the largest node holds (callers remember these)."""
        key = (flavor.pk, per_worker)
        if key not in self._gangs:
            topology = settings.BERTH["TOPOLOGY_KEY"]
            self._gangs[key] = capacity.largest_gang(self.nodes(flavor), per_worker, topology)
        return self._gangs[key]

    def missing_jobs(self, ids: set[int]) -> set[int]:
        """Which of `ids` are not jobs of the team (absent or another team's: the same
        answer, so a stranger learns nothing); jobs found are remembered."""
        unknown = ids - self._team_jobs
        if unknown:
            found = Job.objects.filter(team=self.team, pk__in=sorted(unknown))
            self._team_jobs.update(found.values_list("pk", flat=True))
        return ids - self._team_jobs

    def max_gpus_ever(self, flavor: GpuFlavor) -> int:
        if flavor.pk not in self._ceiling:
            self._ceiling[flavor.pk] = max_gpus_ever(self.team, flavor)
        return self._ceiling[flavor.pk]

    def fit_problems(self, flavor: GpuFlavor, per_worker: int, workers: int) -> tuple:
        """fit_problems (below), once per gang shape: a bulk's jobs mostly share one."""
        key = (flavor.pk, per_worker, workers)
        if key not in self._fits:
            self._fits[key] = fit_problems(self, flavor, per_worker, workers)
        return self._fits[key]


def clean_job_spec(team: Team, data: dict[str, Any], lookups: SpecLookups | None = None) -> JobSpec:
    """Return a JobSpec with the queue's defaults filled in, or raise SpecError.

    Pass one `lookups` (of the same team) to validate many specs cheaply.
    """
    lookups = lookups or SpecLookups(team)
    errors: dict[str, list[str]] = {}
    queue = _lookup_queue(lookups, data.get("queue") or "default", errors)
    flavor = _lookup_flavor(lookups, data.get("flavor"), errors)
    spec = _with_defaults(data, queue, flavor)
    _check_text(spec, errors)
    _check_env(spec.env, errors)
    _check_numbers(spec, errors)
    spec.notify = clean_notify(spec.notify, errors)
    if queue and spec.max_runtime_seconds > queue.max_runtime_seconds:
        _add(
            errors,
            "max_runtime_seconds",
            f"Queue {queue.name} allows at most {queue.max_runtime_seconds} s.",
        )
    if flavor and not errors.keys() & {"workers", "gpus_per_worker"}:
        _check_fits(lookups, spec, errors)
    text = data.get("dependency")
    if text and not (isinstance(text, str) and not text.strip()):
        spec.depends_on, spec.singleton = _check_dependency(lookups, text, errors)
    if errors:
        raise SpecError(errors)
    return spec


def _add(errors, name: str, message: str) -> None:
    errors.setdefault(name, []).append(message)


def _lookup_queue(lookups: SpecLookups, name: str, errors) -> Queue | None:
    queue = lookups.queue(name)
    if queue is None:
        known = ", ".join(lookups.queue_names()) or "none"
        team = lookups.team.slug
        _add(errors, "queue", f"Team {team} has no queue {name!r} (queues: {known}).")
    return queue


def _lookup_flavor(lookups: SpecLookups, name, errors) -> GpuFlavor | None:
    """The named flavor; none named, the cluster's only flavor (as Slurm's default
    partition). Where there are several, the error names them."""
    flavors = lookups.flavors()
    known = ", ".join(sorted(flavors)) or "none"
    if not name:
        if len(flavors) == 1:
            return next(iter(flavors.values()))
        _add(errors, "flavor", f"This field is required (flavors: {known}).")
        return None
    flavor = flavors.get(name)
    if flavor is None:
        _add(errors, "flavor", f"Unknown GPU flavor {name!r} (flavors: {known}).")
    return flavor


def _with_defaults(data: dict[str, Any], queue: Queue | None, flavor: GpuFlavor | None) -> JobSpec:
    get = data.get
    priority, preemptible, runtime = get("priority"), get("preemptible"), get("max_runtime_seconds")
    if priority is None:
        priority = queue.default_priority if queue else 0
    if preemptible is None:
        preemptible = queue.preemptible_default if queue else True
    if runtime is None:
        runtime = queue.default_runtime_seconds if queue else 3600
    signal_name = get("checkpoint_signal")
    return JobSpec(
        name=_or(get("name"), ""),
        queue=queue,
        flavor=flavor,
        image=_or(get("image"), ""),
        command=list(_or(get("command"), [])),
        env=dict(_or(get("env"), {})),
        workers=_or(get("workers"), 1),
        gpus_per_worker=_or(get("gpus_per_worker"), 1),
        priority=priority,
        preemptible=preemptible,
        max_runtime_seconds=runtime,
        checkpoint_signal="SIGTERM" if signal_name is None else str(signal_name).upper(),
        grace_period_seconds=_or(get("grace_period_seconds"), 30),
        notify=get("notify"),
    )


def _or(value, default):
    """The value given, or the default for a field left out (None)."""
    return default if value is None else value


def _check_text(spec: JobSpec, errors) -> None:
    if not spec.name.strip():
        _add(errors, "name", "This field is required.")
    else:
        _check_name(spec.name, errors)
    if not spec.image.strip():
        _add(errors, "image", "This field is required.")
    else:
        _check_image(spec.image, errors)
    if not spec.command or not all(isinstance(a, str) for a in spec.command):
        _add(errors, "command", "Give the command as a non-empty list of strings.")
    elif not _json_surely_within(spec.command, MAX_COMMAND_BYTES) and (
        len(json.dumps(spec.command).encode()) > MAX_COMMAND_BYTES
    ):
        _add(errors, "command", f"The command is longer than {MAX_COMMAND_BYTES // 1024} KiB.")
    if spec.checkpoint_signal not in SIGNALS:
        _add(
            errors,
            "checkpoint_signal",
            f"Unknown signal {spec.checkpoint_signal!r}, e.g. SIGTERM or SIGUSR1.",
        )


def _check_name(name: str, errors) -> None:
    """A name a container engine would take: length and characters (JOB_NAME)."""
    if len(name) > MAX_NAME_CHARS:
        _add(errors, "name", f"At most {MAX_NAME_CHARS} characters (this one has {len(name)}).")
    if not JOB_NAME.match(name):
        _add(
            errors,
            "name",
            "Use letters, digits, '_', '.' and '-' only, starting with a letter or digit "
            "(no spaces), e.g. vit-large.run_2.",
        )


def _check_image(image: str, errors) -> None:
    """An image reference as `docker pull` parses it (IMAGE_REFERENCE)."""
    if problem := _image_problem(image):
        _add(errors, "image", problem)


@functools.lru_cache(maxsize=1024)  # the few images a process sees: the bulk's jobs share one
def _image_problem(image: str) -> str | None:
    match = IMAGE_REFERENCE.match(image)
    if match is None:
        return (
            "Not an image reference: write [registry[:port]/]repository[:tag][@digest], "
            "repository in lower case, e.g. ghcr.io/acme/trainer:2.4 or python:3.11."
        )
    if len(match["name"]) > MAX_IMAGE_NAME_CHARS:
        return f"The repository name is longer than {MAX_IMAGE_NAME_CHARS} characters."
    return None


def _check_env(env: dict, errors) -> None:
    bad = [k for k in env if not isinstance(k, str) or not ENV_NAME.match(k)]
    if bad:
        _add(errors, "env", f"Invalid variable names: {', '.join(map(str, bad[:5]))}.")
    if any(not isinstance(v, str) for v in env.values()):
        _add(errors, "env", "Values must be strings.")
    reserved = sorted(RESERVED_ENV & env.keys())
    if reserved:
        _add(errors, "env", f"Set by Berth for the gang, not by the job: {', '.join(reserved)}.")
    if len(env) > MAX_ENV_VARS or (
        not _json_surely_within(env, MAX_ENV_BYTES)
        and len(json.dumps(env, default=str).encode()) > MAX_ENV_BYTES
    ):
        _add(errors, "env", f"At most {MAX_ENV_VARS} variables and {MAX_ENV_BYTES // 1024} KiB.")


def _json_surely_within(value: list | dict, limit: int) -> bool:
    """Whether json.dumps of a list of strings, or an object of strings, is surely at
    most `limit` bytes, found without writing it: json.dumps writes a character as at
    most 12 bytes (ensure_ascii: an astral one as two \\uXXXX escapes) and adds 4 a
    string (its quotes, then `, ` or `: `) and 2 (the brackets). False when unsure
    (other values, or too close): the caller then measures."""
    if type(value) is dict:
        keys, values = value.keys(), value.values()
        if not (_ONLY_STR.issuperset(map(type, keys)) and _ONLY_STR.issuperset(map(type, values))):
            return False
        chars, strings = sum(map(len, keys)) + sum(map(len, values)), 2 * len(value)
    elif _ONLY_STR.issuperset(map(type, value)):
        chars, strings = sum(map(len, value)), len(value)
    else:
        return False
    return 12 * chars + 4 * strings + 2 <= limit


_ONLY_STR = frozenset({str})


def clean_notify(notify: dict | None, errors) -> dict | None:
    """The job's `notify` with its defaults (`on`: ended; no e-mail), or None for none;
    problems go to `notify.<field>`. The URL rule is portal.core.outbound's."""
    if notify is None:
        return None
    if not isinstance(notify, dict):
        _add(errors, "notify", 'Give an object, e.g. {"url": "https://…", "on": ["failed"]}.')
        return None
    unknown = sorted(set(notify) - NOTIFY_FIELDS)
    if unknown:
        _add(errors, "notify", f"Unknown fields {', '.join(unknown)} (known: url, on, email).")
    url, email = notify.get("url"), notify.get("email", False)
    on = notify.get("on", NOTIFY_DEFAULT_ON)
    if url is not None and (problem := notify_url_problem(url)):
        _add(errors, "notify.url", problem)
    if not isinstance(email, bool):
        _add(errors, "notify.email", "Must be true or false.")
    if problem := events_problem(on) or (not on and "Name at least one event."):
        _add(errors, "notify.on", problem)
        on = []
    if url is None and email is not True:
        _add(errors, "notify", "Name a url, or set email to true (or leave notify out).")
    return {"url": url, "on": sorted(set(on), key=JOB_EVENTS.index), "email": email is True}


def notify_url_problem(url) -> str | None:
    """Why a webhook URL (a job's or a team's) is refused, or None."""
    if not isinstance(url, str) or not url:
        return "Give the URL as a non-empty string."
    return url_problem(url, allow_private=settings.BERTH["NOTIFY_ALLOW_PRIVATE"])


def events_problem(events) -> str | None:
    """Why a list of job events is refused, or None (an empty list is allowed)."""
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        return f"Give a list of events from {', '.join(JOB_EVENTS)}."
    unknown = sorted(set(events) - set(JOB_EVENTS))
    if unknown:
        return f"Unknown events {', '.join(unknown)} (known: {', '.join(JOB_EVENTS)})."
    return None


def _check_numbers(spec: JobSpec, errors) -> None:
    if not 1 <= spec.workers <= MAX_WORKERS:
        _add(errors, "workers", f"Must be between 1 and {MAX_WORKERS}.")
    if spec.gpus_per_worker < 1:
        _add(errors, "gpus_per_worker", "Must be at least 1.")
    if spec.max_runtime_seconds < 1:
        _add(errors, "max_runtime_seconds", "Must be at least 1 second.")
    if spec.grace_period_seconds < 0 or spec.grace_period_seconds > 3600:
        _add(errors, "grace_period_seconds", "Must be between 0 and 3600 seconds.")
    low, high = PRIORITY_RANGE
    if not low <= spec.priority <= high:
        _add(errors, "priority", f"Must be between {low} and {high}.")


def _check_fits(lookups: SpecLookups, spec: JobSpec, errors) -> None:
    for name, message in lookups.fit_problems(spec.flavor, spec.gpus_per_worker, spec.workers):
        _add(errors, name, message)


def fit_problems(
    lookups: SpecLookups, flavor: GpuFlavor, per_worker: int, workers: int
) -> tuple[tuple[str, str], ...]:
    """(field, message) for each reason a gang of `workers` × `per_worker` GPUs of the
    flavor could never run for the team: no node that large, no rack or block that
    holds the gang, more than the team could ever get."""
    problems = []
    largest_node = lookups.largest_node(flavor)
    if largest_node is not None and per_worker > largest_node:
        problems.append(
            (
                "gpus_per_worker",
                f"No {flavor.name} node has {per_worker} GPUs (the largest has {largest_node}).",
            )
        )
    elif largest_node is not None:
        limit = lookups.gang_limit(flavor, per_worker)
        if why := capacity.why_too_big(limit, workers, flavor.name):
            problems.append(("workers", why))
    ceiling = lookups.max_gpus_ever(flavor)
    if workers * per_worker > ceiling:
        problems.append(
            (
                "workers",
                f"The gang needs {workers * per_worker} {flavor.name} GPUs but team {lookups.team.slug} can get at most "
                f"{ceiling} (nominal quota plus what it may borrow).",
            )
        )
    return tuple(problems)


def parse_dependency(text: str) -> tuple[tuple[tuple[str, int], ...], bool]:
    """(type, job id) pairs in first-seen order without repeats, and whether `singleton`
    is asked, from Slurm's syntax `afterok:12:13,afterany:14,singleton`; ValueError
    with the message for the user otherwise. Berth takes Slurm's `,` (all must hold)
    but not its `?` (any may hold), `+minutes` delays or array types."""
    if "?" in text:
        raise ValueError(
            "Use ',' between dependencies (all must hold); '?' (any) is not supported."
        )
    pairs: dict[tuple[str, int], None] = {}
    singleton = False
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError("An empty dependency between commas: write afterok:12,singleton.")
        kind, _, ids = part.partition(":")
        if kind == dep.SINGLETON and not ids:
            singleton = True
            continue
        if kind not in dep.PARENT_TYPES:
            known = ", ".join(f"{t}:JOB" for t in dep.PARENT_TYPES)
            raise ValueError(
                f"Unknown dependency {part!r}: write TYPE:JOB[:JOB…] ({known}) or singleton, "
                "separated by ',', e.g. afterok:12:13,singleton."
            )
        if not ids:
            raise ValueError(f"{kind} needs job ids: {kind}:12 or {kind}:12:13.")
        for job_id in ids.split(":"):
            if "+" in job_id:
                raise ValueError(f"Delays such as {kind}:{job_id} are not supported.")
            if not job_id.isascii() or not job_id.isdigit() or not 1 <= int(job_id) <= MAX_ID:
                raise ValueError(f"{job_id!r} in {part!r} is not a job id (a positive number).")
            pairs[(kind, int(job_id))] = None
    return tuple(pairs), singleton


def format_dependency(depends_on, singleton: bool) -> str:
    """The normalized text of parse_dependency's result: types in PARENT_TYPES order."""
    parts = []
    for kind in dep.PARENT_TYPES:
        ids = [str(job_id) for t, job_id in depends_on if t == kind]
        if ids:
            parts.append(":".join([kind, *ids]))
    return ",".join(parts + ([dep.SINGLETON] if singleton else []))


def _check_dependency(lookups: SpecLookups, text, errors) -> tuple[tuple, bool]:
    """The parsed dependencies, or ((), False) with a `dependency` error. Parents must be
    jobs of the job's own team. A new job has no id yet, so no existing job can depend
    on it: every edge points from a newer job to an older one and the graph can have no
    cycle; a parent id not yet given out is refused as missing like any other."""
    if not isinstance(text, str) or len(text) > MAX_DEPENDENCY_CHARS:
        _add(
            errors,
            "dependency",
            f"Give the dependency as text of at most {MAX_DEPENDENCY_CHARS} characters.",
        )
        return (), False
    try:
        depends_on, singleton = parse_dependency(text)
    except ValueError as exc:
        _add(errors, "dependency", str(exc))
        return (), False
    parents = {job_id for _, job_id in depends_on}
    if len(parents) > MAX_DEPENDENCY_PARENTS:
        _add(
            errors,
            "dependency",
            f"At most {MAX_DEPENDENCY_PARENTS} parent jobs (this names {len(parents)}).",
        )
        return (), False
    missing = sorted(lookups.missing_jobs(parents))
    if missing:
        jobs = ", ".join(map(str, missing[:5])) + (", …" if len(missing) > 5 else "")
        word = "job" if len(missing) == 1 else "jobs"
        _add(
            errors,
            "dependency",
            f"Team {lookups.team.slug} has no {word} {jobs}; a job can depend only on jobs of its own team.",
        )
        return (), False
    return depends_on, singleton


def flavor_nodes(flavor: GpuFlavor) -> tuple[m.Node, ...]:
    """The flavor's registered nodes, each with its GPUs that are not lost, for the fit
    checks (scheduler.capacity). Every registered node counts, Ready or not: a node
    down for a while does not make a gang unfittable at submission (the pass judges
    the Ready ones and fails a job that stays unfittable: scheduling.apply)."""
    rows = (
        Node.objects.filter(flavor=flavor)
        .annotate(n=Count("gpus", filter=~Q(gpus__health=Gpu.Health.LOST)))
        .values_list("hostname", "n", "rack", "block")
        .order_by("hostname")
    )
    return tuple(m.Node(name, flavor.name, (), n, rack, block) for name, n, rack, block in rows)


def max_gpus_ever(team: Team, flavor: GpuFlavor) -> int:
    """The most GPUs of the flavor the team could hold: nominal plus what it may ever borrow.

    One query: the team's own quota and what its cohort peers may lend (each
    peer's lending limit, or all its nominal quota when it has none).
    """
    own, peers = Q(team=team), ~Q(team=team)
    cohort = Q(team__cohort_id=team.cohort_id) if team.cohort_id else Q(pk__in=[])
    quotas = Quota.objects.filter(Q(flavor=flavor) & (own | cohort))
    row = quotas.aggregate(
        own_nominal=Sum("nominal", filter=own),
        own_borrowing=Max("borrowing_limit", filter=own),
        lend_all=Sum("nominal", filter=peers & Q(lending_limit__isnull=True)),
        lend_limited=Sum("lending_limit", filter=peers & Q(lending_limit__isnull=False)),
    )
    lendable = (row["lend_all"] or 0) + (row["lend_limited"] or 0)
    if row["own_borrowing"] is not None:
        lendable = min(lendable, row["own_borrowing"])
    return (row["own_nominal"] or 0) + lendable

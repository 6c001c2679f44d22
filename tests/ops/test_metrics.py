"""/metrics: who may read it, what it says about a seeded cluster, and what a scrape costs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.core.models import Gpu, Job, JobEvent, Node, Queue, SchedulingPass
from portal.core.scheduling.apply import apply_plan
from portal.core.scheduling.snapshot import PassContext
from scheduler import model as m
from tests.factories import make_node, make_team
from tests.ops.conftest import Scrape

State = Job.State
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
OUTSIDER = "192.0.2.7"  # TEST-NET-1: never inside the default allowed networks


# --- helpers -----------------------------------------------------------------------------


def make_job(cluster, *, team=None, queue=None, flavor=None, workers=1, gpus=1, **kw) -> Job:
    job = Job.objects.create(
        team=team or cluster.team_a,
        queue=queue or cluster.queue_a,
        flavor=flavor or cluster.h100,
        name="train",
        image="img",
        command=["python", "train.py"],
        workers=workers,
        gpus_per_worker=gpus,
        max_runtime_seconds=3600,
        **kw,
    )
    JobEvent.objects.create(job=job, at=job.submitted_at, kind="submitted", to_state=State.PENDING)
    return job


def admit(job: Job, layout: list[tuple[Node, int]]) -> None:
    """Admit `job` with one worker per (node, GPUs) entry, as a scheduling pass would."""
    placement = tuple(
        m.WorkerPlacement(
            rank=rank,
            node=node.hostname,
            gpus=tuple(node.gpus.order_by("index").values_list("pk", flat=True)[:count]),
        )
        for rank, (node, count) in enumerate(layout)
    )
    ctx = PassContext(now=timezone.now(), node_ids={n.hostname: n.pk for n, _ in layout})
    applied = apply_plan(m.Plan(admissions=(m.Admission(job.pk, placement),)), ctx)
    assert applied.admitted == [job.pk]


# --- access ------------------------------------------------------------------------------


@pytest.fixture
def token(settings):
    settings.BERTH = {**settings.BERTH, "METRICS_TOKEN": "s3cret-metrics-token"}
    return "s3cret-metrics-token"


def test_no_credentials_from_outside_is_401_with_a_bearer_challenge(client, db):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header", ["Bearer wrong-token", "Bearer ", "Basic czNjcmV0", "s3cret-metrics-token"]
)
def test_a_wrong_or_malformed_token_is_403_even_from_an_allowed_network(client, token, header):
    for address in (OUTSIDER, "127.0.0.1"):
        response = client.get("/metrics", REMOTE_ADDR=address, HTTP_AUTHORIZATION=header)
        assert response.status_code == 403, (address, header)


def test_the_right_token_is_200_from_anywhere(client, token):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_a_token_is_refused_when_none_is_configured(client, settings, db):
    settings.BERTH = {**settings.BERTH, "METRICS_TOKEN": None}
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("cidrs", "address", "status"),
    [
        (["127.0.0.1/32", "::1/128"], "127.0.0.1", 200),
        (["127.0.0.1/32", "::1/128"], "::1", 200),
        (["127.0.0.1/32", "::1/128"], "::ffff:127.0.0.1", 200),
        (["127.0.0.1/32", "::1/128"], "10.1.2.3", 401),
        (["10.0.0.0/8"], "10.1.2.3", 200),
        (["10.0.0.0/8"], "127.0.0.1", 401),
        (["10.0.0.0/8"], "not-an-address", 401),
        ([], "127.0.0.1", 401),
    ],
)
def test_allowed_networks(client, settings, db, cidrs, address, status):
    settings.BERTH = {**settings.BERTH, "METRICS_ALLOW_CIDRS": cidrs}
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == status


def test_x_forwarded_for_does_not_grant_access(client, db):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 401


# --- exposition ----------------------------------------------------------------------------


def documented_metrics() -> set[str]:
    """Metric names in the reference table of docs/operations.md."""
    return set(re.findall(r"^\| `((?:berth|DCGM)_[A-Za-z0-9_]+)`", DOCS.read_text(), re.M))


def test_exposition_parses_and_matches_the_documented_reference(cluster, scrape):
    result = scrape()
    exposed = set(result.families)
    documented = {name.removesuffix("_total") for name in documented_metrics()}
    assert documented, "the reference table in docs/operations.md is missing"
    assert exposed == documented, (
        f"undocumented: {exposed - documented}; documented, not exposed: {documented - exposed}"
    )
    kinds = {name: family.type for name, family in result.families.items()}
    assert kinds["berth_admitted_jobs"] == "counter"
    assert kinds["berth_admission_wait_time_seconds"] == "histogram"
    assert kinds["berth_scheduling_pass_duration_seconds"] == "histogram"
    assert kinds["DCGM_FI_DEV_GPU_UTIL"] == "gauge"


def test_openmetrics_is_served_when_asked_for(cluster, client):
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


# --- values from seeded data ----------------------------------------------------------------


@pytest.fixture
def busy(cluster):
    """Team alpha borrows: 20 h100 GPUs held against a nominal 16, plus pending jobs
    with verdicts; one h100 node cordoned with a broken and a lost GPU; one a100 node
    not ready."""
    h0, h1, h2, h3, _a0, a1 = cluster.nodes
    running = make_job(cluster, workers=3, gpus=8)
    admit(running, [(h0, 8), (h1, 8), (h2, 4)])
    for reason in ("quota", "quota", "no_capacity"):
        make_job(cluster, reason_code=reason)
    make_job(cluster, team=cluster.team_b, queue=cluster.queue_b, workers=2, gpus=4)  # no verdict
    Node.objects.filter(pk=h3.pk).update(cordon=Node.Cordon.CORDONED)
    Node.objects.filter(pk=a1.pk).update(condition=Node.Condition.NOT_READY)
    Gpu.objects.filter(node=h3, index=1).update(health=Gpu.Health.UNHEALTHY, health_reason="XID 79")
    Gpu.objects.filter(node=h3, index=2).update(health=Gpu.Health.LOST)
    Gpu.objects.filter(node=h0, index=0).update(
        utilization_pct=87.5, memory_used_mib=40000, temperature_c=61, power_w=512.5
    )
    return cluster


def test_pending_jobs_by_queue_and_reason(busy, scrape):
    result = scrape()
    assert result.series("berth_pending_jobs") == {
        frozenset({"team": "alpha", "queue": "alpha/default", "reason": "quota"}.items()): 2,
        frozenset({"team": "alpha", "queue": "alpha/default", "reason": "no_capacity"}.items()): 1,
        frozenset({"team": "beta", "queue": "beta/default", "reason": "unknown"}.items()): 1,
    }
    assert result.value("berth_pending_gpus", team="beta", flavor="h100-80gb") == 8
    assert result.value("berth_pending_gpus", team="alpha", flavor="a100-40gb") == 0
    assert result.value("berth_running_jobs", team="alpha", flavor="h100-80gb") == 1
    assert result.value("berth_running_jobs", team="beta", flavor="h100-80gb") == 0
    assert result.value("berth_queue_max_pending_jobs", team="alpha", queue="alpha/default") == 1000


def test_quota_used_borrowed_and_fair_share(busy, scrape):
    result = scrape()
    alpha = {"team": "alpha", "cohort": "research", "flavor": "h100-80gb"}
    beta = {**alpha, "team": "beta"}
    assert result.value("berth_quota_nominal_gpus", **alpha) == 16
    assert result.value("berth_quota_used_gpus", **alpha) == 20
    assert result.value("berth_quota_borrowed_gpus", **alpha) == 4
    assert result.value("berth_quota_used_gpus", **beta) == 0
    assert result.value("berth_quota_borrowed_gpus", **beta) == 0
    assert result.series("berth_quota_borrowing_limit_gpus") == {}  # no limits set
    # Dominant share: 20 used / 16 nominal, weight 1, no history yet.
    assert result.value("berth_team_fair_share", team="alpha", cohort="research") == 1.25
    assert result.value("berth_team_fair_share", team="beta", cohort="research") == 0


def test_fair_share_divides_by_weight_and_counts_a_team_without_cohort(cluster, scrape):
    solo = make_team("solo", weight=2.0, quotas={cluster.a100: 8})
    queue = Queue.objects.create(team=solo, name="default")
    job = make_job(cluster, team=solo, queue=queue, flavor=cluster.a100, gpus=4)
    admit(job, [(cluster.nodes[4], 4)])
    result = scrape()
    assert result.value("berth_team_fair_share", team="solo", cohort="") == 0.25  # 4/8 / 2
    assert result.value("berth_team_weight", team="solo") == 2


def test_gpu_and_node_states(busy, scrape):
    result = scrape()
    h100 = {s: result.value("berth_gpus", flavor="h100-80gb", state=s) for s in _GPU_STATES}
    assert h100 == {"allocated": 20, "free": 4, "unschedulable": 6, "unhealthy": 1, "lost": 1}
    a100 = {s: result.value("berth_gpus", flavor="a100-40gb", state=s) for s in _GPU_STATES}
    assert a100 == {"allocated": 0, "free": 8, "unschedulable": 8, "unhealthy": 0, "lost": 0}
    nodes = {s: result.value("berth_nodes", flavor="h100-80gb", state=s) for s in _NODE_STATES}
    assert nodes == {"ready": 3, "cordoned": 1, "not_ready": 0, "unknown": 0, "draining": 0}
    assert result.value("berth_nodes", flavor="a100-40gb", state="not_ready") == 1


_GPU_STATES = ("free", "allocated", "unschedulable", "unhealthy", "lost")
_NODE_STATES = ("ready", "not_ready", "unknown", "cordoned", "draining")


def test_dcgm_metrics_follow_dcgm_exporter_names_and_labels(busy, scrape):
    result = scrape()
    gpu0 = {
        "gpu": "0",
        "UUID": "GPU-h100-0-0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "h100-0",
    }
    assert result.value("DCGM_FI_DEV_GPU_UTIL", **gpu0) == 87.5
    assert result.value("DCGM_FI_DEV_FB_USED", **gpu0) == 40000
    assert result.value("DCGM_FI_DEV_FB_FREE", **gpu0) == 81920 - 40000
    assert result.value("DCGM_FI_DEV_GPU_TEMP", **gpu0) == 61
    assert result.value("DCGM_FI_DEV_POWER_USAGE", **gpu0) == 512.5
    assert result.value("DCGM_FI_DEV_XID_ERRORS", **gpu0) == 0
    broken = {**gpu0, "gpu": "1", "UUID": "GPU-h100-3-1", "device": "nvidia1", "Hostname": "h100-3"}
    assert result.value("DCGM_FI_DEV_XID_ERRORS", **broken) == 79
    assert result.value("berth_gpu_healthy", **broken) == 0
    assert result.value("berth_gpu_healthy", **gpu0) == 1
    # A GPU without telemetry has no sample, as dcgm-exporter skips blank fields.
    assert (
        result.value(
            "DCGM_FI_DEV_GPU_UTIL",
            **{**gpu0, "gpu": "1", "UUID": "GPU-h100-0-1", "device": "nvidia1"},
        )
        is None
    )
    hosts = {dict(labels)["Hostname"] for labels in result.series("berth_gpu_healthy")}
    assert "a100-1" not in hosts  # not ready: its telemetry is stale
    uuids = {dict(labels)["UUID"] for labels in result.series("berth_gpu_healthy")}
    assert "GPU-h100-3-2" not in uuids  # lost


def test_last_successful_pass_timestamp(cluster, scrape):
    assert scrape().series("berth_scheduling_pass_last_success_timestamp_seconds") == {}
    started = timezone.now()
    SchedulingPass.objects.create(started_at=started, duration_ms=250.0, policy="fairshare")
    SchedulingPass.objects.create(
        started_at=timezone.now(), duration_ms=9.0, policy="fairshare", dry_run=True
    )
    value = scrape().value("berth_scheduling_pass_last_success_timestamp_seconds")
    assert value == pytest.approx(started.timestamp() + 0.25)


# --- cost -------------------------------------------------------------------------------------


def _scrape_queries(client) -> int:
    client.get("/metrics")  # warm the shared base
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/metrics").status_code == 200
    return len(ctx.captured_queries)


def test_a_scrape_costs_a_fixed_number_of_queries(busy, client):
    small = _scrape_queries(client)
    assert small <= 15
    more = make_team("gamma", cohort=busy.cohort, quotas={busy.h100: 8, busy.a100: 8})
    queue = Queue.objects.create(team=more, name="batch")
    for i in range(6):
        make_node(f"extra-{i}", busy.a100, rack="r9", block="b9")
    for i in range(30):
        job = make_job(busy, team=more, queue=queue, flavor=busy.a100, reason_code=f"r{i % 4}")
        if i < 5:
            admit(job, [(Node.objects.get(hostname=f"extra-{i}"), 1)])
    SchedulingPass.objects.create(started_at=timezone.now(), duration_ms=5.0, policy="fairshare")
    assert _scrape_queries(client) == small


def test_sections_split_the_per_gpu_series_from_the_rest(busy, client, django_assert_num_queries):
    families = {}
    for query in (
        "",
        "?collect=cluster",
        "?collect=gpus",
        "?collect[]=gpus",
        "?collect=gpus,cluster",
    ):
        response = client.get(f"/metrics{query}")
        assert response.status_code == 200
        families[query] = set(Scrape(response.content.decode()).families)
    per_gpu = {name for name in families[""] if name.startswith("DCGM_")} | {"berth_gpu_healthy"}
    assert len(per_gpu) == 7
    assert families["?collect=gpus"] == families["?collect[]=gpus"] == per_gpu
    assert families["?collect=cluster"] == families[""] - per_gpu
    assert families["?collect=gpus,cluster"] == families[""]
    with django_assert_num_queries(1):
        client.get("/metrics?collect=gpus")


def test_an_unknown_section_is_a_client_error(client, db):
    response = client.get("/metrics?collect=everything")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_section"


# dcgm-exporter's label names, kept on purpose (docs/operations.md, "GPU telemetry").
DCGM_CAMEL_LABELS = {"UUID": "uuid", "modelName": "model_name", "Hostname": "hostname"}
CAMEL_WARNING = "label names should be written in 'snake_case' not 'camelCase'"


def _promtool(text: str) -> list[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make test installs Debian's prometheus package"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def test_metrics_pass_promtool_except_for_dcgm_exporters_label_names(busy, scrape):
    """promtool's only complaint is the camelCase labels of the GPU series, which are
    dcgm-exporter's own so that its dashboards and alerts work unchanged."""
    text = scrape().text
    problems = _promtool(text)
    assert problems, "expected the documented camelCase warnings"
    for line in problems:
        family = line.split(" ", 1)[0]
        assert CAMEL_WARNING in line, line
        assert family.startswith("DCGM_FI_DEV_") or family == "berth_gpu_healthy", line
    renamed = text
    for camel, snake in DCGM_CAMEL_LABELS.items():
        renamed = re.sub(rf"([{{,]){camel}=", rf"\g<1>{snake}=", renamed)
    assert _promtool(renamed) == []  # everything else is clean

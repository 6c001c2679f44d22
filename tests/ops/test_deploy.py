"""The deployment examples in deploy/: structure checks, systemd-analyze, and the compose
file's shape (no Docker engine here), plus a production-mode gunicorn serving static
files, /healthz, /readyz and /metrics."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.db import connection

from portal.ops.metrics import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
PROD_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "t3st-only-$k2!vQ9#pL4@wZ8^nR1&bT6*yU3(eI5)oA0_sD-fG+hJ=kL-m2n3b4",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "BERTH_"))}
    return env | extra


# --- systemd units ---------------------------------------------------------------------------


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit as {section: {key: [values]}} (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        assert current is not None and _, (
            f"{path.name}: {line!r} outside a section or not key=value"
        )
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_six_units_exist():
    names = {unit.name for unit in UNITS}
    assert names == {
        "berth-web.service",
        "berth-watch.service",
        "berth-worker.service",
        "berth-notify-worker.service",
        "berth-beat.service",
        "berth-agent.service",
    }


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_structure(unit):
    sections = parse_unit(unit)
    assert set(sections) == {"Unit", "Service", "Install"}
    service = sections["Service"]
    (exec_start,) = service["ExecStart"]
    assert exec_start.startswith("/opt/berth")  # an absolute path, as systemd requires
    assert service["Restart"][0] in ("on-failure", "always")
    assert service["EnvironmentFile"][0].startswith("/etc/berth/")
    assert service["NoNewPrivileges"] == ["yes"]
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]


def test_units_agree_with_the_rest_of_the_deployment():
    web = parse_unit(DEPLOY / "systemd" / "berth-web.service")["Service"]
    assert "deploy/gunicorn.conf.py portal.wsgi" in web["ExecStart"][0]
    assert web["Type"] == ["notify"]  # gunicorn tells systemd when it is ready
    assert web["ExecReload"] == ["/bin/kill -s HUP $MAINPID"]
    beat = parse_unit(DEPLOY / "systemd" / "berth-beat.service")["Service"]
    assert " beat " in beat["ExecStart"][0] and "-B" not in beat["ExecStart"][0].split()
    worker = parse_unit(DEPLOY / "systemd" / "berth-worker.service")["Service"]
    assert " worker " in worker["ExecStart"][0] and " -B" not in worker["ExecStart"][0]
    watch = parse_unit(DEPLOY / "systemd" / "berth-watch.service")["Service"]
    assert "uvicorn portal.agentapi.watch:app" in watch["ExecStart"][0]
    # On SIGTERM uvicorn waits for the waiting watches (up to 25 s) unless told not to:
    # it must let them go before systemd kills it (docs/deploy.md, "The agents' watch").
    command = watch["ExecStart"][0].split()
    graceful = int(command[command.index("--timeout-graceful-shutdown") + 1])
    assert graceful < int(watch["TimeoutStopSec"][0])
    agent = parse_unit(DEPLOY / "systemd" / "berth-agent.service")["Service"]
    assert agent["KillMode"] == ["process"]  # an agent restart must not kill the workers
    assert agent["RestartPreventExitStatus"] == ["2 4"]  # agents/cli.py: config, auth


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_clean(tmp_path):
    """The units, with /opt/berth pointed at this checkout so ExecStart resolves."""
    venv = Path(sys.executable).parent.parent
    for unit in UNITS:
        text = unit.read_text().replace("/opt/berth-agent/.venv", str(venv))
        text = text.replace("/opt/berth/.venv", str(venv)).replace("/opt/berth/", f"{ROOT}/")
        (tmp_path / unit.name).write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(p.name for p in tmp_path.iterdir())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [line for line in (result.stdout + result.stderr).splitlines() if "berth-" in line]
    assert result.returncode == 0 and not problems, result.stdout + result.stderr


# --- compose -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_services(compose):
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "web", "worker", "beat", "nginx"} <= set(services)
    for name in ("migrate", "web", "worker", "beat"):
        service = services[name]
        assert service["image"] == "berth:latest" and service["env_file"] == "berth.env"
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert service["environment"]["DATABASE_URL"].startswith("postgres://")


def test_compose_runs_exactly_one_beat_and_migrates_first(compose):
    services = compose["services"]
    assert services["beat"]["deploy"]["replicas"] == 1
    assert "beat" in services["beat"]["command"] and "-B" not in services["worker"]["command"]
    assert services["web"]["deploy"]["replicas"] >= 2
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["migrate"]["command"][-2:] == ["migrate", "--no-input"]
    assert services["migrate"]["restart"] == "no"
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_compose_health_check_and_proxy(compose):
    services = compose["services"]
    check = " ".join(services["web"]["healthcheck"]["test"])
    assert "/readyz?exclude=scheduling_pass" in check
    assert services["nginx"]["depends_on"]["web"]["condition"] == "service_healthy"
    for volume in services["nginx"]["volumes"]:
        source = volume.split(":", 1)[0]
        if source.startswith("./nginx/"):
            assert (DEPLOY / source).is_file(), source
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"]
    assert set(compose["volumes"]) == {"pgdata", "redisdata"}


# --- nginx, gunicorn, environment, Prometheus ------------------------------------------------------


def test_nginx_sites_include_the_shared_proxy_block():
    shared = (DEPLOY / "nginx" / "berth-proxy.inc").read_text()
    assert re.search(r"location ~ \^/\(metrics\|readyz\)\$ \{\s*return 404;", shared)
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in shared
    assert "proxy_pass http://berth_web;" in shared
    # appends the peer to what the client sent: BERTH_TRUSTED_PROXIES=1 reads that entry
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in shared
    # bodies up to docs/api.md's 16 MiB reach Berth, which answers 413 above it itself
    assert "client_max_body_size 17m;" in shared
    for site in ("berth.conf", "compose.conf"):
        text = (DEPLOY / "nginx" / site).read_text()
        assert text.count("{") == text.count("}"), site
        assert "upstream berth_web" in text and "include /etc/nginx/berth-proxy.inc;" in text
        assert re.search(r"server \S+:8000", text)
        # upstream connections are renewed, so no gunicorn process keeps them all
        assert re.search(r"keepalive_requests \d+;", text)


def test_gunicorn_config():
    config: dict = {}
    exec(compile((DEPLOY / "gunicorn.conf.py").read_text(), "gunicorn.conf.py", "exec"), config)
    assert config["worker_class"] == "gthread" and config["preload_app"] is False
    assert config["workers"] >= 1 and config["threads"] >= 1
    assert config["graceful_timeout"] < 40  # inside berth-web.service's TimeoutStopSec


def env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_unedited_example_environment_is_refused():
    """Its placeholders are public: a deploy that forgot to replace one must not start."""
    env = env_file(DEPLOY / "berth.env.example")
    result = _check_deploy(env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY still holds the placeholder" in result.stderr
    env["DJANGO_SECRET_KEY"] = "k" + secrets.token_urlsafe(64)
    result = _check_deploy(env)
    assert result.returncode != 0
    assert "BERTH_METRICS_TOKEN still holds the placeholder" in result.stderr


def test_the_example_environment_with_its_secrets_filled_in_passes_check_deploy():
    env = env_file(DEPLOY / "berth.env.example")
    placeholders = [name for name, value in env.items() if "change-me" in value]
    assert sorted(placeholders) == ["BERTH_METRICS_TOKEN", "DJANGO_SECRET_KEY"]
    env |= {name: "k" + secrets.token_urlsafe(64) for name in placeholders}
    result = _check_deploy(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert env["BERTH_TRUSTED_PROXIES"] == "1"  # nginx in front, appending X-Forwarded-For


def test_the_example_agent_environment_is_accepted_by_the_agent():
    from agents.config import parse_config

    config = parse_config([], env_file(DEPLOY / "agent.env.example"))
    assert config.portal_url.startswith("https://")
    assert str(config.state_dir) == "/var/lib/berth-agent"


def test_prometheus_examples_name_only_metrics_that_exist(client, db):
    scrape_config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    for job in scrape_config["scrape_configs"]:
        assert set(job["params"]["collect"]) <= set(SECTIONS)
        assert job["authorization"]["credentials_file"]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "berth-alerts.yml").read_text())
    exposed = client.get("/metrics").content.decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exposed, re.M))
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 5
    for rule in alerts:
        assert rule["annotations"]["runbook"].startswith("docs/operations.md#")
        for name in re.findall(r"\b(berth_[a-z_]+)", rule["expr"]):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert name in families or base in families, (rule["alert"], name)
    headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / "operations.md").read_text(), re.M)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    for rule in alerts:
        assert rule["annotations"]["runbook"].split("#")[1] in anchors, rule["alert"]


# --- production gunicorn ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, **headers: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers={"Host": "127.0.0.1", **headers})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture
def production(tmp_path, db):
    """collectstatic, then gunicorn with production settings on a free port."""
    db_url = os.environ.get("DATABASE_URL", "")
    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test database")
    name = connection.settings_dict["NAME"]  # the test database, already migrated
    env = clean_env(
        **PROD_ENV,
        DATABASE_URL=re.sub(r"/[^/]*$", f"/{name}", db_url),
        BERTH_STATIC_ROOT=str(tmp_path / "static"),
        BERTH_VAR_DIR=str(tmp_path / "var"),
    )
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collect.returncode == 0, collect.stderr
    port = free_port()
    gunicorn = Path(sys.executable).parent / "gunicorn"
    proc = subprocess.Popen(
        [
            str(gunicorn),
            "--config",
            "deploy/gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "portal.wsgi",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                if fetch(f"{base}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "gunicorn did not answer within 30 s"
            time.sleep(0.2)
        yield base, tmp_path / "static"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


@pytest.mark.services
def test_production_gunicorn_serves_static_files_health_and_metrics(production):
    base, static_root = production
    manifest = json.loads((static_root / "staticfiles.json").read_text())["paths"]
    hashed = manifest["vendor/htmx/htmx.min.js"]
    assert hashed != "vendor/htmx/htmx.min.js"  # CompressedManifestStaticFilesStorage

    # Behind the proxy (X-Forwarded-Proto: https) whitenoise serves the compressed file
    # with a far-future, immutable cache header.
    status, headers, body = fetch(
        f"{base}/static/{hashed}", **{"X-Forwarded-Proto": "https", "Accept-Encoding": "gzip"}
    )
    assert status == 200, headers
    assert headers.get("Content-Encoding") == "gzip"
    assert "immutable" in headers["Cache-Control"]
    assert len(body) < (static_root / hashed).stat().st_size

    # Plain HTTP is redirected to HTTPS, except the probes and the metrics.
    status, headers, _ = fetch(f"{base}/static/{hashed}")
    assert status == 301 and headers["Location"].startswith("https://")
    assert fetch(f"{base}/healthz")[0] == 200
    status, _, body = fetch(f"{base}/readyz?exclude=scheduling_pass")
    assert status == 200, body
    assert json.loads(body)["checks"]["database"]["ok"]
    status, headers, body = fetch(f"{base}/metrics")  # from 127.0.0.1: allowed by default
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=")
    assert b"# TYPE berth_gpus gauge" in body
    assert headers.get("Strict-Transport-Security") is None  # plain HTTP gets no HSTS

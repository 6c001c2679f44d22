"""The agent loop against a fake portal over real HTTP, running real short worker processes."""

from __future__ import annotations

import json
import logging
import stat
import threading
import time
from pathlib import Path

import pytest

from agents.agent import EXIT_AUTH, EXIT_OK
from agents.gpu import fake_uuid
from agents.runtimes.fake import FakeRuntime
from agents.runtimes.process import SHIM_PATH
from agents.state import LEASE_FILE
from tests.agents.conftest import wait_until
from tests.agents.fake_portal import run_entry

GPU0 = fake_uuid("gpu-node-07", 0)
SLEEP = ["sleep", "30"]


def reported(portal, key, state):
    """Wait until an accepted heartbeat reports ``key`` in ``state``; return that report."""

    def check():
        report = portal.last_report(key)
        return report if report and report["state"] == state else None

    return wait_until(check, 10, f"{key} reported {state}")


def keys_in(request):
    return {worker["key"] for worker in request.body["workers"]}


def last_workers(portal):
    heartbeats = portal.heartbeats()
    return heartbeats[-1].body["workers"] if heartbeats else []


def worker_status(running, key):
    return next((s for s in running.runtime.list() if s.key == key), None)


def test_starts_worker_reports_exit_until_acknowledged_then_forgets_it(
    portal, start_agent, tmp_path
):
    portal.auto_ack = False
    script = "echo rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR gpus=$CUDA_VISIBLE_DEVICES; sleep 0.3; exit 3"
    portal.run["42.0.1"] = run_entry("42.0.1", ["sh", "-c", script], gpus=[GPU0], world_size=2)
    start_agent()

    reported(portal, "42.0.1", "running")
    report = reported(portal, "42.0.1", "exited")
    assert report["exit_code"] == 3 and report["finished_at"].endswith("Z")
    assert f"rank=1 world=2 master=gpu-node-05 gpus={GPU0}" in report["log_tail"]

    seen = len(portal.accepted_heartbeats())
    wait_until(lambda: len(portal.accepted_heartbeats()) >= seen + 3)
    assert all("42.0.1" in keys_in(r) for r in portal.accepted_heartbeats()[seen:])

    portal.auto_ack = True
    wait_until(
        lambda: "42.0.1" not in keys_in(portal.heartbeats()[-1]), 10, "the ack to be applied"
    )
    seen = len(portal.heartbeats())
    wait_until(lambda: len(portal.heartbeats()) >= seen + 5)
    # Still listed in "run", yet never started a second time.
    assert all("42.0.1" not in keys_in(r) for r in portal.heartbeats()[seen:])
    assert not (tmp_path / "state" / "workers" / "42.0.1").exists()


def test_heartbeat_carries_gpu_inventory_and_health(portal, start_agent):
    running = start_agent()
    running.gpus.inject_xid(1, 79)

    def unhealthy_reported():
        heartbeats = portal.accepted_heartbeats()
        gpus = heartbeats[-1].body["gpus"] if heartbeats else []
        return gpus if gpus and gpus[1]["health"] == "unhealthy" else None

    gpus = wait_until(unhealthy_reported, 10, "the XID to be reported")
    assert [g["uuid"] for g in gpus] == [GPU0, fake_uuid("gpu-node-07", 1)]
    assert gpus[1]["health_reason"] == "XID 79"
    assert gpus[0]["health"] == "healthy"
    assert portal.heartbeats()[0].body["agent_version"] == "0.1.0"


def test_stop_entry_delivers_the_checkpoint_signal(portal, start_agent):
    script = "trap 'echo checkpointed; exit 0' USR1; echo ready; while :; do sleep 0.05; done"
    portal.run["7.0.0"] = run_entry("7.0.0", ["sh", "-c", script])
    start_agent()
    wait_until(lambda: "ready" in (reported(portal, "7.0.0", "running").get("log_tail") or ""))
    portal.stop["7.0.0"] = {
        "key": "7.0.0",
        "signal": "SIGUSR1",
        "grace_period_s": 10,
        "reason": "preempted",
    }
    report = reported(portal, "7.0.0", "exited")
    assert report["exit_code"] == 0
    assert "checkpointed" in report["log_tail"]


def test_worker_dropped_from_the_desired_state_gets_sigterm(portal, start_agent):
    portal.auto_ack = False
    portal.run["8.0.0"] = run_entry("8.0.0", SLEEP)
    start_agent()
    reported(portal, "8.0.0", "running")
    del portal.run["8.0.0"]
    assert reported(portal, "8.0.0", "exited")["exit_code"] == 143


def test_command_that_cannot_start_is_reported_failed_to_start(portal, start_agent):
    portal.auto_ack = False
    portal.run["9.0.0"] = run_entry("9.0.0", ["/nonexistent/train"])
    portal.run["9.0.1"] = run_entry("9.0.1", ["true"], gpus=["GPU-not-on-this-node"])
    start_agent()
    missing = reported(portal, "9.0.0", "failed_to_start")
    assert missing["exit_code"] == 127 and "No such file" in missing["log_tail"]
    wrong_gpu = reported(portal, "9.0.1", "failed_to_start")
    assert "GPUs not on this node: GPU-not-on-this-node" in wrong_gpu["log_tail"]


def test_starts_in_flight_are_capped(portal, start_agent):
    class SlowRuntime(FakeRuntime):
        def __init__(self):
            super().__init__()
            self.gate = threading.Event()
            self.lock = threading.Lock()
            self.active = self.peak = 0

        def start(self, spec):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            self.gate.wait(10)
            with self.lock:
                self.active -= 1
            super().start(spec)

    runtime = SlowRuntime()
    for rank in range(6):
        portal.run[f"5.0.{rank}"] = run_entry(f"5.0.{rank}", ["train"], world_size=6)
    start_agent(runtime=runtime, max_starts=2)
    wait_until(lambda: sum(w["state"] == "starting" for w in last_workers(portal)) == 2)
    time.sleep(0.3)
    assert runtime.peak == 2
    assert {w["key"] for w in last_workers(portal)} == {"5.0.0", "5.0.1"}
    runtime.gate.set()
    wait_until(lambda: sum(w["state"] == "running" for w in last_workers(portal)) == 6)
    assert runtime.peak == 2


def test_lost_portal_stops_all_workers_after_the_disconnect_limit(portal, start_agent, caplog):
    caplog.set_level(logging.INFO)
    portal.disconnect_limit_s = 0.8
    portal.run["10.0.0"] = run_entry("10.0.0", SLEEP)
    running = start_agent()
    reported(portal, "10.0.0", "running")
    portal.close()
    gone = time.monotonic()
    status = wait_until(
        lambda: (s := worker_status(running, "10.0.0")) and s.terminal and s, 10, "stop"
    )
    assert status.exit_code == 143
    assert time.monotonic() - gone >= 0.6
    assert "no successful heartbeat" in caplog.text
    assert running.thread.is_alive()  # still trying to reach the portal


def test_5xx_and_429_are_retried_with_backoff_not_in_a_tight_loop(portal, start_agent):
    portal.script(503)
    portal.script(500)
    portal.script(429, Retry_After="1")
    start_agent()
    wait_until(lambda: portal.accepted_heartbeats(), 10, "a heartbeat to succeed")
    attempts = portal.heartbeats()[:4]
    assert [r.headers["X-Fake-Status"] for r in attempts] == ["503", "500", "429", "200"]
    gaps = [b.at - a.at for a, b in zip(attempts, attempts[1:], strict=False)]
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04  # exponential: base 0.05 s, half of it jitter
    assert gaps[2] >= 0.95  # Retry-After: 1 is honoured


def test_bad_request_is_logged_and_the_loop_carries_on(portal, start_agent, caplog):
    portal.script(
        400,
        {
            "error": {
                "code": "invalid",
                "message": "gpus[0].memory_total_mib: required",
                "fields": {},
            }
        },
    )
    running = start_agent()
    wait_until(lambda: portal.accepted_heartbeats(), 10, "a later heartbeat to succeed")
    assert "gpus[0].memory_total_mib: required" in caplog.text
    assert running.thread.is_alive()


def test_worker_unknown_to_the_portal_is_stopped_and_dropped(portal, start_agent):
    portal.run["11.0.0"] = run_entry("11.0.0", SLEEP)
    running = start_agent()
    reported(portal, "11.0.0", "running")
    portal.unknown_keys.add("11.0.0")
    seen = len(portal.accepted_heartbeats())
    wait_until(
        lambda: len(portal.accepted_heartbeats()) > seen, 10, "heartbeats to be accepted again"
    )
    assert "11.0.0" not in keys_in(portal.accepted_heartbeats()[-1])
    wait_until(
        lambda: worker_status(running, "11.0.0") is None,
        10,
        "the worker to be stopped and forgotten",
    )


def test_revoked_token_stops_workers_and_exits(portal, start_agent, caplog):
    portal.run["12.0.0"] = run_entry("12.0.0", SLEEP)
    running = start_agent()
    reported(portal, "12.0.0", "running")
    portal.node_tokens.clear()
    wait_until(lambda: running.exit_code is not None, 15, "the agent to exit")
    assert running.exit_code == EXIT_AUTH
    assert worker_status(running, "12.0.0").exit_code == 143
    assert "rejected this node's token" in caplog.text


def test_registers_with_the_bootstrap_token_and_keeps_the_node_token_private(
    portal, start_agent, tmp_path
):
    running = start_agent(node_token=None, bootstrap_token="bbt_ok", rack="r1", block="b1")
    wait_until(lambda: portal.accepted_heartbeats(), 10, "a heartbeat")
    (registration,) = [r for r in portal.requests if r.path.endswith("/register")]
    assert registration.body["bootstrap_token"] == "bbt_ok"
    assert (
        registration.body["hostname"],
        registration.body["rack"],
        registration.body["block"],
    ) == (
        "gpu-node-07",
        "r1",
        "b1",
    )
    assert len(registration.body["gpus"]) == 2
    token_file = tmp_path / "state" / "node_token"
    assert token_file.read_text().strip() == "bnt_gpu-node-07"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert portal.heartbeats()[0].headers["Authorization"] == "Bearer bnt_gpu-node-07"
    assert running.stop() == EXIT_OK


def test_rejected_bootstrap_token_exits_without_heartbeating(portal, start_agent):
    running = start_agent(node_token=None, bootstrap_token="bbt_wrong")
    wait_until(lambda: running.exit_code is not None, 10, "the agent to exit")
    assert running.exit_code == EXIT_AUTH
    assert portal.heartbeats() == []


def test_restarted_agent_readopts_running_workers(portal, start_agent, tmp_path):
    portal.run["13.0.0"] = run_entry("13.0.0", SLEEP)
    first = start_agent()
    reported(portal, "13.0.0", "running")
    pid_file = tmp_path / "state" / "workers" / "13.0.0" / "pid"
    pid = json.loads(pid_file.read_text())["pid"]
    assert first.stop() == EXIT_OK
    assert worker_status(first, "13.0.0").state == "running"  # left running by default

    seen = len(portal.accepted_heartbeats())
    second = start_agent()
    wait_until(lambda: len(portal.accepted_heartbeats()) >= seen + 5)
    assert portal.last_report("13.0.0")["state"] == "running"
    assert json.loads(pid_file.read_text())["pid"] == pid
    assert [s.key for s in second.runtime.list()] == ["13.0.0"]


def test_a_readopted_worker_reports_the_exit_code_its_shim_recorded(portal, start_agent, tmp_path):
    """The second agent is not the shim's parent: the exit code reaches the portal through
    result.json, which the sh shim writes when the command ends."""
    portal.run["15.0.0"] = run_entry("15.0.0", ["sh", "-c", "echo up; sleep 1.5; exit 7"])
    first = start_agent()
    reported(portal, "15.0.0", "running")
    shim = json.loads((tmp_path / "state" / "workers" / "15.0.0" / "pid").read_text())["pid"]
    assert Path(f"/proc/{shim}/cmdline").read_bytes().split(b"\0")[:2] == [
        b"/bin/sh",
        str(SHIM_PATH).encode(),
    ]
    assert first.stop() == EXIT_OK
    start_agent()
    report = reported(portal, "15.0.0", "exited")
    assert report["exit_code"] == 7 and report["log_tail"] == "up\n"
    assert report["finished_at"] > report["started_at"]


def test_the_lease_carries_the_boot_clock_the_sh_shim_reads(portal, start_agent, tmp_path):
    start_agent()
    lease = tmp_path / "state" / LEASE_FILE
    wait_until(lease.exists)
    record = json.loads(lease.read_text())
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert 0 < record["valid_until_uptime_cs"] / 100 - uptime <= portal.disconnect_limit_s + 1
    assert 0 < record["valid_until"] - time.time() <= portal.disconnect_limit_s + 1


def test_stop_workers_on_exit(portal, start_agent):
    portal.run["14.0.0"] = run_entry("14.0.0", SLEEP)
    running = start_agent(stop_workers_on_exit=True)
    reported(portal, "14.0.0", "running")
    assert running.stop() == EXIT_OK
    assert worker_status(running, "14.0.0").exit_code == 143


@pytest.mark.parametrize("local_interval", [5.0])
def test_portal_sets_the_heartbeat_interval(portal, start_agent, local_interval):
    portal.heartbeat_interval_s = 0.05
    start_agent(heartbeat_interval_s=local_interval)
    wait_until(lambda: len(portal.heartbeats()) >= 5, 3, "heartbeats at the portal's pace")


def test_fake_gpus_of_a_running_worker_report_its_load_and_an_idle_job_stays_idle(
    portal, start_agent
):
    gpu1 = fake_uuid("gpu-node-07", 1)
    portal.run["50.0.0"] = run_entry("50.0.0", SLEEP, gpus=[GPU0])
    portal.run["51.0.0"] = run_entry(
        "51.0.0", SLEEP, gpus=[gpu1], env={"BERTH_FAKE_UTILIZATION": "3"}
    )
    start_agent()
    reported(portal, "50.0.0", "running")
    reported(portal, "51.0.0", "running")

    def loaded():
        heartbeats = portal.accepted_heartbeats()
        gpus = heartbeats[-1].body["gpus"] if heartbeats else []
        return gpus if gpus and gpus[0]["utilization_pct"] >= 50 else None

    busy, idle = wait_until(loaded, 10, "the busy GPU's load to be reported")[:2]
    assert busy["memory_used_mib"] > 0 and busy["power_w"] > 200
    assert idle["utilization_pct"] == 3 and idle["memory_used_mib"] > 0

"""The fake GPU backend: stable inventory per node and scriptable faults (API and faults file)."""

from __future__ import annotations

import json
import os

from agents.gpu import HEALTHY, LOST, UNHEALTHY, FakeGpuBackend


def test_inventory_looks_like_a_real_node():
    gpus = FakeGpuBackend(4, "NVIDIA H100 80GB HBM3", 81559, node="gpu-node-07").inventory()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert all(g.uuid.startswith("GPU-") and len(g.uuid) == 40 for g in gpus)
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.health for g in gpus} == {HEALTHY}


def test_uuids_are_stable_per_node_and_differ_between_nodes():
    a1 = FakeGpuBackend(2, node="a").inventory()
    a2 = FakeGpuBackend(2, node="a").inventory()
    b = FakeGpuBackend(2, node="b").inventory()
    assert [g.uuid for g in a1] == [g.uuid for g in a2]
    assert not {g.uuid for g in a1} & {g.uuid for g in b}


def test_scripted_faults():
    fake = FakeGpuBackend(4)
    fake.inject_xid(0, 79)
    fake.inject_xid(1, 43)  # application XID: ignored
    fake.inject_ecc(2, 3)
    fake.mark_lost(3)
    fake.set_utilization(1, 90)
    gpus = fake.inventory()
    assert (gpus[0].health, gpus[0].health_reason) == (UNHEALTHY, "XID 79")
    assert gpus[1].health == HEALTHY and gpus[1].utilization_pct == 90
    assert (gpus[2].health, gpus[2].health_reason) == (UNHEALTHY, "uncorrected ECC errors: 3")
    assert (gpus[3].health, gpus[3].utilization_pct) == (LOST, None)


def test_lost_outranks_unhealthy_and_the_first_reason_sticks():
    fake = FakeGpuBackend(1)
    fake.inject_xid(0, 79)
    fake.inject_xid(0, 48)
    assert fake.inventory()[0].health_reason == "XID 79"
    fake.mark_lost(0)
    fake.inject_xid(0, 79)
    assert fake.inventory()[0].health == LOST


def test_faults_file_scripts_a_running_agent_and_emptying_it_heals(tmp_path):
    faults = tmp_path / "faults.json"
    fake = FakeGpuBackend(2, faults_file=faults)
    faults.write_text(json.dumps({"gpus": {"1": {"xid": 79, "utilization_pct": 50}}}))
    gpu = fake.inventory()[1]
    assert (gpu.health, gpu.utilization_pct) == (UNHEALTHY, 50)
    faults.write_text("{}")
    os.utime(faults, (1, 1))  # force a new mtime even within the same clock tick
    assert fake.inventory()[1].health == HEALTHY


def test_bad_faults_file_is_ignored_not_fatal(tmp_path):
    faults = tmp_path / "faults.json"
    faults.write_text("{not json")
    assert len(FakeGpuBackend(2, faults_file=faults).inventory()) == 2
    faults.write_text(json.dumps({"gpus": {"9": {"lost": True}}}))
    os.utime(faults, (2, 2))
    assert len(FakeGpuBackend(2, faults_file=faults).inventory()) == 2


def test_gpus_held_by_running_workers_report_workload_driven_telemetry():
    from agents.gpu import Workload

    clock = [1000.0]
    fake = FakeGpuBackend(4, "NVIDIA H100 80GB HBM3", 81559, node="n", clock=lambda: clock[0])
    uuids = [g.uuid for g in fake.inventory()]
    fake.observe_workload(
        {uuids[0]: Workload(41, 0), uuids[1]: Workload(41, 1), uuids[2]: Workload(7, 0, 2)}
    )
    busy, busy2, idle_job, free = fake.inventory()
    for gpu in (busy, busy2):
        assert 50 <= gpu.utilization_pct <= 100
        assert 0.25 * 81559 < gpu.memory_used_mib < 0.95 * 81559
        assert 40 <= gpu.temperature_c <= 85 and 300 < gpu.power_w <= 700
    # A job that holds its GPUs but leaves them idle: memory held, little compute or power.
    assert idle_job.utilization_pct == 2 and idle_job.memory_used_mib > 10000
    assert idle_job.power_w < 120
    assert (free.utilization_pct, free.memory_used_mib, free.power_w) == (0, 0, 70.0)
    # The load moves over time, as a real training step mix does.
    readings = set()
    for t in range(0, 90, 10):
        clock[0] = 1000.0 + t
        readings.add(fake.inventory()[0].utilization_pct)
    assert len(readings) > 3
    # Freed GPUs cool down to idle; scripted utilization wins over the workload.
    fake.set_utilization(1, 55)
    fake.observe_workload({uuids[1]: Workload(41, 1)})
    assert fake.inventory()[0].utilization_pct == 0 and fake.inventory()[1].utilization_pct == 55


def test_a100_power_stays_under_its_board_limit():
    from agents.gpu import Workload

    fake = FakeGpuBackend(1, "NVIDIA A100-SXM4-40GB", 40960, node="a")
    fake.observe_workload({fake.inventory()[0].uuid: Workload(3, 0, 100)})
    assert 350 < fake.inventory()[0].power_w <= 400

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

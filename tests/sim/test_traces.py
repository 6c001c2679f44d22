"""Trace readers and cluster builders: Philly, openb, Berth's own history."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scheduler.sim.cluster import (
    NodeSpec,
    assign_flavors,
    capacity,
    homogeneous,
    quota_teams,
    read_openb_nodes,
    split,
)
from scheduler.sim.engine import max_runtime
from scheduler.sim.trace import (
    gang_shape,
    job_to_record,
    load,
    parse_time,
    read_berth,
    read_openb,
    read_philly,
    record_to_job,
    window,
)
from tests.sim.helpers import job

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-02 10:00:05,100.0,1,100.0,aa
2017-10-02 10:00:00,50.0,16,800.0,bb
2017-10-02 10:00:00,60.0,12,720.0,aa
2017-10-03 00:00:00,70.0,8,560.0,cc
"""


def test_philly_rows_are_sorted_and_big_gangs_split_into_8_gpu_workers(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY)
    trace = read_philly(path)
    assert [j.id for j in trace.jobs] == [1, 2, 3, 4]
    assert [(j.team, j.workers, j.gpus_per_worker) for j in trace.jobs] == [
        ("bb", 2, 8),  # 16 GPUs: two workers of 8, submitted first (row order breaks the tie)
        ("aa", 2, 8),  # 12 GPUs: rounded up to two workers of 8, and the notes say so
        ("aa", 1, 1),
        ("cc", 1, 8),
    ]
    assert trace.jobs[0].submitted_at == parse_time("2017-10-02T10:00:00Z")
    assert any("rounded up" in n for n in trace.notes)


def test_a_window_keeps_jobs_submitted_in_start_inclusive_end_exclusive(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY)
    kept = load(
        path, "philly", start=parse_time("2017-10-02T10:00:00"), end=parse_time("2017-10-03")
    )
    assert len(kept.jobs) == 3
    assert window(kept, parse_time("2017-10-02T10:00:01"), None).jobs[0].duration == 100.0


def test_gang_shape_uses_the_worker_size_of_the_nodes():
    assert gang_shape(1, 8) == (1, 1)
    assert gang_shape(8, 8) == (1, 8)
    assert gang_shape(64, 8) == (8, 8)
    assert gang_shape(8, 4) == (2, 4)


OPENB_PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1000,1,1,1000,,LS,Running,10,110,10
p1,1000,1,1,460,,BE,Running,5,55,7
p2,1000,1,0,0,,LS,Running,0,100,0
p3,1000,1,8,1000,,Burstable,Pending,20,,
p4,1000,1,2,1000,V100M32,LS,Succeeded,30,90,40
"""

OPENB_NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,1,1,8,G2
n1,1,1,8,G2
n2,1,1,2,T4
n3,1,1,4,V100M32
n4,1,1,0,CPU
"""


def test_openb_pods_become_whole_gpu_jobs_of_their_qos_class(tmp_path):
    path = tmp_path / "openb_pods.csv"
    path.write_text(OPENB_PODS)
    trace = read_openb(path)
    assert [(j.team, j.gpus, j.duration, j.submitted_at) for j in trace.jobs] == [
        ("BE", 1, 48.0, 5.0),  # a fraction of a GPU counts as one; runs deletion - scheduled
        ("LS", 1, 100.0, 10.0),
        ("LS", 2, 50.0, 30.0),
    ]
    assert trace.jobs[2].flavor == "V100M32"
    assert any("1 fractional" in n for n in trace.notes)
    assert any("1 pods without GPUs and 1 never scheduled" in n for n in trace.notes)


def test_openb_nodes_keep_their_shapes_and_models(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text(OPENB_NODES)
    nodes = read_openb_nodes(path)
    assert [(n.name, n.flavor, n.gpus) for n in nodes] == [
        ("n0", "g2", 8),
        ("n1", "g2", 8),
        ("n2", "t4", 2),
        ("n3", "v100m32", 4),
    ]
    assert {n.flavor for n in read_openb_nodes(path, single_flavor=True)} == {"gpu"}
    assert len(read_openb_nodes(path, limit=2)) == 2


def test_jobs_without_a_flavor_are_spread_in_proportion_to_capacity():
    nodes = [NodeSpec(f"b{i}", "big", 8) for i in range(3)] + [NodeSpec("s0", "small", 8)]
    jobs = [replace(job(i, gpus=1), flavor=None) for i in range(1, 41)]
    flavors = [j.flavor for j in assign_flavors(jobs, nodes)]
    assert flavors.count("big") == 30 and flavors.count("small") == 10


def test_a_job_only_goes_to_flavors_whose_nodes_can_hold_its_worker():
    nodes = [NodeSpec("b0", "big", 8)] + [NodeSpec(f"s{i}", "small", 2) for i in range(4)]
    wide = replace(job(1, gpus=4), flavor=None)
    assert assign_flavors([wide], nodes)[0].flavor == "big"


def test_split_gives_whole_gpus_that_add_up():
    assert split(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert split(8, {"a": 3, "b": 1}) == {"a": 6, "b": 2}
    assert split(8, {"a": 0, "b": 0}) == {"a": 0, "b": 0}


@pytest.mark.parametrize("mode", ["proportional", "equal"])
def test_quota_teams_share_the_cluster_in_one_cohort(mode):
    jobs = [job(1, "a", gpus=8, duration=300), job(2, "b", gpus=1, duration=100)]
    nodes = homogeneous(2, 8)
    teams = quota_teams(jobs, nodes, mode)
    assert {t.cohort for t in teams} == {"trace"}
    assert sum(t.quotas["gpu"].nominal for t in teams) == capacity(nodes)["gpu"] == 16
    nominal = {t.name: t.quotas["gpu"].nominal for t in teams}
    # proportional: 2,400 vs 100 GPU-seconds of demand, largest remainder
    assert nominal == ({"a": 15, "b": 1} if mode == "proportional" else {"a": 8, "b": 8})
    assert all(t.quotas["gpu"].borrowing_limit is None for t in teams)


def test_homogeneous_nodes_split_evenly_into_racks():
    nodes = homogeneous(6, 8, racks=3)
    assert [n.rack for n in nodes] == ["r00", "r00", "r01", "r01", "r02", "r02"]


def test_runtime_estimates():
    j = job(1, duration=100)
    assert max_runtime(j, "exact", 7) == 100
    assert max_runtime(j, "double", 7) == 200
    assert max_runtime(j, "queue-max", 7) == 7
    assert max_runtime(j, "declared", 7) == 100  # none declared: exact
    assert max_runtime(replace(j, max_runtime=500.0), "declared", 7) == 500
    with pytest.raises(ValueError):
        max_runtime(j, "guess", 7)


def test_berth_records_round_trip_through_csv_and_json(tmp_path):
    jobs = [job(1, "a", gpus=16, max_runtime=3600.0), job(2, "b", at=5, preemptible=False)]
    records = [job_to_record(j) for j in jobs]
    assert [record_to_job(r) for r in records] == jobs
    (tmp_path / "h.json").write_text(json.dumps({"jobs": records}))
    assert read_berth(tmp_path / "h.json").jobs == tuple(jobs)
    header = list(records[0])
    lines = [",".join(header)] + [
        ",".join(str(r[k] if r[k] is not None else "") for k in header) for r in records
    ]
    (tmp_path / "h.csv").write_text("\n".join(lines) + "\n")
    assert read_berth(tmp_path / "h.csv").jobs == tuple(jobs)


def test_a_berth_record_without_required_fields_is_refused():
    with pytest.raises(ValueError, match="lacks duration_s"):
        record_to_job({"id": 1, "team": "a", "submitted_at": "2024-01-01T00:00:00"})


def test_times_parse_as_iso_or_epoch_seconds():
    assert parse_time("1970-01-01T00:01:00") == 60.0
    assert parse_time("1970-01-01T00:01:00Z") == 60.0
    assert parse_time("90") == 90.0
    assert parse_time(12) == 12.0

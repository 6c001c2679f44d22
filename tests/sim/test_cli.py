"""python -m scheduler.sim: flags, the table, the JSON keys scripts depend on, the plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "jobs",
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "median_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "utilization",
    "jain_fairness",
    "preemptions",
    "lost_gpu_hours",
    "fragmentation",
    "makespan_s",
    "sim_wall_s",
    "reclaim_latency_p99_s",
    "reclaim_jobs",
    "per_team",
}


@pytest.fixture
def philly(tmp_path) -> Path:
    """Two days of a small Philly-format trace: three tenants, gangs up to 16 GPUs."""
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    sizes = (1, 1, 2, 4, 8, 16, 1, 2)
    for i in range(80):
        day, minute = 1 + i // 40, (i % 40) * 17
        g = sizes[i % len(sizes)]
        rows.append(
            f"2017-10-0{day} {minute // 60:02d}:{minute % 60:02d}:00,{600 + 131 * (i % 9)}.0,{g},0,{'abc'[i % 3]}"
        )
    path = tmp_path / "philly.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_several_policies_print_a_table_and_write_one_object_per_policy(philly, tmp_path, capsys):
    out = tmp_path / "out.json"
    args = ["--trace", str(philly), "--nodes", "3", "--gpus-per-node", "8", "--policy", "all"]
    assert main([*args, "--json", str(out), "--plots", str(tmp_path / "plots"), "--teams"]) == 0
    table = capsys.readouterr().out
    for name in ("fifo", "fifo-backfill", "fairshare", "mean wait", "Jain"):
        assert name in table
    data = json.loads(out.read_text())
    assert list(data) == ["fifo", "fifo-backfill", "fairshare"]
    for name, summary in data.items():
        assert set(summary) >= KEYS, name
        assert summary["jobs"] == 80 and summary["policy"] == name
        assert set(summary["per_team"]) == {"a", "b", "c"}
        assert {"jobs", "mean_wait_s", "gpu_hours"} <= set(summary["per_team"]["a"])
        assert summary["peak_rss_mib"] > 0
    for png in ("wait_cdf.png", "utilization.png", "team_shares.png"):
        path = tmp_path / "plots" / png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size < 200_000


def test_one_policy_writes_its_object_at_the_top_and_the_window_filters(philly, tmp_path):
    out = tmp_path / "one.json"
    args = ["--trace", str(philly), "--nodes", "2", "--gpus-per-node", "8", "--racks", "2"]
    main(
        [
            *args,
            "--start",
            "2017-10-02",
            "--quota",
            "equal",
            "--runtime-estimate",
            "double",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert set(data) >= KEYS and data["policy"] == "fairshare"
    # only day two; its five 16-GPU gangs never fit a rack of one 8-GPU node
    assert data["jobs"] == 35 and data["unfinished"] == 5
    assert data["setup"]["quota"] == "equal" and data["setup"]["runtime_estimate"] == "double"


def test_the_fair_share_rules_are_flags_and_recorded_in_the_setup(philly, tmp_path):
    out = tmp_path / "rules.json"
    args = ["--trace", str(philly), "--nodes", "2", "--gpus-per-node", "8", "--json", str(out)]
    rules = ["--age-weight", "1", "--max-age", "3600", "--backfill-reservations", "3"]
    assert main([*args, *rules, "--reclaim-backoff", "--max-wait", "43200"]) == 0
    setup = json.loads(out.read_text())["setup"]
    assert (setup["age_weight"], setup["max_age_s"]) == (1.0, 3600.0)
    assert setup["backfill_reservations"] == 3 and setup["reclaim_backoff"] is True
    assert setup["max_wait_s"] == 43200.0


def test_nodes_are_required_for_a_philly_trace(philly):
    with pytest.raises(SystemExit):
        main(["--trace", str(philly)])


def test_a_berth_export_brings_its_own_nodes_and_teams(tmp_path, capsys):
    doc = {
        "jobs": [
            {
                "id": 1,
                "team": "a",
                "submitted_at": "2025-01-01T00:00:00",
                "duration_s": 60,
                "workers": 2,
                "gpus_per_worker": 4,
                "flavor": "h100",
            },
            {
                "id": 2,
                "team": "b",
                "submitted_at": "2025-01-01T00:00:10",
                "duration_s": 30,
                "flavor": "h100",
                "max_runtime_s": 3600,
            },
        ],
        "nodes": [
            {"name": "n1", "flavor": "h100", "gpus": 4},
            {"name": "n2", "flavor": "h100", "gpus": 4},
        ],
        "teams": [
            {"name": "a", "cohort": "c", "quotas": {"h100": {"nominal": 4}}},
            {"name": "b", "cohort": "c", "quotas": {"h100": {"nominal": 4}}},
        ],
    }
    path = tmp_path / "history.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "r.json"
    main(
        [
            "--trace",
            str(path),
            "--format",
            "berth",
            "--runtime-estimate",
            "declared",
            "--json",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert data["jobs"] == 2 and data["gpus"] == 8
    # b reclaims its nominal quota from a's borrowing gang: it waits for the 30 s grace period
    assert data["preemptions"] == 1
    assert data["per_team"]["b"]["mean_wait_s"] == 30.0


def test_python_dash_m_runs_without_django(philly):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.sim",
            "--trace",
            str(philly),
            "--nodes",
            "4",
            "--gpus-per-node",
            "8",
            "--policy",
            "fifo",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": ""},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "fifo" in result.stdout


def test_the_simulator_imports_no_django():
    code = (
        "import sys, importlib\n"
        "for m in ('scheduler.sim', 'scheduler.sim.cli', 'scheduler.sim.engine', 'scheduler.sim.compare',"
        " 'scheduler.sim.plots', 'scheduler.sim.results', 'scheduler.sim.trace', 'scheduler.sim.cluster'):\n"
        "    importlib.import_module(m)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('django', 'portal', 'celery')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={"PATH": ""}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_estimates_are_measured_when_asked_for(philly, tmp_path, capsys):
    out = tmp_path / "est.json"
    args = ["--trace", str(philly), "--nodes", "1", "--gpus-per-node", "8", "--policy", "fifo"]
    assert main([*args, "--estimates", "--json", str(out)]) == 0
    assert "fifo: first estimates of " in capsys.readouterr().out
    summary = json.loads(out.read_text())
    assert summary["estimate_jobs"] > 0  # one node for 80 jobs: most wait
    assert 0 <= summary["estimate_late_share"] + summary["estimate_early_share"] <= 1
    assert summary["estimate_abs_error_p90_s"] >= summary["estimate_abs_error_p50_s"] >= 0

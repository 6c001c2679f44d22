"""manage.py simulate: the database's own history through the simulator, and its export."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from tests.whatif.conftest import T0

START, END = T0.isoformat(), (T0 + timedelta(days=1)).isoformat()


def test_simulate_from_db_replays_the_history_under_each_policy(history, tmp_path, capsys):
    out = tmp_path / "r.json"
    call_command(
        "simulate", "--from-db", f"--start={START}", f"--end={END}", "--policy=all", f"--json={out}"
    )
    data = json.loads(out.read_text())
    assert set(data) == {"fifo", "fifo-backfill", "fairshare"}
    assert all(d["jobs"] == 18 and d["gpus"] == 48 for d in data.values())
    assert "fairshare" in capsys.readouterr().out


def test_an_export_replays_the_same_without_a_database(history, tmp_path):
    exported, direct, offline = (tmp_path / n for n in ("h.json", "direct.json", "offline.json"))
    call_command(
        "simulate",
        "--from-db",
        f"--start={START}",
        f"--end={END}",
        f"--export={exported}",
        "--runtime-estimate=declared",
        f"--json={direct}",
    )
    doc = json.loads(exported.read_text())
    assert (
        len(doc["jobs"]) == 18
        and len(doc["nodes"]) == 6
        and {t["name"] for t in doc["teams"]} == {"alpha", "beta"}
    )
    from scheduler.sim.cli import main

    main(
        [
            "--trace",
            str(exported),
            "--format",
            "berth",
            "--runtime-estimate",
            "declared",
            "--json",
            str(offline),
        ]
    )
    a, b = json.loads(direct.read_text()), json.loads(offline.read_text())
    for key in ("jobs", "avg_wait_s", "p99_wait_s", "utilization", "preemptions", "per_team"):
        assert a[key] == b[key], key


def test_simulate_needs_a_trace_or_the_database(db):
    with pytest.raises(CommandError):
        call_command("simulate")
    with pytest.raises(CommandError):
        call_command("simulate", "--from-db")


@pytest.mark.parametrize("flag, want", [((), True), (("--no-reclaim-backoff",), False)])
def test_simulate_from_db_replays_with_the_portals_reclaim_backoff(
    history, tmp_path, settings, flag, want
):
    """As the what-if does (policy_config): BERTH_RECLAIM_BACKOFF on unless a flag says."""
    settings.BERTH = {**settings.BERTH, "RECLAIM_BACKOFF": True}
    out = tmp_path / "r.json"
    call_command(
        "simulate", "--from-db", f"--start={START}", f"--end={END}", f"--json={out}", *flag
    )
    assert json.loads(out.read_text())["setup"]["reclaim_backoff"] is want

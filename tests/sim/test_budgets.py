"""The simulator replays with GPU-hour budgets (--budget): what a budget does to waits."""

import argparse
import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from scheduler.sim import SimConfig, TraceJob, homogeneous, quota_teams, simulate
from scheduler.sim.budgets import BudgetSpec, budget_arg, month_bounds
from scheduler.sim.cli import main

EVE = datetime(2026, 12, 31, 20, 0, tzinfo=UTC).timestamp()
NEW_YEAR = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
HOUR = 3600.0


def run(budgets=()):
    jobs = [
        TraceJob(1, "a", EVE, HOUR, 1, 8),
        TraceJob(2, "a", EVE + 10, HOUR, 1, 8),
        TraceJob(3, "b", EVE + 20, HOUR, 1, 8),
    ]
    nodes = homogeneous(2, 8)
    jobs = [replace(j, flavor=nodes[0].flavor) for j in jobs]
    return simulate(jobs, nodes, quota_teams(jobs, nodes), SimConfig(budgets=tuple(budgets)))


def test_a_budget_holds_the_second_job_until_the_month_resets():
    free = run()
    assert free.summary["max_wait_s"] == pytest.approx(HOUR - 20)  # job 3 waits for a node
    assert "budget_blocked_jobs" not in free.summary

    held = run([BudgetSpec("a", "*", 10.0)])  # 8 GPU-hours used + 8 more > 10
    assert held.summary["budget_blocked_jobs"] == 1
    assert held.summary["max_wait_s"] == pytest.approx(NEW_YEAR - (EVE + 10))


def test_every_team_with_a_star():
    held = run([BudgetSpec("*", "*", 10.0)])
    assert held.summary["budget_blocked_jobs"] == 1  # team b's one job fits its own budget


@pytest.mark.parametrize("text", ["a", "a=0", "a=-1", "=5", "a=many"])
def test_bad_flags_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        budget_arg(text)


def test_flag_and_month():
    assert budget_arg("vision:h100=5000") == BudgetSpec("vision", "h100", 5000.0)
    assert budget_arg("*=10") == BudgetSpec("*", "*", 10.0)
    assert month_bounds(EVE) == (datetime(2026, 12, 1, tzinfo=UTC).timestamp(), NEW_YEAR)


def test_a_job_bigger_than_its_whole_budget_never_starts_and_the_replay_ends():
    jobs = [TraceJob(1, "a", EVE, 10 * HOUR, 1, 8), TraceJob(2, "a", EVE + 10, HOUR, 1, 1)]
    nodes = homogeneous(1, 8)
    jobs = [replace(j, flavor=nodes[0].flavor) for j in jobs]
    config = SimConfig(budgets=(BudgetSpec("a", "*", 50.0),))  # job 1 needs 80
    result = simulate(jobs, nodes, quota_teams(jobs, nodes), config)
    assert (result.summary["jobs"], result.summary["unfinished"]) == (1, 1)
    assert result.summary["budget_blocked_jobs"] == 1


def test_the_flag_through_the_cli_is_recorded_and_holds_jobs(tmp_path):
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += [f"2017-10-01 00:{i:02d}:00,3600.0,8,0,abc" for i in range(6)]
    trace = tmp_path / "philly.csv"
    trace.write_text("\n".join(rows) + "\n")
    args = ["--trace", str(trace), "--nodes", "4", "--gpus-per-node", "8"]
    free, held = tmp_path / "free.json", tmp_path / "held.json"
    assert main([*args, "--json", str(free)]) == 0
    assert main([*args, "--budget", "abc=20", "--json", str(held)]) == 0
    free, held = json.loads(free.read_text()), json.loads(held.read_text())
    assert held["setup"]["budgets"] == ["abc:*=20"]
    assert held["budget_blocked_jobs"] == 4  # 8 GPU-hours each: two fit in 20
    assert held["max_wait_s"] > 29 * 24 * HOUR > free["max_wait_s"]  # until 1 November

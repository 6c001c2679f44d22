"""python -m scheduler.sim shows a long replay's progress on stderr (issue 16, item 15)."""

from __future__ import annotations

import io

from scheduler.sim import cli
from scheduler.sim.trace import TraceJob
from tests.sim.test_cli import philly  # noqa: F401 — the fixture


class Clock:
    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def jobs(n: int) -> list[TraceJob]:
    return [TraceJob(i, "a", float(i * 3600), 600.0, 1, 1) for i in range(n)]  # one an hour


def test_a_long_replay_reports_day_jobs_and_time_left():
    out = io.StringIO()
    progress = cli.Progress("fairshare", jobs(97), stream=out, clock=Clock(step=12.0))

    for share in (0.25, 0.5, 1.0):
        progress(share)

    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "fairshare: simulated day 1.0 of 4.0, 24 of 97 jobs submitted (25%), 12 s elapsed, "
        "about 36 s left"
    )
    assert lines[1].startswith("fairshare: simulated day 2.0 of 4.0, 48 of 97 jobs")
    assert "about 24 s left" in lines[1]
    assert lines[2].endswith("elapsed; finishing the running jobs")


def test_a_short_replay_prints_nothing():
    out = io.StringIO()
    progress = cli.Progress("fifo", jobs(10), stream=out, clock=Clock(step=0.1))
    for share in (0.5, 1.0):
        progress(share)
    assert out.getvalue() == ""


def test_the_cli_passes_progress_to_the_replay(philly, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setattr(cli.Progress, "FIRST_AFTER_S", 0.0)
    monkeypatch.setattr(cli.Progress, "EVERY_S", 0.0)
    monkeypatch.setattr(cli, "simulate", _reporting(cli.simulate))

    cli.main(["--trace", str(philly), "--nodes", "3", "--gpus-per-node", "8"])

    err = capsys.readouterr().err
    assert "fairshare: simulated day 0.5 of 1.5, 40 of 80 jobs submitted (50%)" in err


def _reporting(simulate):
    """The replay reports halfway, as the engine does every PROGRESS_EVERY arrivals."""

    def run(jobs, nodes, teams, config, progress=None):
        progress(0.5)
        return simulate(jobs, nodes, teams, config, progress=progress)

    return run

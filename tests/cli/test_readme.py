"""The README's `berth` block, run as written: each line in a real shell on a terminal,
through the installed console script, against a live portal (issue 16, item 2)."""

from __future__ import annotations

import os
import pty
import re
import select
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import ROOT, finish, start
from tests.factories import PASSWORD

DOCUMENTED_URL = "http://127.0.0.1:8000"


def readme_block(containing: str) -> str:
    """The fenced shell block of README.md that holds `containing`, unindented."""
    text = (ROOT / "README.md").read_text()
    for match in re.finditer(r"^( *)```sh\n(.*?)^\1```", text, re.S | re.M):
        indent, body = match.group(1), match.group(2)
        if containing in body:
            return "".join(line.removeprefix(indent) for line in body.splitlines(True))
    raise AssertionError(f"README.md has no sh block with {containing!r}")


class Terminal:
    """A shell on a pseudo-terminal: what it printed so far, and keys to type."""

    def __init__(self, script: str, env: dict):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: bash, stopping at the first failing command
            os.execve("/bin/bash", ["bash", "-e", "-c", script], env)
        self.seen = ""

    def read(self, timeout: float = 0.2) -> bool:
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the shell ended
            return False
        self.seen += chunk.decode(errors="replace")
        return bool(chunk)

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def exit_code(self) -> int:
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


def test_the_readme_cli_block_runs_as_written(live_server, cluster, personas, home):
    from portal.core.models import Job

    bindir = Path(sys.executable).parent
    if not (bindir / "berth").exists():
        pytest.skip("the berth console script is not installed (make install)")
    block = readme_block("berth login")
    assert DOCUMENTED_URL in block
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(home.parent),
        "BERTH_CONFIG": str(home),
        "PYTHONPATH": str(ROOT),
        "TERM": "dumb",
    }
    shell = Terminal(block.replace(DOCUMENTED_URL, live_server.url), env)
    answered, ran = set(), False
    deadline = time.monotonic() + 120
    while shell.read() and time.monotonic() < deadline:
        for prompt, answer in (("Username: ", "member_a\n"), ("Password: ", PASSWORD + "\n")):
            if prompt in shell.seen and prompt not in answered:
                answered.add(prompt)
                shell.type(answer)
        if "waited" in shell.seen and not ran:  # `berth wait` polls: the job runs and ends
            job = Job.objects.get(name="eval")
            start(job.pk)
            finish(job.pk, "succeeded", exit_code=0)
            ran = True

    assert shell.exit_code() == 0, shell.seen
    out = shell.seen
    assert f"Logged in to {live_server.url} as member_a" in out
    job = Job.objects.get(name="eval")
    assert (job.workers, job.gpus_per_worker, job.command) == (2, 8, ["python", "eval.py"])
    assert "JOBID" in out and "What would change it:" in out  # queue --me, why
    assert f"job {job.pk} succeeded" in out  # wait
    assert "Fair share" in out  # share
    assert "Traceback" not in out

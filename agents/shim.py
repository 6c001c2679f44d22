"""Run one worker command and record how it ended.

The process runtime starts ``python -I shim.py WORKER_DIR -- CMD ARGS...`` in
a new session. The shim starts CMD in a process group of its own, forwards
stop signals to that group, and writes ``result.json`` with the exit code
(signal n -> 128 + n) when CMD ends. Because the shim outlives CMD even when
the group is SIGKILLed, the exit code survives an agent restart: the next
agent reads the file instead of needing to be CMD's parent.

Standard library only, and run by path with ``-I``: it must work even where
the ``agents`` package is not importable, and it must not shadow anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def proc_start_ticks(pid: int) -> int | None:
    """Return the process start time from /proc (clock ticks since boot) to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.shim.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_result(worker_dir: str, exit_code: int, error: str = "") -> None:
    result = {"exit_code": exit_code, "finished_at": time.time(), "error": error}
    write_atomic(os.path.join(worker_dir, "result.json"), json.dumps(result))


class Forwarder:
    """Pass stop signals on to the command's process group, holding any that arrive before it exists."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.pending: list[int] = []

    def install(self) -> None:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self.handle)

    def handle(self, signum: int, _frame: object) -> None:
        if self.pgid is None:
            self.pending.append(signum)
        else:
            self.send(signum)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        for signum in self.pending:
            self.send(signum)
        self.pending.clear()

    def send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)


def run(worker_dir: str, command: list[str]) -> int:
    forwarder = Forwarder()
    forwarder.install()
    # The pid file doubles as "ready": from now on a stop signal is forwarded, not fatal.
    pid = os.getpid()
    write_atomic(
        os.path.join(worker_dir, "pid"), json.dumps({"pid": pid, "start": proc_start_ticks(pid)})
    )
    try:
        # A new session makes the command the leader of its own process group.
        child = subprocess.Popen(command, start_new_session=True)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        print(f"berth: cannot start {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        write_result(worker_dir, code, error=f"cannot start {command[0]!r}: {exc.strerror or exc}")
        return code
    write_atomic(os.path.join(worker_dir, "child.pid"), str(child.pid))
    forwarder.attach(child.pid)
    returncode = child.wait()
    forwarder.send(signal.SIGKILL)  # stragglers left in the group, as a container's end would
    code = 128 - returncode if returncode < 0 else returncode
    write_result(worker_dir, code)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: shim.py WORKER_DIR -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run(args[0], args[2:])


if __name__ == "__main__":
    sys.exit(main())

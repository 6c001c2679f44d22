"""Run one worker command and record how it ended.

The process runtime starts ``python -I -S shim.py WORKER_DIR -- CMD ARGS...`` in
a new session. The shim starts CMD in a process group of its own, forwards
stop signals to that group, and writes ``result.json`` with the exit code
(signal n -> 128 + n) when CMD ends. Because the shim outlives CMD even when
the group is SIGKILLed, the exit code survives an agent restart: the next
agent reads the file instead of needing to be CMD's parent.

With ``--lease PATH`` the shim also fences its command: the agent renews the
lease file (``{"valid_until": epoch seconds}``) after every heartbeat the
portal answers; if the lease runs out — the agent crashed, or it has been cut
off from the portal past its disconnect limit — the shim stops the command
(SIGTERM, then SIGKILL after FENCE_GRACE_S) so a gang the portal requeues
elsewhere never runs twice. A missing lease file fences nothing.

Standard library only, and run by path with ``-I -S``: it must work even where
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


FENCE_GRACE_S = 10.0
LEASE_POLL_S = 1.0


def lease_expired(path: str | None, now: float) -> bool:
    """True when the lease file exists and its time is up; unreadable counts as still valid
    (the agent is rewriting it)."""
    if not path:
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            return float(json.load(handle)["valid_until"]) < now
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        return False


def wait_fenced(child: subprocess.Popen, forwarder: Forwarder, lease: str | None) -> int:
    """Wait for the command; stop it if the lease runs out. Return its returncode."""
    while True:
        try:
            return child.wait(timeout=LEASE_POLL_S if lease else None)
        except subprocess.TimeoutExpired:
            if lease_expired(lease, time.time()):
                break
    # The message lands in the worker's log, which the portal shows as its log tail.
    print(
        "berth: the agent's lease expired (agent gone or cut off from the portal); "
        "stopping the worker",
        file=sys.stderr,
        flush=True,
    )
    forwarder.send(signal.SIGTERM)
    try:
        returncode = child.wait(timeout=FENCE_GRACE_S)
    except subprocess.TimeoutExpired:
        forwarder.send(signal.SIGKILL)
        returncode = child.wait()
    return returncode


def run(worker_dir: str, command: list[str], lease: str | None = None) -> int:
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
    returncode = wait_fenced(child, forwarder, lease)
    forwarder.send(signal.SIGKILL)  # stragglers left in the group, as a container's end would
    code = 128 - returncode if returncode < 0 else returncode
    write_result(worker_dir, code)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    lease = None
    if len(args) > 2 and args[1] == "--lease":
        lease, args = args[2], [args[0], *args[3:]]
    if len(args) < 3 or args[1] != "--":
        print("usage: shim.py WORKER_DIR [--lease FILE] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run(args[0], args[2:], lease)


if __name__ == "__main__":
    sys.exit(main())

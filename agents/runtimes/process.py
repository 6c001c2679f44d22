"""Workers as plain processes: for development, demos and nodes without a container engine.

Each worker gets a directory ``<state>/workers/<key>/`` holding

- ``meta.json``  what was started and when (written before the process starts),
- ``pid``        the shim's pid and start time (guards against pid reuse),
- ``child.pid``  the command's process group, written by the shim,
- ``output.log`` stdout and stderr,
- ``result.json`` the exit code, written by the shim when the command ends
  (its modification time is when; the shim starts no ``date`` for it).

The shim is ``agents/shim.sh``, run by ``/bin/sh``: a shell starts in ~0.7 ms of
CPU where a Python interpreter took ~16 ms, which was most of what a short job
cost the node (docs/benchmarks.md, "Submit to running").

A restarted agent rebuilds everything from these files: live shims are
re-adopted, finished ones report their recorded exit code.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

from agents.runtimes.base import Runtime, StartFailed, StopBook
from agents.state import LEASE_FILE, ensure_dir, read_json, write_json
from agents.workers import (
    EXITED,
    FAILED_TO_START,
    LOG_TAIL_BYTES,
    RUNNING,
    STARTING,
    STOPPING,
    WorkerSpec,
    WorkerStatus,
    exit_code_of,
    key_order,
    tail_text,
    utc_iso,
    valid_key,
)

log = logging.getLogger(__name__)

SHIM_PATH = Path(__file__).resolve().parent.parent / "shim.sh"
# A shim that has not written its pid file by then never started (the agent
# died between writing meta.json and starting it).
START_TIMEOUT_S = 30.0
SHIM_READY_TIMEOUT_S = 10.0
# Reported when a worker vanished without a recorded exit (node reboot, OOM
# killer, SIGKILL from outside): the code a killed process gets.
VANISHED_EXIT_CODE = 128 + signal.SIGKILL


def worker_base_env(base: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment minus BERTH_* settings (they hold tokens)."""
    return {name: value for name, value in base.items() if not name.startswith("BERTH_")}


def worker_env(spec: WorkerSpec, base: Mapping[str, str]) -> dict[str, str]:
    """Build the worker's environment: the agent's own minus BERTH_* settings (they hold tokens),
    then the job's env, then the gang env and CUDA_VISIBLE_DEVICES, which the job cannot override."""
    env = worker_base_env(base)
    env.update(spec.environment())
    return env


def _alive(pid: int, start_ticks: int | None) -> bool:
    """True when ``pid`` runs and is the process that was started (same start time, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return False
    except OSError:
        return _alive_without_proc(pid)
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return False
    return start_ticks is None or int(fields[19]) == start_ticks


def _alive_without_proc(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessRuntime(Runtime):
    name = "process"

    def __init__(
        self,
        state_dir: Path,
        *,
        shell: str = "/bin/sh",
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(StopBook(state_dir / "stops" / "process"), clock)
        self._root = ensure_dir(state_dir / "workers")
        # The agent renews this lease; a worker whose lease runs out stops itself (shim.sh).
        self._lease = state_dir / LEASE_FILE
        self._shell = shell
        # Started in the background by a shell, the agent ignores SIGINT and SIGQUIT, and
        # so would each shim it starts; a shell cannot trap a signal ignored on entry, so
        # the shim could not forward those stop orders. It is started with them put back.
        self._unignore = _unignore() if _ignores_stop_signals() else ()
        # The agent's environment as workers get it, read once: copying os.environ for
        # every start (it decodes each variable) was a seventh of the agent's Python.
        self._base_env = worker_base_env(os.environ if base_env is None else base_env)
        # Shims this instance started: polled so they never linger as zombies.
        self._children: dict[str, subprocess.Popen] = {}
        # Each worker's meta.json, pid and result.json are written once (the result by the
        # shim, or by this runtime when there is none) and never change: once read, they
        # are remembered until forget(), so a tick reads only what may still appear.
        self._written: dict[str, dict[str, dict]] = {}
        # forget() on one thread and a read on another: what a read remembers after the
        # worker was forgotten must not stay (nor a forgotten worker be listed from it).
        self._written_lock = threading.Lock()

    def _dir(self, key: str) -> Path:
        return self._root / key

    def start(self, spec: WorkerSpec) -> None:
        if not spec.command:
            raise StartFailed("the process runtime needs a command (it cannot run an image)")
        wdir = self._dir(spec.key)
        if wdir.exists():
            log.warning("worker %s already has a directory; not starting it twice", spec.key)
            return
        self._create_dir(spec, wdir)
        argv = [
            *self._unignore,
            self._shell,
            str(SHIM_PATH),
            str(wdir),
            "--lease",
            str(self._lease),
            "--reset-signals",
            signal_reset(),
            "--",
            *spec.command,
        ]
        try:
            with open(wdir / "output.log", "ab") as output:
                child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=worker_env(spec, self._base_env),
                    cwd=wdir,
                    start_new_session=True,
                )
        except OSError as exc:
            shutil.rmtree(wdir, ignore_errors=True)
            raise StartFailed(f"cannot start the worker shim: {exc}") from exc
        self._children[spec.key] = child
        self._await_shim(spec.key, child)
        if self.on_exit is not None:
            self._follow(spec.key, child)

    def _follow(self, key: str, child: subprocess.Popen) -> None:
        """Tell ``on_exit`` when the shim ends (it ends when the command does, after writing
        result.json). One small thread per worker; it also reaps the shim."""

        def wait() -> None:
            child.wait()
            if self.on_exit is not None:
                self.on_exit(key)

        threading.Thread(target=wait, name=f"berth-exit-{key}", daemon=True).start()

    def _create_dir(self, spec: WorkerSpec, wdir: Path) -> None:
        """Build the directory under a hidden name and rename it, so ``list()`` (running on another
        thread) never sees a worker without its meta.json and mistakes it for a dead one."""
        tmp = self._root / f".{spec.key}.new"
        shutil.rmtree(tmp, ignore_errors=True)
        ensure_dir(tmp)
        write_json(tmp / "meta.json", self._meta(spec), durable=False)
        tmp.rename(wdir)

    def _await_shim(self, key: str, child: subprocess.Popen) -> None:
        """Return once the shim has written its pid file. Before that a stop signal would kill
        the shim itself (its handlers are not installed yet) and the exit code would be lost."""
        deadline = time.monotonic() + SHIM_READY_TIMEOUT_S
        while self._pid(key) is None:
            # Read the pid file again once the shim ended: it may have written it, run a
            # short command and exited between the read above and this poll (a start).
            if child.poll() is not None and self._pid(key) is None:
                self._fail_start(
                    key, f"the worker shim exited with {child.returncode}: {self.log_tail(key)}"
                )
            if time.monotonic() > deadline:
                child.kill()
                child.wait()
                self._fail_start(
                    key, f"the worker shim did not start within {SHIM_READY_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.005)

    def _fail_start(self, key: str, message: str) -> NoReturn:
        """Record the failed start (so it is reported, even after a restart, until acknowledged) and raise."""
        write_json(
            self._dir(key) / "result.json",
            {"exit_code": None, "finished_at": self._clock(), "error": message},
        )
        raise StartFailed(message)

    def _meta(self, spec: WorkerSpec) -> dict:
        return {
            "key": spec.key,
            "command": list(spec.command),
            "gpu_uuids": list(spec.gpu_uuids),
            "started_at": self._clock(),
        }

    def list(self) -> list[WorkerStatus]:
        keys = sorted((p.name for p in self._root.iterdir() if valid_key(p.name)), key=key_order)
        statuses = (self._status(key) for key in keys)
        return [status for status in statuses if status is not None]

    def _status(self, key: str) -> WorkerStatus | None:
        """The worker's status; None when remove() (on another thread) took it meanwhile."""
        wdir = self._dir(key)
        meta = self._once(key, "meta", lambda: read_json(wdir / "meta.json")) or {}
        started_at = utc_iso(meta.get("started_at"))
        pid = self._pid(key)
        # Liveness first, result second: the shim writes the result before it exits.
        if self._shim_alive(key, pid):
            if pid is None:
                return WorkerStatus(key, STARTING, started_at=started_at)
            state = STOPPING if self.stopping(key) else RUNNING
            return WorkerStatus(key, state, started_at=started_at)
        result = self._once(key, "result", lambda: self._result(wdir))
        if result is None and pid is None and not self._start_overdue(meta):
            return WorkerStatus(key, STARTING, started_at=started_at)
        if result is None:
            result = self._once(key, "result", lambda: self._record_vanished(key, pid))
            if result is None:
                return None
        return WorkerStatus(
            key,
            FAILED_TO_START if result.get("error") else EXITED,
            exit_code=result.get("exit_code"),
            started_at=started_at,
            finished_at=utc_iso(result.get("finished_at")),
            detail=result.get("error", ""),
        )

    @staticmethod
    def _result(wdir: Path) -> dict | None:
        """result.json, its ``finished_at`` defaulting to the file's modification time (the
        shim writes the file the moment the command ended)."""
        path = wdir / "result.json"
        result = read_json(path)
        if isinstance(result, dict) and result.get("finished_at") is None:
            with contextlib.suppress(OSError):
                result["finished_at"] = path.stat().st_mtime
        return result if isinstance(result, dict) else None

    def _pid(self, key: str) -> dict | None:
        """The shim's pid file: written by the shim itself once it is ready for signals."""
        return self._once(key, "pid", lambda: read_json(self._dir(key) / "pid"))

    def _once(self, key: str, name: str, read: Callable[[], dict | None]) -> dict | None:
        """A file of the worker that is written once: read until it is there, then remembered."""
        files = self._written.get(key)
        if files is not None and name in files:
            return files[name]
        value = read()
        if isinstance(value, dict):
            with self._written_lock:
                if self._dir(key).is_dir():  # not forgotten while it was read
                    self._written.setdefault(key, {})[name] = value
        return value

    def _shim_alive(self, key: str, pid: dict | None) -> bool:
        child = self._children.get(key)
        if child is not None:
            return child.poll() is None
        return pid is not None and _alive(pid["pid"], pid.get("start"))

    def _start_overdue(self, meta: dict) -> bool:
        return self._clock() - meta.get("started_at", 0) > START_TIMEOUT_S

    def _record_vanished(self, key: str, pid: dict | None) -> dict | None:
        """Persist an exit for a worker that ended without the shim recording one, so it stays
        stable; None when its directory is gone (removed while list() read it)."""
        child = self._children.get(key)
        code = VANISHED_EXIT_CODE
        if child is not None and child.returncode is not None:
            code = exit_code_of(child.returncode)
        if pid is None:
            note = "the worker never started (the agent stopped while starting it)"
            result = {"exit_code": None, "finished_at": self._clock(), "error": note}
        else:
            note = f"worker ended without recording an exit status (reboot or killed); reporting {code}"
            result = {"exit_code": code, "finished_at": self._clock(), "error": ""}
        try:
            with open(self._dir(key) / "output.log", "a", encoding="utf-8") as output:
                output.write(f"\nberth-agent: {note}\n")
            write_json(self._dir(key) / "result.json", result)
        except FileNotFoundError:
            return None  # removed between the check and the write
        log.warning("worker %s: %s", key, note)
        return result

    def _signal(self, key: str, sig: signal.Signals) -> None:
        """Signal the shim, which forwards to the command's process group (and holds the signal
        if the command is not started yet)."""
        pid = self._pid(key)
        if self._shim_alive(key, pid) and pid is not None:
            _send(os.kill, pid["pid"], sig)

    def _kill(self, key: str) -> None:
        """SIGKILL the command's process group; the shim survives to record 137."""
        pid = self._pid(key)
        if not self._shim_alive(key, pid) or pid is None:
            return
        try:
            child_pgid = int((self._dir(key) / "child.pid").read_text())
        except (OSError, ValueError):
            _send(os.kill, pid["pid"], signal.SIGKILL)  # the command has not started: kill the shim
            return
        try:
            os.killpg(child_pgid, signal.SIGKILL)
        except ProcessLookupError:  # a moment after the fork, before setsid made the group
            _send(os.kill, child_pgid, signal.SIGKILL)
        except PermissionError:
            pass

    def log_tail(self, key: str, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self._dir(key) / "output.log", "rb") as output:
                size = output.seek(0, os.SEEK_END)
                output.seek(max(0, size - limit))
                return tail_text(output.read(), limit)
        except OSError:
            return ""

    def forget(self, key: str) -> None:
        if not valid_key(key):
            return
        if self._shim_alive(key, self._pid(key)):
            log.warning("not forgetting worker %s: it is still running", key)
            return
        child = self._children.pop(key, None)
        if child is not None:
            child.poll()
        with self._written_lock:
            shutil.rmtree(self._dir(key), ignore_errors=True)
            self._written.pop(key, None)
        self._stops.discard(key)


def _ignores_stop_signals() -> bool:
    """Whether this process ignores SIGINT or SIGQUIT (and its children would too)."""
    return any(signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGINT, signal.SIGQUIT))


def _unignore() -> tuple[str, ...]:
    """The command prefix that starts a program with SIGINT and SIGQUIT at their default:
    env where it can (signal_reset), else this Python."""
    if signal_reset() == "env":
        return ("env", "--default-signal=INT,QUIT")
    code = (
        "import os, signal, sys\n"
        "for s in (signal.SIGINT, signal.SIGQUIT):\n"
        "    signal.signal(s, signal.SIG_DFL)\n"
        "os.execvp(sys.argv[1], sys.argv[1:])"
    )
    return (sys.executable, "-I", "-S", "-c", code)


@functools.cache
def signal_reset() -> str:
    """How shim.sh gives the command back the SIGINT and SIGQUIT a shell's background job
    starts without: ``env`` where ``env --default-signal`` works (coreutils 8.31+, one exec),
    else this Python (an interpreter per worker, the old cost). Asked once per agent."""
    try:
        probe = subprocess.run(
            ["env", "--default-signal=INT,QUIT", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        probe = None
    if probe is not None and probe.returncode == 0:
        return "env"
    log.warning("env --default-signal is missing: each worker's start pays for a Python")
    return sys.executable


def _send(kill: Callable[[int, int], None], target: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(target, sig)

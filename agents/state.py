"""Files the agent keeps in its state directory, written so a crash never leaves half a file."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any


def ensure_dir(path: Path, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if missing; private by default because it holds a token."""
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    return path


def write_atomic(
    path: Path, text: str, mode: int = 0o600, *, durable: bool = True, sync_dir: bool = False
) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so readers see old or new, never half.

    Durable (the default): the file is fsynced before the rename. ``sync_dir`` also
    fsyncs its directory after, so once this returns a power cut brings back the new
    contents, never the old (the node token: the portal retires the old one once the new
    one is used; a stop record may come back older, and a reboot ends its worker anyway).
    ``durable=False`` skips the fsync, for files that only matter while the machine stays
    up (a worker's meta.json, the lease): a reboot ends the workers they describe anyway,
    and an agent that crashes leaves them in the page cache for the next one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            # os.write, not a text file object: building one (codec, buffer) cost more than
            # the write, for the worker files each start writes (docs/benchmarks.md, "H").
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    write_atomic(path, json.dumps(data, sort_keys=True), durable=durable)


def read_json(path: Path) -> Any | None:
    """Return the parsed file, or None when it is missing or unreadable (treated as not written yet)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class NodeTokenFile:
    """The node token issued at registration, kept 0600 so only the agent's user can read it."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> str | None:
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return token or None

    def save(self, token: str) -> None:
        ensure_dir(self.path.parent)
        write_atomic(self.path, token + "\n", mode=0o600, sync_dir=True)

    def saved_at(self) -> float | None:
        """When the token was last written (the file's mtime, epoch seconds); None if absent."""
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def can_save(self) -> bool:
        """Whether a save would get through now: a small file written, fsynced and removed
        beside the token (a full disk, a quota, a read-only remount say no). Asked before
        each rotation, so a disk that cannot take the new token does not spend the old
        one's overlap."""
        probe = self.path.with_name(f".{self.path.name}.probe")  # one name: nothing piles up
        try:
            write_atomic(probe, "probe\n" * 64, mode=0o600)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):  # a read-only mount refuses even this
                probe.unlink(missing_ok=True)
        return True

    def writable(self) -> bool:
        """Whether save can replace the file: write_atomic writes beside it and renames."""
        return os.access(self.path.parent, os.W_OK | os.X_OK)


# Renewed by the agent after every answered heartbeat; read by the process
# runtime's shim, which stops its worker when the lease runs out.
LEASE_FILE = "lease.json"


def write_lease(path: Path, valid_for_s: float) -> None:
    """Renew the workers' lease for ``valid_for_s`` seconds. ``valid_until`` is epoch seconds
    (what shims of earlier versions read); ``valid_until_uptime_cs`` is hundredths of a second
    on the boot clock /proc/uptime shows, which agents/shim.sh compares without a process."""
    uptime_cs = int((time.clock_gettime(time.CLOCK_BOOTTIME) + valid_for_s) * 100)
    record = {"valid_until": time.time() + valid_for_s, "valid_until_uptime_cs": uptime_cs}
    write_json(path, record, durable=False)

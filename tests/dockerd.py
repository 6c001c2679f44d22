"""A real Docker engine for the tests: the one that answers, or a private dockerd started here.

``engine_session`` uses the engine at DOCKER_HOST (or the default socket) when
one answers. Otherwise, as root with Debian's ``docker.io`` installed, it starts
a private ``dockerd`` (vfs storage, no iptables, no bridge; its own data root,
exec root, pid file and socket in a temporary directory), points DOCKER_HOST at
it for the session, and stops only that daemon at the end. The test image is
imported from a directory holding a static busybox and its applet links, so no
registry is needed. When no engine can be had, the reason names the cause and
the tests that need it are skipped with it.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IMAGE = "berth-test/busybox:1"
APPLETS = ("sh", "sleep", "echo", "cat", "env", "true", "false", "test", "printf")
START_TIMEOUT_S = 30.0


class NoEngine(Exception):
    """No Docker engine answers and none can be started here; the message says why."""


@dataclass
class Engine:
    client: object  # docker.DockerClient
    host: str  # what DOCKER_HOST must say to reach it
    private: bool

    def remove_containers(self, label: str) -> None:
        """Remove every container carrying ``label`` ("key" or "key=value")."""
        for container in self.client.containers.list(
            all=True, filters={"label": label}, ignore_removed=True
        ):
            with contextlib.suppress(Exception):
                container.remove(force=True)


def _client(host: str):
    import docker

    client = docker.DockerClient(base_url=host, timeout=30)
    client.ping()
    return client


def _answering(host: str):
    try:
        return _client(host)
    except Exception:
        return None


def _static_busybox() -> Path:
    path = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(path):
        raise NoEngine("busybox is not installed (apt-get install busybox-static)")
    head = Path(path).read_bytes()[:8192]
    if b"ld-linux" in head:  # a dynamic busybox would not run in an empty image
        raise NoEngine(f"{path} is not static (apt-get install busybox-static)")
    return Path(path)


def image_tar(busybox: Path) -> bytes:
    """An image root with /bin/busybox, its applet links, and /tmp."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("bin", "tmp"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    return buffer.getvalue()


def ensure_image(client) -> None:
    import docker

    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        repository, tag = IMAGE.split(":")
        client.api.import_image_from_data(
            image_tar(_static_busybox()), repository=repository, tag=tag
        )


def _start_dockerd(root: Path) -> tuple[subprocess.Popen, str]:
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise NoEngine(
            "no Docker engine answers and dockerd is not installed (apt-get install docker.io)"
        )
    if os.geteuid() != 0:
        raise NoEngine(
            f"no Docker engine answers and a private dockerd needs root (uid {os.geteuid()})"
        )
    host = f"unix://{root}/docker.sock"
    argv = [
        dockerd,
        "--storage-driver", "vfs",
        "--iptables=false",
        "--bridge=none",
        "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "dockerd.pid"),
        "-H", host,
    ]  # fmt: skip
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 — owned by the daemon
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if _answering(host) is not None:
            return proc, host
        time.sleep(0.2)
    _stop(proc)
    lines = (root / "dockerd.log").read_text(errors="replace").strip().splitlines()
    raise NoEngine(f"a private dockerd did not start: {lines[-1] if lines else 'no output'}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop the daemon we started (and its containerd): SIGTERM, then SIGKILL to its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@contextlib.contextmanager
def engine_session() -> Iterator[Engine]:
    """Yield an engine with the test image; raise NoEngine (before yielding) when there is none."""
    try:
        import docker  # noqa: F401
    except ImportError:
        raise NoEngine("the docker package (Docker SDK for Python) is not installed") from None
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    client = _answering(host)
    if client is not None:
        ensure_image(client)
        yield Engine(client, host, private=False)
        client.close()
        return
    root = Path(tempfile.mkdtemp(prefix="berth-dockerd-"))
    proc, host = _start_dockerd(root)
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host  # for the agents the tests start
    client = _client(host)
    try:
        ensure_image(client)
        yield Engine(client, host, private=True)
    finally:
        with contextlib.suppress(Exception):
            Engine(client, host, True).remove_containers("berth.key")
        client.close()
        _stop(proc)
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved
        _unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def _unmount_under(root: Path) -> None:
    """dockerd leaves its network namespace mounted in the exec root (exec/netns/default)."""
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{root}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)

"""Worker runtimes: ``process`` (plain processes), ``docker`` (Docker SDK) and ``fake`` (in memory)."""

from __future__ import annotations

from pathlib import Path

from agents.runtimes.base import Runtime, RuntimeUnavailable, StartFailed, StopBook

RUNTIMES = ("process", "docker", "fake")

__all__ = ["RUNTIMES", "Runtime", "RuntimeUnavailable", "StartFailed", "StopBook", "make_runtime"]


def make_runtime(name: str, state_dir: Path, node: str, **docker_options: str) -> Runtime:
    """Build the named runtime; imports lazily so a node without the docker package can run processes.
    ``docker_options`` (``pull``, ``gpus``) are DockerRuntime's and ignored by the others."""
    if name == "process":
        from agents.runtimes.process import ProcessRuntime

        return ProcessRuntime(state_dir)
    if name == "docker":
        try:
            from agents.runtimes.docker_runtime import DockerRuntime
        except ImportError as exc:
            raise RuntimeUnavailable(
                "the docker package (Docker SDK for Python) is not installed: pip install docker"
            ) from exc

        return DockerRuntime.from_env(state_dir, node, **docker_options)
    if name == "fake":
        from agents.runtimes.fake import FakeRuntime

        return FakeRuntime()
    raise ValueError(f"unknown runtime {name!r}")

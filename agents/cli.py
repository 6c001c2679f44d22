"""``berth-agent``: build the agent from flags and environment, run it, and exit with a meaningful code.

Exit codes: 0 stopped by SIGTERM/SIGINT; 2 bad configuration; 3 NVML or the
container runtime unavailable; 4 the portal rejected this node's credentials.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from agents.agent import EXIT_AUTH, EXIT_CONFIG, EXIT_OK, EXIT_UNAVAILABLE, Agent
from agents.config import AgentConfig, ConfigError, parse_config
from agents.gpu import FakeGpuBackend, GpuBackend, GpuUnavailable
from agents.logs import configure_logging
from agents.portal import PortalClient
from agents.runtimes import RuntimeUnavailable, make_runtime
from agents.state import NodeTokenFile, ensure_dir

log = logging.getLogger("agents.cli")

__all__ = ["EXIT_AUTH", "EXIT_CONFIG", "EXIT_OK", "EXIT_UNAVAILABLE", "main", "make_gpu_backend"]


def make_gpu_backend(config: AgentConfig) -> GpuBackend:
    if config.nvml == "fake":
        return FakeGpuBackend(
            config.fake_gpus,
            config.fake_product,
            config.fake_gpu_memory_mib,
            node=config.hostname,
            faults_file=config.fake_faults_file,
        )
    from agents.nvml import NvmlGpuBackend

    return NvmlGpuBackend()


def _fail(message: str) -> int:
    print(f"berth-agent: error: {message}", file=sys.stderr)
    return EXIT_CONFIG


def _check_credentials(config: AgentConfig, token_file: NodeTokenFile) -> None:
    """Fail early when the agent could neither authenticate nor register."""
    try:
        stored = token_file.load()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the node token file {token_file.path}: {exc.strerror or exc}"
        ) from None
    if not (config.node_token or stored or config.bootstrap_token):
        raise ConfigError(
            f"no node token: set BERTH_BOOTSTRAP_TOKEN (or --bootstrap-token) to register this node, "
            f"or provide its token with BERTH_NODE_TOKEN or a token file ({token_file.path})"
        )


def _install_signal_handlers(agent: Agent) -> None:
    def handle(signum: int, _frame: object) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        agent.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv, os.environ)
        ensure_dir(config.state_dir)
        token_file = NodeTokenFile(config.token_path)
        _check_credentials(config, token_file)
    except ConfigError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot use the state directory {config.state_dir}: {exc.strerror or exc}")
    configure_logging(config.log_format, config.log_level)
    try:
        gpus = make_gpu_backend(config)
    except GpuUnavailable as exc:
        log.error("%s", exc)
        return EXIT_UNAVAILABLE
    try:
        runtime = make_runtime(
            config.runtime,
            config.state_dir,
            config.hostname,
            pull=config.pull,
            gpus=config.docker_gpus,
        )
    except RuntimeUnavailable as exc:
        gpus.close()
        log.error("%s", exc)
        return EXIT_UNAVAILABLE
    portal = PortalClient(config.portal_url, timeout_s=config.request_timeout_s)
    agent = Agent(config, gpus=gpus, runtime=runtime, portal=portal, token_file=token_file)
    _install_signal_handlers(agent)
    gpus.start()
    try:
        return agent.run()
    finally:
        gpus.close()
        runtime.close()
        portal.close()


if __name__ == "__main__":
    sys.exit(main())

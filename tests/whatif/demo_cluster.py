"""The demo's six nodes, registered through the agent protocol with the fake NVML backend."""

from __future__ import annotations

import json
from pathlib import Path

from agents.gpu import FakeGpuBackend
from portal.core.agents import GpuReport, heartbeat, register_node
from portal.devstack import DEMO_NODES


def gpu_reports(backend: FakeGpuBackend) -> list[GpuReport]:
    return [GpuReport(**gpu.to_json()) for gpu in backend.inventory()]


def register_demo_nodes(var_dir: Path) -> list[tuple]:
    """Register and heartbeat (Ready) each node of `make run`; return (node, backend) pairs."""
    token = json.loads((var_dir / "demo.json").read_text())["bootstrap_token"]
    nodes = []
    for host, rack, block, product, memory in DEMO_NODES:
        backend = FakeGpuBackend(8, product, memory, node=host)
        node, _ = register_node(
            bootstrap_token=token,
            hostname=host,
            rack=rack,
            block=block,
            agent_version="0.1.0",
            gpus=gpu_reports(backend),
        )
        heartbeat(node, agent_version="0.1.0", gpus=gpu_reports(backend), workers=[])
        nodes.append((node, backend))
    return nodes

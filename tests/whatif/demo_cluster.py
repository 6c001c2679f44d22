"""The demo's six nodes, registered through the agent protocol with the fake NVML backend."""

from __future__ import annotations

import json
from pathlib import Path

from agents.gpu import FakeGpuBackend
from portal.agentapi.desired import desired_state
from portal.core.actions.heartbeat import GpuReport, record_heartbeat
from portal.core.actions.nodes import Registration, register_node
from portal.devstack import DEMO_NODES


def gpu_reports(backend: FakeGpuBackend) -> list[GpuReport]:
    return [GpuReport(**gpu.to_json()) for gpu in backend.inventory()]


def register_demo_nodes(var_dir: Path) -> list[tuple]:
    """Register and heartbeat (Ready) each node of `make run`; return (node, backend) pairs."""
    token = json.loads((var_dir / "demo.json").read_text())["bootstrap_token"]
    nodes = []
    for host, rack, block, product, memory in DEMO_NODES:
        backend = FakeGpuBackend(8, product, memory, node=host)
        registration = Registration(
            hostname=host, rack=rack, block=block, agent_version="0.1.0", gpus=gpu_reports(backend)
        )
        node, _ = register_node(registration, bootstrap_token=token)
        heartbeat(node, agent_version="0.1.0", gpus=gpu_reports(backend), workers=[])
        nodes.append((node, backend))
    return nodes


def heartbeat(node, *, agent_version: str, gpus: list[GpuReport], workers: list) -> dict:
    """One heartbeat as the agent API handles it: recorded, then the desired state."""
    recorded = record_heartbeat(node, agent_version=agent_version, gpus=gpus, workers=workers)
    return desired_state(node, live=recorded.live)

"""Berth node agent: NVML inventory, worker runtimes and the heartbeat loop.

Standalone on purpose: it talks to the portal only over HTTP (docs/protocol.md)
and never imports Django, ``portal`` or ``scheduler``.
"""

__version__ = "0.1.0"

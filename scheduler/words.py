"""Counted nouns in the scheduler's sentences: '1 h100 GPU', '16 h100 GPUs', never '1 GPUs'."""

from __future__ import annotations


def gpus(n: float, flavor: str = "") -> str:
    """Return '1 GPU', '2.5 GPUs', '16 h100-80gb GPUs' (a count as `:g` writes it)."""
    kind = f"{flavor} " if flavor else ""
    return f"{n:g} {kind}GPU{'' if n == 1 else 's'}"

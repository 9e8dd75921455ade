"""``gpucomm env [--baseline B] [--json]``: this machine's fingerprint, and what changed since a baseline was
recorded (``gate.keep``, which parses and runs it)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from ..gate import keep

    keep.add_env_parser(sub)

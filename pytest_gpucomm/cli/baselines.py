"""``gpucomm baselines list | show NAME | prune NAME ... | merge A B -o C``: keeping baseline files by hand
(``gate.keep``, which parses and runs it)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from ..gate import keep

    keep.add_baselines_parser(sub)

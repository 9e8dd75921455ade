"""Which baseline file a name means: the baseline name of a device model (``"NVIDIA H200"`` -> ``h200``), the
baselines of the search folders, and a ``--gpu-baseline`` value (NAME, PATH or ``auto``) resolved to a file."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence

from .schema import BaselineError

__all__ = ["BaselineNotFound", "baseline_name_for_model", "available_baselines", "resolve_baseline"]


class BaselineNotFound(BaselineError):
    """No baseline of that name; the message lists the baselines that are available."""


# Longer names first where one is a prefix of another (mi250x before mi250, l40s before l40).
_MODEL_TOKENS = [
    "gb200", "gh200", "b200", "b100", "h200", "h100", "h800", "h20",
    "a100", "a800", "a40", "a30", "a10g", "a10", "l40s", "l40", "l4", "v100", "t4",
    "mi355x", "mi325x", "mi300x", "mi300a", "mi250x", "mi250", "mi210", "mi100",
]  # fmt: skip
_MODEL_RE = re.compile(r"(?<![a-z0-9])(" + "|".join(_MODEL_TOKENS) + r")(?![a-z0-9])")


def baseline_name_for_model(model: str) -> Optional[str]:
    """The baseline name for a device model string, or None if the model is not known.

    "NVIDIA H200" and "NVIDIA H200 NVL" -> "h200", "NVIDIA H100 80GB HBM3" -> "h100",
    "NVIDIA A100-SXM4-80GB" -> "a100", "AMD Instinct MI300X" -> "mi300x", "AMD Instinct MI250X" -> "mi250x".
    Form factors and memory sizes are not told apart: one baseline per chip.
    """
    if not model:
        return None
    m = _MODEL_RE.search(str(model).lower())
    return m.group(1) if m else None


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def available_baselines(search_dirs: Iterable[Path]) -> list[str]:
    """Names of the baseline files (``*.json``) in the directories, sorted, each once."""
    names: set[str] = set()
    for d in search_dirs:
        d = Path(d)
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.json") if p.is_file() and not p.name.startswith("."))
    return sorted(names)


def resolve_baseline(
    spec: str,
    *,
    search_dirs: Sequence[Path],
    detected_model: Optional[str],
    must_exist: bool = True,
) -> Path:
    """Turn a ``--gpu-baseline`` value into a file path.

    * ``"auto"``: the name for ``detected_model`` (see :func:`baseline_name_for_model`), then as NAME.
    * a value with a path separator or ending in ``.json``: that file (it may not exist yet: saving).
    * NAME: the first ``<dir>/<NAME>.json`` in ``search_dirs``.  If there is none: with ``must_exist``
      :class:`BaselineNotFound` listing the available names; without it, ``<search_dirs[0]>/<NAME>.json``
      (where a first ``--gpu-baseline-save`` creates it).
    """
    spec = (spec or "").strip()
    dirs = [Path(d) for d in search_dirs]
    if not spec:
        raise BaselineError("empty baseline name: give a name (e.g. h200), a path to a .json file, or 'auto'")
    if spec == "auto":
        if not detected_model:
            raise BaselineError(
                "--gpu-baseline=auto: no GPU model was detected; give the baseline name or path explicitly"
            )
        name = baseline_name_for_model(detected_model)
        if name is None:
            raise BaselineError(
                f"--gpu-baseline=auto: the detected model {detected_model!r} is not one this plugin "
                f"knows a baseline name for; give the baseline name or path explicitly"
            )
        return _resolve_name(name, dirs, must_exist, how=f"auto, from the detected model {detected_model!r}")
    if os.sep in spec or "/" in spec or (os.altsep and os.altsep in spec) or spec.endswith(".json"):
        return Path(spec).expanduser()
    if not _NAME_RE.match(spec):
        raise BaselineError(
            f"invalid baseline name {spec!r}: use letters, digits, '.', '_', '-' (or give a path to a .json file)"
        )
    return _resolve_name(spec, dirs, must_exist, how="")


def _resolve_name(name: str, dirs: list[Path], must_exist: bool, how: str) -> Path:
    for d in dirs:
        p = d / f"{name}.json"
        if p.is_file():
            return p
    if not must_exist and dirs:
        return dirs[0] / f"{name}.json"
    avail = available_baselines(dirs)
    where = ", ".join(str(d) for d in dirs) or "(no directories configured)"
    listed = ", ".join(avail) if avail else "none"
    origin = f" ({how})" if how else ""
    raise BaselineNotFound(
        f"no baseline named {name!r}{origin} in {where}; available baselines: {listed}"
    )

"""Which baseline file a name means: the baseline name of a device model (``"NVIDIA H200"`` -> ``h200``), the
baselines of the search folders, and a ``--gpu-baseline`` value (NAME, PATH or ``auto``) resolved to a file.

A NAME (and ``auto``) is looked up in the user's folders first (``--gpu-baseline-dir``, else
``<rootdir>/baselines``: :func:`default_baseline_dir`), then among the baselines shipped with the package
(``gate.shipped.shipped_folder``, ``pytest_gpucomm.baselines``); :func:`locate_baseline` says which was taken.
A save never writes into the installed package: saving to a NAME found only among the shipped files creates
the user's own ``<folder>/NAME.json``, and a PATH inside the package is refused."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from .schema import BaselineError
from .shipped import SHIPPED, in_installed_package

__all__ = ["BaselineNotFound", "Located", "baseline_name_for_model", "available_baselines", "resolve_baseline",
           "locate_baseline"]


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


@dataclass(frozen=True)
class Located:
    """Which file a ``--gpu-baseline`` value means, and where it was found: ``origin`` is "path" (given as a
    path), "folder" (a user's folder), "shipped" (among the files shipped with the package) or "new" (no file
    yet: a save creates it in the user's folder; ``shipped`` is then the shipped file of that name, which the
    new one does not copy); ``auto`` says how ``auto`` named it ("NVIDIA H200 -> h200")."""

    path: Path
    origin: str
    auto: str = ""
    shipped: Optional[Path] = None
    folders: tuple[Path, ...] = ()

    def header_line(self, floors: int = 0) -> str:
        """The header's line on where the file came from ("" where the path says it all); ``floors``: the
        published floors a new file starts with, taken from the shipped file of its name."""
        how = f"auto ({self.auto}): " if self.auto else ""
        mine = " or ".join(str(d) for d in self.folders) or "your baseline folder"
        if self.origin == "shipped":
            return f"gpucomm baseline file: {how}{self.path.stem}, {SHIPPED} (no {self.path.name} in {mine})"
        if self.origin == "new" and self.shipped is not None:
            theirs = f"{self.shipped.name} {SHIPPED}"
            start = (f"with the {floors} published floors of {theirs} and none of its runs (other machines')"
                     if floors else f"empty: the runs of {theirs} are other machines' and are not copied")
            return f"gpucomm baseline file: {how}{self.path}, your own, starts {start}"
        return f"gpucomm baseline file: {how}{self.path}" if how else ""


def resolve_baseline(spec: str, **where: Any) -> Path:
    """The file of a ``--gpu-baseline`` value: :func:`locate_baseline`'s ``path``, for the same arguments."""
    return locate_baseline(spec, **where).path


def locate_baseline(
    spec: str,
    *,
    search_dirs: Sequence[Path],
    detected_model: Optional[str],
    must_exist: bool = True,
    shipped_dir: Optional[Path] = None,
) -> Located:
    """Turn a ``--gpu-baseline`` value into a file, and say where it was found.

    * ``"auto"``: the name for ``detected_model`` (see :func:`baseline_name_for_model`), then as NAME.
    * a value with a path separator or ending in ``.json``: that file (it may not exist yet: saving).
    * NAME: the first ``<dir>/<NAME>.json`` in ``search_dirs`` (the user's folders), then in ``shipped_dir``
      (the baselines shipped with the package).  If there is none: with ``must_exist``
      :class:`BaselineNotFound` listing the available names; without it, ``<search_dirs[0]>/<NAME>.json``
      (where a first ``--gpu-baseline-save`` creates it).  Saving (``must_exist`` false) never takes a
      shipped file: a NAME only shipped is a new file of the user's, and a path inside the installed package
      is refused.
    """
    spec = (spec or "").strip()
    dirs = [Path(d) for d in search_dirs]
    shipped = Path(shipped_dir) if shipped_dir is not None else None
    if shipped is not None and any(_same(shipped, d) for d in dirs):
        shipped = None  # a checkout's own baselines/ as the user's folder: the maintainers record into it
    if not spec:
        raise BaselineError("empty baseline name: give a name (e.g. h200), a path to a .json file, or 'auto'")
    if spec == "auto":
        if not detected_model:
            raise BaselineError(
                "no GPU model was detected: this run measures the CPU variants, and auto "
                "names a GPU's baseline.  If this machine has GPUs, torch does not see them (--gpucomm-device=gpu "
                "makes that an error); give the baseline name or path explicitly"
            )
        name = baseline_name_for_model(detected_model)
        if name is None:
            raise BaselineError(
                f"the detected model {detected_model!r} is not one this plugin "
                f"knows a baseline name for; give the baseline name or path explicitly"
            )
        found = _resolve_name(name, dirs, shipped, must_exist, how=f"auto, from the detected model {detected_model!r}")
        return Located(found.path, found.origin, f"{detected_model} -> {name}", found.shipped, tuple(dirs))
    if os.sep in spec or "/" in spec or (os.altsep and os.altsep in spec) or spec.endswith(".json"):
        path = Path(spec).expanduser()
        if not must_exist and in_installed_package(path):
            raise BaselineError(f"{path} is inside the installed pytest-gpucomm package, which a save never "
                                f"writes into: save to a file of your own (a NAME goes to {_first(dirs)})")
        return Located(path, "path", folders=tuple(dirs))
    if not _NAME_RE.match(spec):
        raise BaselineError(
            f"invalid baseline name {spec!r}: use letters, digits, '.', '_', '-' (or give a path to a .json file)"
        )
    return _resolve_name(spec, dirs, shipped, must_exist, how="")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _first(dirs: list[Path]) -> str:
    return str(dirs[0]) if dirs else "the baseline folder"


def _resolve_name(name: str, dirs: list[Path], shipped: Optional[Path], must_exist: bool, how: str) -> Located:
    for d in dirs:
        p = d / f"{name}.json"
        if p.is_file():
            return Located(p, "folder", folders=tuple(dirs))
    theirs = shipped / f"{name}.json" if shipped is not None else None
    if theirs is not None and not theirs.is_file():
        theirs = None
    if not must_exist and dirs:
        if in_installed_package(dirs[0]):
            raise BaselineError(f"the baseline folder {dirs[0]} is inside the installed pytest-gpucomm package, "
                                "which a save never writes into: give a folder of your own (--gpu-baseline-dir)")
        return Located(dirs[0] / f"{name}.json", "new", shipped=theirs, folders=tuple(dirs))
    if theirs is not None and must_exist:
        return Located(theirs, "shipped", folders=tuple(dirs))
    avail = available_baselines(dirs)
    where = ", ".join(str(d) for d in dirs) or "(no directories configured)"
    listed = ", ".join(avail) if avail else "none"
    if shipped is not None:
        listed += f"; {SHIPPED}: {', '.join(available_baselines([shipped])) or 'none'}"
    origin = f" ({how})" if how else ""
    record = (f"; record one for this machine: add --gpu-baseline-save to this command and run it 4 times or more, "
              f"on 2 boots or days or more (each is a session of the baseline); the runs go to "
              f"{_first(dirs)}/{name}.json, which auto takes from then on" if how.startswith("auto") else "")
    raise BaselineNotFound(
        f"no baseline named {name!r}{origin} in {where}; available baselines: {listed}{record}"
    )

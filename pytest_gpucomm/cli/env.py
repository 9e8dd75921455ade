"""``gpucomm env [--baseline B] [--json]``: this machine's fingerprint, and what changed since a baseline was
recorded, outside a pytest run.

The fingerprint is ``hardware.detect``/``hardware.fingerprint``'s (on a machine with no GPU, the CPU one), as
``key: value`` lines or ``--json``; with a baseline, what changed since its newest run was recorded, as the
plugin's header says it (volatile keys and the host name ignored: another host of the same kind is not a
change).  B is a baseline name or path, as ``gpucomm baselines`` takes them (:mod:`.baselines`), or a saved
report (``saved.load_reference``).

Exit codes: 0 done; 2 bad input -- an invalid ``--device``, no GPU where ``gpu`` was asked for, a baseline that
cannot be read -- as one ``gpucomm: error: ...`` line on stderr.

Imports: building the parser imports nothing beyond argparse; running it imports torch (hardware detection).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, TextIO

from ..text import command_width
from ..units import plural
from .baseline_files import bad_input_types, baseline_dir, common_options, error, print_lines

if TYPE_CHECKING:
    from .common import Subcommands

__all__ = ["add_parser", "add_env_parser", "run_env"]


def add_parser(sub: "Subcommands") -> None:
    """The ``gpucomm`` command's hook: add ``env`` to its subcommands."""
    add_env_parser(sub)


def add_env_parser(subparsers: "Subcommands") -> None:
    """Add ``env`` to an argparse ``add_subparsers()`` object."""
    p = subparsers.add_parser("env", parents=[common_options()], help="This machine's fingerprint, and what changed "
                              "since a baseline was recorded.")
    p.add_argument("--baseline", metavar="B", default=None,
                   help="A baseline name or path (or a saved report): print the difference from its newest run.")
    p.add_argument("--device", metavar="auto|gpu|cpu", default=None,
                   help="Which devices' fingerprint, as the plugin's --gpucomm-device. Default: GPUCOMM_DEVICE, "
                        "else auto.")
    p.add_argument("--json", action="store_true", help="Print JSON instead of key: value lines.")
    p.set_defaults(func=run_env)


def _flat(obj: object, prefix: str = "") -> Iterable[tuple[str, object]]:
    """``(dotted.key, value)`` for each leaf of a fingerprint; an empty object or list is one leaf, ``(none)``."""
    if isinstance(obj, Mapping):
        if not obj and prefix:
            yield prefix, "(none)"
        for k, v in obj.items():
            yield from _flat(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        if not obj:
            yield prefix, "(none)"
        for i, v in enumerate(obj):
            yield from _flat(v, f"{prefix}.{i}")
    else:
        yield prefix, obj


def run_env(args: argparse.Namespace, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    """Run ``gpucomm env``: this machine's fingerprint, and with ``--baseline`` what changed since the
    baseline's newest run; returns the exit code (0 done, 2 bad input)."""
    from ..env.fingerprint import VOLATILE_KEYS, diff_fingerprints, format_fingerprint_diff, latest_of_source
    from ..env.hardware import detect, fingerprint

    out = out or sys.stdout
    err = err or sys.stderr
    device, where = getattr(args, "device", None), "--device"
    if device is None:
        device, where = os.environ.get("GPUCOMM_DEVICE") or "auto", "the GPUCOMM_DEVICE environment variable"
    if device not in ("auto", "gpu", "cpu"):
        return error(err, f"invalid device {device!r} (from {where}): expected auto, gpu or cpu")
    try:
        info = detect(device)
    except RuntimeError as e:  # gpu asked for, none seen
        return error(err, str(e))
    fp = fingerprint(info)
    result: Optional[dict[str, Any]] = None
    if getattr(args, "baseline", None):
        from ..report.saved import load_reference

        try:
            from ..gate.shipped import shipped_folder

            dirs = [baseline_dir(args)] + [d for d in [shipped_folder("baselines")] if d is not None]
            ref = load_reference(args.baseline, search_dirs=dirs, detected_model=info.model)
        except bad_input_types() as e:
            return error(err, f"--baseline {args.baseline}: {e}")
        runs = ref.doc["runs"]
        if not runs:
            result = {"name": ref.name, "path": str(ref.path), "run_id": None, "date": None, "same": None,
                      "changes": [], "text": f"{ref.describe()} has no measured run: no fingerprint to compare with"}
        else:
            # as the plugin's header (Gate.load): the newest run of ours (not another tool's file recorded into
            # the same baseline), and another host of the same kind is not an environment change
            last = runs[latest_of_source([r.get("fingerprint") or {} for r in runs], fp) or 0]
            diff = diff_fingerprints(last.get("fingerprint") or {}, fp, ignore=VOLATILE_KEYS | {"host"})
            recorded = f"{ref.describe()} was recorded (run {last['run_id']}, {last['date']})"
            said = (f"environment changed since {recorded}: {plural(len(diff), 'change')}\n"
                    + "\n".join(f"  {format_fingerprint_diff([d])}" for d in diff) if diff
                    else f"environment: same as when {recorded}")
            result = {"name": ref.name, "path": str(ref.path), "run_id": last["run_id"], "date": last["date"],
                      "same": not diff, "text": said,
                      "changes": [{"key": k, "baseline": None if _absent(o) else o, "now": None if _absent(n) else n}
                                  for k, o, n in diff]}
    if getattr(args, "json", False):
        print(json.dumps({"fingerprint": fp, "baseline": result}, indent=2, default=str), file=out)
        return 0
    lines = [f"this machine: {info.headline()}"] + [f"{k}: {v}" for k, v in _flat(fp)]
    if result is not None:
        lines += ["", result["text"]]
    print_lines(out, lines, command_width())
    return 0


def _absent(v: object) -> bool:
    from ..env.fingerprint import ABSENT

    return v is ABSENT

"""What ``gpucomm baselines`` and ``gpucomm env`` share (:mod:`.baselines`, :mod:`.baselines_prune`,
:mod:`.baselines_merge`, :mod:`.env`): their common options, the baseline directory (``--baseline-dir``,
``GPUCOMM_BASELINE_DIR``, ``./baselines``), a NAME resolved in it, a file read as a baseline (a saved report
refused as such), the lock timeout, ISO dates, a file's run groups and sessions, and how an error is printed.
Their bad input is a :class:`KeepError` that names the value and the file."""

from __future__ import annotations

import argparse
import datetime as _dt
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, TextIO

from ..text import fit
from ..vocab import DEFAULT_BASELINE_DIR

__all__ = ["BASELINE_DIR_ENV", "KeepError", "common_options", "error", "bad_input_types", "print_lines",
           "baseline_dir", "baseline_dir_source", "resolve", "read_baseline", "lock_timeout", "parse_date",
           "run_groups", "sessions"]

#: the environment variable of the plugin's ``--gpu-baseline-dir`` (settings.py), read here the same way
BASELINE_DIR_ENV = "GPUCOMM_BASELINE_DIR"


class KeepError(ValueError):
    """Bad input to a ``baselines``/``env`` command; the message names the value and the file."""


def common_options(lock: bool = False, dry_run: bool = False) -> argparse.ArgumentParser:
    """The options every ``baselines`` action and ``env`` take (a parent parser), with ``--lock-timeout`` for
    the actions that write and ``--dry-run``/``-v`` for those that change a file."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--baseline-dir", metavar="DIR", default=None,
                   help=f"Where baseline NAMEs are looked up. Default: ${BASELINE_DIR_ENV}, else "
                        f"./{DEFAULT_BASELINE_DIR}.")
    if dry_run:
        p.add_argument("--dry-run", action="store_true", help="Print what would change; write nothing.")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="Name every case whose runs change (by default only the counts, and the cases removed).")
    if lock:  # the default is the store's, read when the command runs (building the parser imports no store)
        p.add_argument("--lock-timeout", metavar="SECONDS", default=None,
                       help="How long to wait for the file's lock while a save is in progress. Default: as long "
                            "as the plugin's save waits (gate.store.LOCK_TIMEOUT_S).")
    return p


def error(err: TextIO, message: str) -> int:
    """Print ``gpucomm: error: <message>`` to ``err``; the exit code of bad input (2)."""
    print(f"gpucomm: error: {message}", file=err)
    return 2


def bad_input_types() -> tuple[type[Exception], ...]:
    """The errors of a file or value the user gave: printed as such, exit 2."""
    from ..gate.schema import BaselineError
    from ..report.saved import ReportError

    return (KeepError, BaselineError, ReportError)


def print_lines(out: TextIO, lines: Iterable[str], width: Optional[int] = None) -> None:
    """``lines`` printed to ``out``, each wrapped to ``width`` where given (prose); a table's lines without it
    (``fit_table`` laid them out already: a wrap would break its columns)."""
    for line in fit(lines, width) if width is not None else lines:
        print(line, file=out)


def baseline_dir(args: argparse.Namespace) -> Path:
    """``--baseline-dir``, else ``$GPUCOMM_BASELINE_DIR``, else ``./baselines``."""
    given = getattr(args, "baseline_dir", None)
    return Path(given or os.environ.get(BASELINE_DIR_ENV, "").strip() or DEFAULT_BASELINE_DIR).expanduser()


def baseline_dir_source(args: argparse.Namespace) -> str:
    """Where the baseline directory came from, for messages."""
    if getattr(args, "baseline_dir", None):
        return "given by --baseline-dir"
    if os.environ.get(BASELINE_DIR_ENV, "").strip():
        return f"given by ${BASELINE_DIR_ENV}"
    return f"the default, ./{DEFAULT_BASELINE_DIR}"


def resolve(spec: str, args: argparse.Namespace, *, must_exist: bool = True, writes: bool = False) -> Path:
    """The file a NAME, PATH or ``auto`` means: a NAME in the baseline directory, then among the shipped
    baselines, unless the command ``writes`` the file (a shipped file is never written: KeepError)."""
    from ..gate.names import BaselineNotFound, locate_baseline
    from ..gate.shipped import in_installed_package, shipped_folder

    model = None
    if (spec or "").strip() == "auto":
        from ..env.hardware import detect

        model = detect().model
    try:
        found = locate_baseline(spec, search_dirs=[baseline_dir(args)], detected_model=model, must_exist=must_exist,
                                shipped_dir=shipped_folder("baselines"))
    except BaselineNotFound as e:
        raise BaselineNotFound(f"{e} (the baseline directory: {baseline_dir_source(args)})") from None
    if writes and (found.origin == "shipped" or in_installed_package(found.path)):
        raise KeepError(f"{spec}: {found.path} is a baseline shipped with pytest-gpucomm, inside the installed "
                        f"package, which is never written: keep your own in {baseline_dir(args)} "
                        f"({baseline_dir_source(args)})")
    return found.path


def read_baseline(path: Path) -> dict[str, Any]:
    """The checked document of a baseline file (``gate.store``'s reader and errors); a saved report is refused
    as such (KeepError), not as a file with no ``schema``."""
    from ..gate.schema import BaselineError
    from ..gate.store import read_document

    try:
        return read_document(path)
    except BaselineError:
        if _is_report(path):
            raise KeepError(f"{path}: is a pytest-gpucomm report (--gpucomm-json), not a baseline file: "
                            "'gpucomm baselines' keeps baseline files (a report is compared with one by "
                            "'gpucomm compare')") from None
        raise


def _is_report(path: Path) -> bool:
    from ..report.saved import REPORT_FORMAT, ReportError, read_json

    try:
        doc = read_json(path, "report")
    except ReportError:
        return False
    return isinstance(doc, Mapping) and doc.get("format") == REPORT_FORMAT


def lock_timeout(args: argparse.Namespace) -> float:
    """``--lock-timeout`` in seconds (> 0), else the plugin's (``gate.store.LOCK_TIMEOUT_S``)."""
    from ..gate.store import LOCK_TIMEOUT_S

    value = getattr(args, "lock_timeout", None)
    if value is None:
        return LOCK_TIMEOUT_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise KeepError(f"--lock-timeout {value!r}: not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise KeepError(f"--lock-timeout {value!r}: must be a finite number of seconds > 0")
    return seconds


def parse_date(value: str, where: str) -> _dt.datetime:
    """An ISO date or date-time (``2026-12-01``, ``2026-12-01T10:00:00+00:00``, a ``Z`` suffix too); UTC when it
    names no zone.  KeepError naming ``where`` otherwise."""
    text = str(value).strip()
    try:
        when = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise KeepError(f"{where} {value!r}: not an ISO date (2026-12-01, or 2026-12-01T10:00:00 with an "
                        "optional +HH:MM)") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.timezone.utc)


def run_groups(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    from ..gate.store import run_group

    return list(dict.fromkeys(run_group(r["run_id"]) for r in runs))


def sessions(runs: Sequence[Mapping[str, object]]) -> int:
    return len({r.get("session") or r["run_id"] for r in runs})

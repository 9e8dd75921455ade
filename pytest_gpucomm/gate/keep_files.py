"""What the ``gpucomm baselines`` commands share (:mod:`.keep`, :mod:`.keep_prune`, :mod:`.keep_merge`): the
baseline directory (``--baseline-dir``, ``GPUCOMM_BASELINE_DIR``, ``./baselines``), a NAME resolved in it, a
file read as a baseline (a saved report refused as such), the lock timeout, ISO dates, and a file's run groups
and sessions.  Their bad input is a :class:`KeepError` that names the value and the file."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..vocab import DEFAULT_BASELINE_DIR

__all__ = ["BASELINE_DIR_ENV", "KeepError", "baseline_dir", "baseline_dir_source", "resolve", "read_baseline",
           "lock_timeout", "parse_date", "run_groups", "sessions"]

#: the environment variable of the plugin's ``--gpu-baseline-dir`` (settings.py), read here the same way
BASELINE_DIR_ENV = "GPUCOMM_BASELINE_DIR"


class KeepError(ValueError):
    """Bad input to a ``baselines``/``env`` command; the message names the value and the file."""


def baseline_dir(args: Any) -> Path:
    """``--baseline-dir``, else ``$GPUCOMM_BASELINE_DIR``, else ``./baselines``."""
    given = getattr(args, "baseline_dir", None)
    return Path(given or os.environ.get(BASELINE_DIR_ENV, "").strip() or DEFAULT_BASELINE_DIR).expanduser()


def baseline_dir_source(args: Any) -> str:
    """Where the baseline directory came from, for messages."""
    if getattr(args, "baseline_dir", None):
        return "given by --baseline-dir"
    if os.environ.get(BASELINE_DIR_ENV, "").strip():
        return f"given by ${BASELINE_DIR_ENV}"
    return f"the default, ./{DEFAULT_BASELINE_DIR}"


def resolve(spec: str, args: Any, *, must_exist: bool = True, writes: bool = False) -> Path:
    """The file a NAME, PATH or ``auto`` means: a NAME in the baseline directory, then among the shipped
    baselines, unless the command ``writes`` the file (a shipped file is never written: KeepError)."""
    from .names import BaselineNotFound, locate_baseline
    from .shipped import in_installed_package, shipped_folder

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
    from .schema import BaselineError
    from .store import read_document

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


def lock_timeout(args: Any) -> float:
    """``--lock-timeout`` in seconds (> 0), else the plugin's (``gate.store.LOCK_TIMEOUT_S``)."""
    from .store import LOCK_TIMEOUT_S

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
    from .store import run_group

    return list(dict.fromkeys(run_group(r["run_id"]) for r in runs))


def sessions(runs: Sequence[Mapping[str, Any]]) -> int:
    return len({r.get("session") or r["run_id"] for r in runs})

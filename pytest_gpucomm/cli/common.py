"""What the ``gpucomm`` subcommands share: the error that exits 2, reading a saved report into its document
and what it is compared with, the baseline folder, the checks of an output path (:func:`checked_output`:
never one of the command's inputs, an existing file only with ``--force``), and the sections ``show`` and
``compare`` both print."""

from __future__ import annotations

import argparse
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from ..vocab import DEFAULT_BASELINE_DIR

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from ..report.document import ReportDocument
    from ..report.saved import Reference

    #: what ``add_subparsers()`` returns: each subcommand's module adds its parser to it
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["CommandError", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "Input", "report_parser", "add_baseline_dir",
           "baseline_dirs", "load_document", "add_nvbandwidth_size", "nvbandwidth_size", "report_words",
           "row_source", "load_report_and_baseline", "load_reference", "hardware_line",
           "matrix_lines", "add_force", "Output", "same_file", "not_an_input",
           "checked_output", "inputs_of", "OUTPUT_OPTIONS", "error_text", "ENV_TEXTS", "check_environment"]

#: one of a command's input files, for the checks of an output path: what it is (for messages), its path
Input = tuple[str, "str | os.PathLike[str]"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """Bad input: printed as ``gpucomm: error: <message>``, exit status 2."""


def report_parser(sub: "Subcommands", name: str, help: str, baseline_help: str,
                  report_help: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of a subcommand that reads one report (REPORT) and may take a baseline (``--baseline B``);
    the caller adds its own options, then :func:`add_baseline_dir`."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("report", metavar="REPORT", help=report_help)
    p.add_argument("--baseline", metavar="B", help=baseline_help)
    add_nvbandwidth_size(p)
    return p


def add_baseline_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline-dir", metavar="DIR",
                   help="where baseline NAMEs are looked up, before the baselines shipped with pytest-gpucomm "
                        "(default: $GPUCOMM_BASELINE_DIR, else ./baselines)")


#: the environment variables the commands read (``--baseline-dir``'s default; ``gpucomm env``'s device)
ENV_TEXTS = ("GPUCOMM_BASELINE_DIR", "GPUCOMM_DEVICE")


def check_environment() -> None:
    """The variables of :data:`ENV_TEXTS` that are set: an empty one is an error (``checks.not_empty``: the
    rule of every option and variable of pytest-gpucomm), a CheckError that ends the command with exit 2."""
    from ..checks import env_text

    for name in ENV_TEXTS:
        env_text(name)


def baseline_dirs(args: argparse.Namespace) -> list[Path]:
    """The folders a baseline NAME is looked up in: the user's, then the shipped baselines' (as the plugin's)."""
    from ..gate.shipped import shipped_folder

    d = getattr(args, "baseline_dir", None) or os.environ.get("GPUCOMM_BASELINE_DIR") or DEFAULT_BASELINE_DIR
    shipped = shipped_folder("baselines")
    return [Path(d)] + ([shipped] if shipped is not None else [])


def load_document(path: str, args: Optional[argparse.Namespace] = None) -> "ReportDocument":
    """The saved report ``path`` as its document (``ReportDocument.load``; a file of nccl-tests or nvbandwidth
    as its report, nvbandwidth's buffers of ``--nvbandwidth-size`` where the command has it)."""
    from ..report.document import ReportDocument

    return ReportDocument.load(path, nvbandwidth_size(args))


def add_nvbandwidth_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nvbandwidth-size", metavar="SIZE",
                   help="the buffer size of an nvbandwidth file (its -b; its JSON does not say it). Default: "
                        "nvbandwidth's own, 512MiB")


def nvbandwidth_size(args: Optional[argparse.Namespace]) -> Optional[int]:
    """``--nvbandwidth-size`` in bytes (None where not given); CommandError naming a bad value."""
    from ..units import parse_size

    given = getattr(args, "nvbandwidth_size", None) if args is not None else None
    if given is None:
        return None
    try:
        size = parse_size(given, "--nvbandwidth-size")
    except ValueError as e:
        raise CommandError(str(e)) from None
    if size <= 0:
        raise CommandError(f"--nvbandwidth-size {given!r}: a buffer size is positive")
    return size


def report_words(doc: "ReportDocument", path: str) -> str:
    """What the file ``path`` read as ``doc`` is, for a header: ``the report PATH``, or for a file of another tool
    ``the nccl-tests file PATH (nccl-tests JSON format 3; nccl-tests summary: one figure per case, judged with
    the baseline's run spread)`` (``foreign.describe_foreign``)."""
    from ..foreign import FOREIGN_KEY, describe_foreign

    foreign = doc.extra.get(FOREIGN_KEY)
    return describe_foreign(foreign, path) if isinstance(foreign, Mapping) else f"the report {path}"


def row_source(info: Mapping[str, object]) -> str:
    """`` (nccl-tests JSON format 3)`` for a row of another tool's file (its info's source and version), else ""."""
    return f" ({info['source']} {info.get('source_version', '')})".replace(" )", ")") if info.get("source") else ""


def load_report_and_baseline(args: argparse.Namespace) -> tuple["ReportDocument", Optional["Reference"]]:
    """The document of ``args.report`` and, with ``--baseline``, what it names (:func:`load_reference`)."""
    doc = load_document(args.report, args)
    return doc, load_reference(args.baseline, args, doc) if args.baseline else None


def load_reference(spec: str, args: argparse.Namespace, doc: Optional["ReportDocument"] = None) -> "Reference":
    """What ``spec`` names (a baseline NAME, ``auto``, a baseline file or another report:
    ``saved.load_reference``), ``auto`` taken for the hardware of ``doc``."""
    from ..report.saved import load_reference as load

    model = (doc.fingerprint or {}).get("model") if doc is not None and spec.strip() == "auto" else None
    return load(spec, search_dirs=baseline_dirs(args), detected_model=model, nvbandwidth_size=nvbandwidth_size(args))


# -- outputs -------------------------------------------------------------------------------------------


def add_force(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--force", action="store_true",
                   help=f"replace {what} that exists already (never a file the command reads)")


@dataclass(frozen=True)
class Output:
    """An output file the command may write (:func:`checked_output`): ``replace`` is ``--force`` (an existing
    file is replaced only then, and one made by another process while the command ran is not replaced
    without it: ``write_atomic(..., replace=False)``); ``existed``: it is there now, and will be replaced."""

    path: Path
    replace: bool
    existed: bool

    def wrote(self) -> str:
        """What the command says after writing it: ``out.html`` or ``out.html (replaced the file that was
        there: --force)``."""
        return f"{self.path}" + (" (replaced the file that was there: --force)" if self.existed else "")


def same_file(a: "str | os.PathLike[str]", b: "str | os.PathLike[str]") -> bool:
    """Whether two paths name one file: the same path once resolved (``./x``, ``d/../x``, a symlink), or the
    same file on disk (a hard link: ``os.path.samefile``)."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
    except (OSError, RuntimeError):  # a symlink loop
        pass
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (or cannot be looked at): not the other
        return False


def not_an_input(path: "str | os.PathLike[str]", option: str,
                 inputs: Sequence[Input]) -> None:
    """CommandError where ``path`` is one of the command's ``inputs`` ((what, path) pairs), naming both: a
    command never writes onto what it reads, not even with ``--force``."""
    for what, given in inputs:
        if same_file(path, given):
            raise CommandError(f"{option} {path}: is {what} ({given}), which this command reads: a command never "
                               "writes onto its own input, not even with --force; write to another file")


def checked_output(given: str, option: str, inputs: Sequence[Input],
                   force: bool) -> Output:
    """The file ``given`` (the value of ``option``) as an :class:`Output`, or CommandError (exit 2) where it is
    one of ``inputs`` (:func:`not_an_input`), a folder or another non-regular file, or an existing file and
    ``force`` is not given.  Checked before the command does its work; the write itself then refuses a file
    that appeared meanwhile (``Output.replace``)."""
    not_an_input(given, option, inputs)
    path = Path(given)
    if not os.path.lexists(path):
        return Output(path, replace=force, existed=False)
    try:
        mode = os.stat(path).st_mode
    except OSError:  # a dangling symlink: the write replaces the link, not what it named
        mode = stat.S_IFREG
    if stat.S_ISDIR(mode):
        raise CommandError(f"{option} {given}: is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise CommandError(f"{option} {given}: is not a regular file (a FIFO, socket or device): not replaced")
    if not force:
        raise CommandError(f"{option} {given}: the file exists: give --force to replace it, or write to another file")
    return Output(path, replace=True, existed=True)


#: the options that name what a command writes (``args`` dest -> the option as the user typed it)
OUTPUT_OPTIONS = {"output": "-o", "json": "--json"}


def error_text(e: Exception, args: argparse.Namespace) -> str:
    """The message of an error a command ended with, after ``gpucomm: error:``: an OSError of a file the
    command writes names the option and the path the user gave (``-o ro/p.html: cannot write: Read-only file
    system``; a file written into the folder ``-o DIR`` names the folder, then the file), any other OSError
    its file and reason, anything else its own message."""
    if not isinstance(e, OSError) or not e.filename:
        return str(e)
    reason = e.strerror or str(e)
    written = Path(str(e.filename))
    for dest, option in OUTPUT_OPTIONS.items():
        given = getattr(args, dest, None)
        if not isinstance(given, str) or not given:
            continue
        if written == Path(given):
            return f"{option} {given}: cannot write: {reason}"
        if written.parent == Path(given):
            return f"{option} {given}: cannot write {written.name}: {reason}"
    return f"{e.filename}: {reason}"


def inputs_of(args: argparse.Namespace, ref: Optional["Reference"]) -> list[Input]:
    """The files a command that read ``args.report`` and ``ref`` reads, as :func:`not_an_input` takes them."""
    found: list[Input] = [("the report", args.report)]
    if ref is not None:
        found.append(("the baseline" if ref.kind == "baseline" else "the report taken as the baseline", ref.path))
    return found


def hardware_line(doc: "ReportDocument") -> str:
    from ..report.plots import context_line

    return "hardware: " + context_line(doc)


def matrix_lines(doc: "ReportDocument", baseline: Optional["BaselineFigures"],
                 sizes: Optional[Sequence[str]] = None, width: int = 120) -> list[str]:
    """Every copy matrix of the document (``terminal.matrix_section``, fitted to ``width``), against
    ``baseline`` when given, else against the figures the run's verdicts were judged against; at ``sizes``
    (``--matrix-size``) when given."""
    from ..report.terminal import matrix_section
    from ..units import format_size, parse_size

    asked = None
    if sizes:
        try:
            asked = [parse_size(v, "--matrix-size") for v in sizes]
        except ValueError as e:
            raise CommandError(str(e)) from None
    lines = matrix_section(doc, baseline, sizes=asked, width=width)
    if asked and not lines:
        measured = sorted({r.measurement.size_bytes for r in doc.rows if r.measurement.kind == "copy"})
        from ..text import fit

        at = ", ".join(format_size(s) for s in measured) or "no size"
        lines = fit([f"gpucomm copy matrices: none at {', '.join(format_size(s) for s in asked)} (--matrix-size); "
                     f"the report's copies were measured at {at}"], width)
    return lines

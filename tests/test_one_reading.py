"""Issue 49: one reader, one answer.  A saved report is checked in one place (``report.saved``), so that
every ``gpucomm`` command refuses a report alike; a file compared with is refused by its size before it is
read; a failed write names the path the user gave, not the temporary file beside it."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_gpucomm import cli

FORMATS = Path(__file__).resolve().parent / "data" / "formats"


def gpucomm(*argv: object) -> int:
    return cli.main([str(a) for a in argv], out=io.StringIO())


def _with_status(tmp_path: Path, where: str) -> Path:
    doc = json.loads((FORMATS / "report_2.json").read_text())
    row = doc["rows"][1]
    if where == "row":
        row["status"] = "noisy"
    else:
        row["baseline"]["status"] = "noisy"
    p = tmp_path / "noisy.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("where, at", [("row", "$.rows[1].status"), ("verdict", "$.rows[1].baseline.status")])
def test_a_version_2_report_holding_an_unknown_status_is_refused_by_every_command_alike(tmp_path, capsys, where, at):
    """Before: ``show`` refused it (``unknown status 'noisy'``), ``compare``, ``plot`` and ``html`` exited 0."""
    report = _with_status(tmp_path, where)
    test = "suites/test_collectives.py::test_collective[float32-1KiB-all_reduce-inplace]"
    expected = f"gpucomm: error: {report}: invalid report: at {at} ({test}): unknown status 'noisy'"
    baseline = FORMATS / "baseline_2.json"
    for argv in (["show", report], ["compare", baseline, report], ["plot", report, "-o", tmp_path / "plots"],
                 ["html", report, "-o", tmp_path / "page.html"], ["compare", report, FORMATS / "report_2.json"]):
        code = gpucomm(*argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert err.startswith(expected), (argv, err)
    assert not (tmp_path / "plots").exists() and not (tmp_path / "page.html").exists()


def test_a_version_1_report_saying_noisy_still_reads_as_not_gated(tmp_path, capsys):
    p = tmp_path / "old.json"
    shutil.copy(FORMATS / "report_1-noisy.json", p)
    assert gpucomm("show", p) == 0, capsys.readouterr().err


def _oversized(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that starts as a baseline does, the rest a hole (no disk used)."""
    with open(path, "wb") as f:
        f.write(b'{"schema": "pytest-gpucomm-baseline", "schema_version": 2, "cases": {"')
        f.truncate(size)
    return path


@pytest.mark.parametrize("command", ["compare", "show"])
def test_an_oversized_baseline_given_by_path_is_refused_by_its_size_before_it_is_read(tmp_path, capsys, command):
    """Before: a file given where a baseline or a report may be was read up to the report's limit (512 MiB) and
    parsed (a 300 MB baseline: 3.3 s, 1.7 GB), and only then refused by the baseline's limit."""
    import tracemalloc

    from pytest_gpucomm.gate.store import MAX_BASELINE_BYTES

    big = _oversized(tmp_path / "big.json", 300_000_000)
    report = tmp_path / "r.json"
    shutil.copy(FORMATS / "report_2.json", report)
    argv = ["compare", big, report] if command == "compare" else ["show", report, "--baseline", big]
    tracemalloc.start()
    try:
        code = gpucomm(*argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"gpucomm: error: {big}: is larger than 256 MiB (300000000 bytes), the most a baseline or "
                          "report file may hold (pytest_gpucomm.gate.store.MAX_BASELINE_BYTES)"), err
    assert MAX_BASELINE_BYTES == 256 * 1024 * 1024
    assert peak < 50_000_000, peak  # nothing of the file was read


def test_a_baseline_of_its_limit_is_read_and_one_byte_more_is_refused_by_the_store_and_the_commands_alike(
        tmp_path, capsys, monkeypatch):
    from pytest_gpucomm.gate import store
    from pytest_gpucomm.gate.schema import BaselineError

    src = FORMATS / "baseline_2.json"
    size = src.stat().st_size
    report = tmp_path / "r.json"
    shutil.copy(FORMATS / "report_2.json", report)
    base = tmp_path / "b.json"
    shutil.copy(src, base)
    monkeypatch.setattr(store, "MAX_BASELINE_BYTES", size)
    store.read_document(base)
    assert gpucomm("compare", base, report) in (0, 1), capsys.readouterr().err
    monkeypatch.setattr(store, "MAX_BASELINE_BYTES", size - 1)
    message = f"{base}: is larger than {size - 1} bytes ({size} bytes), the most a "
    with pytest.raises(BaselineError, match=re.escape(message + "baseline file may hold")):
        store.read_document(base)
    assert gpucomm("compare", base, report) == 2
    assert capsys.readouterr().err.startswith("gpucomm: error: " + message + "baseline or report file may hold")


def _read_only(monkeypatch, folder: Path) -> None:
    """Creating a file in ``folder`` fails as on a read-only file system (EROFS): this machine runs as root,
    where a folder's mode does not stop a write."""
    import errno
    import os

    from pytest_gpucomm.files import atomic

    real_open = os.open

    def open_(path, flags, *a, **kw):
        if Path(os.path.abspath(path)).parent == folder and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(atomic.os, "open", open_)


def test_a_write_that_fails_names_the_file_asked_for_not_the_temporary_file_beside_it(tmp_path, monkeypatch):
    """Before: ``ro/.p.html.co1budhe.tmp: Read-only file system``."""
    import errno
    import os

    from pytest_gpucomm.files import atomic

    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    with pytest.raises(OSError) as info:
        atomic.write_atomic(ro / "p.html", "x")
    assert (info.value.errno, info.value.strerror, info.value.filename) == (
        errno.EROFS, os.strerror(errno.EROFS), str(ro / "p.html"))
    monkeypatch.undo()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as os.fsync says it: no file named

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic.write_atomic(tmp_path / "q.json", "x")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(tmp_path / "q.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]  # the temporary file removed


def test_a_command_whose_output_cannot_be_written_names_the_option_and_the_path_the_user_gave(
        tmp_path, capsys, monkeypatch):
    report = FORMATS / "report_2.json"
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    monkeypatch.chdir(tmp_path)
    cases = [(["html", report, "-o", "ro/p.html"], "-o ro/p.html: cannot write: Read-only file system"),
             (["compare", FORMATS / "baseline_2.json", report, "--json", "ro/r.json"],
              "--json ro/r.json: cannot write: Read-only file system"),
             (["plot", report, "-o", "ro"],
              "-o ro: cannot write matrix-test_peer_copy-copy.png: Read-only file system")]
    for argv, message in cases:
        assert gpucomm(*argv) == 2
        err = capsys.readouterr().err
        assert err == f"gpucomm: error: {message}\n", (argv, err)
    assert list(ro.iterdir()) == []

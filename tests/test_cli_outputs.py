"""What the ``gpucomm`` command writes (pytest_gpucomm.cli, files.atomic): an existing output file is replaced
only with ``--force``, and the command says it replaced it; a command never writes onto one of its inputs, by
whatever spelling (``./x``, a symlink, a hard link), not even with ``--force``; ``plot -o DIR`` replaces only
the files it writes; ``compare --json`` keeps a row that failed its own threshold FAIL.

On two reports of one H200 shipped in benchmarks/data and the shipped (published) baseline mi300x.json, the
smallest there (these tests are about files, not verdicts), copied into each test's folder; no pytest run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_gpucomm import cli
from pytest_gpucomm.files.atomic import temp_file_pattern, write_atomic

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
SHIPPED = Path(__file__).resolve().parents[1] / "baselines"
REPORT, BEFORE = "h200_1gpu_boot1_run2_report.json", "h200_1gpu_boot1_run1_report.json"
FORCE = "give --force to replace it, or write to another file"
ONTO = "which this command reads: a command never writes onto its own input, not even with --force"
REPLACED = "(replaced the file that was there: --force)"


def gpucomm(*argv) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main([str(a) for a in argv], out=out)
    return code, out.getvalue()


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The folder the test runs in, holding the report, an earlier report of the same machine and the baseline
    ``mi300x`` (baselines/mi300x.json)."""
    shutil.copy(DATA / REPORT, tmp_path / "report.json")
    shutil.copy(DATA / BEFORE, tmp_path / "before.json")
    (tmp_path / "baselines").mkdir()
    shutil.copy(SHIPPED / "mi300x.json", tmp_path / "baselines" / "mi300x.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUCOMM_BASELINE_DIR", raising=False)
    return tmp_path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- an existing file ------------------------------------------------------------------------------------

WRITERS = {
    "compare --json": ["compare", "mi300x", "report.json", "--no-curves", "--json"],
    "html -o": ["html", "report.json", "--no-plots", "-o"],
}


@pytest.mark.parametrize("command", WRITERS)
def test_an_existing_output_file_is_replaced_only_with_force_and_the_command_says_so(files, capsys, command):
    (files / "out").write_text("keep me")
    before = _snapshot(files)
    code, text = gpucomm(*WRITERS[command], "out")
    err = capsys.readouterr().err
    option = WRITERS[command][-1]
    assert (code, text) == (2, "") and err == f"gpucomm: error: {option} out: the file exists: {FORCE}\n"
    assert _snapshot(files) == before  # nothing written, no temporary file left
    code, text = gpucomm(*WRITERS[command], "out", "--force")
    assert code == 0, capsys.readouterr().err
    assert f"wrote {'the verdicts to ' if option == '--json' else ''}out {REPLACED}" in text
    assert (files / "out").read_text(encoding="utf-8") != "keep me"
    # a new file needs no --force, and the command does not say it replaced anything
    code, text = gpucomm(*WRITERS[command], "new")
    assert code == 0 and (files / "new").exists() and "replaced" not in text


@pytest.mark.parametrize("command", WRITERS)
def test_a_folder_or_a_fifo_given_as_the_output_file_is_refused_even_with_force(files, capsys, command):
    (files / "dir").mkdir()
    os.mkfifo(files / "fifo")
    option = WRITERS[command][-1]
    assert gpucomm(*WRITERS[command], "dir", "--force")[0] == 2
    assert capsys.readouterr().err == f"gpucomm: error: {option} dir: is a folder, not a file\n"
    assert gpucomm(*WRITERS[command], "fifo", "--force")[0] == 2
    assert "fifo: is not a regular file (a FIFO, socket or device): not replaced" in capsys.readouterr().err
    assert (files / "fifo").is_fifo() and list((files / "dir").iterdir()) == []


# -- its own input ---------------------------------------------------------------------------------------


def _spell(files: Path, name: str, how: str) -> str:
    """Another name of ``name``: itself, ``./name``, a path through a folder, a symlink, a hard link."""
    if how == "itself":
        return name
    if how == "dot":
        return f"./{name}"
    if how == "through":
        return f"baselines/../{name}"
    link = files / f"{how}-{Path(name).name}"
    (os.symlink if how == "symlink" else os.link)(files / name, link)
    return link.name


ONTO_INPUT = [
    # (the command, the option, the input it would overwrite, what the message calls it)
    (["compare", "mi300x", "report.json", "--no-curves", "--json"], "--json", "report.json", "the report"),
    (["compare", "mi300x", "report.json", "--no-curves", "--json"], "--json", "baselines/mi300x.json", "the baseline"),
    (["compare", "before.json", "report.json", "--no-curves", "--json"], "--json", "before.json",
     "the report taken as the baseline"),
    (["html", "report.json", "--no-plots", "-o"], "-o", "report.json", "the report"),
    (["html", "report.json", "--baseline", "mi300x", "--no-plots", "-o"], "-o", "baselines/mi300x.json",
     "the baseline"),
]


@pytest.mark.parametrize("how", ["itself", "dot", "through", "symlink", "hardlink"])
@pytest.mark.parametrize("argv, option, target, what", ONTO_INPUT,
                         ids=["compare-report", "compare-baseline", "compare-other-report", "html-report",
                              "html-baseline"])
def test_a_command_never_writes_onto_its_own_input_by_any_name_even_with_force(files, capsys, argv, option, target,
                                                                               what, how):
    """compare --json onto the report it read replaced the run's verdicts with its own."""
    given = _spell(files, target, how)
    before = _snapshot(files)
    code, text = gpucomm(*argv, given, "--force")
    err = capsys.readouterr().err
    assert (code, text) == (2, ""), err
    assert err.startswith(f"gpucomm: error: {option} {given}: is {what} (") and ONTO in err, err
    named = err.split(f"is {what} (", 1)[1].split(")", 1)[0]
    assert Path(named).resolve() == (files / target).resolve()  # the input, as the command found it
    assert _snapshot(files) == before


def test_compare_never_writes_onto_the_baseline_of_the_same_hardware_it_may_borrow_spreads_from(files, capsys):
    """A report taken as the baseline has one session: the gate borrows its spreads from <model>.json in the
    baseline folder (baselines/h200.json for an H200), which compare then reads too."""
    shutil.copy(files / "baselines" / "mi300x.json", files / "baselines" / "h200.json")
    before = _snapshot(files)
    code, _ = gpucomm("compare", "before.json", "report.json", "--no-curves", "--json", "baselines/h200.json",
                      "--force")
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("gpucomm: error: --json baselines/h200.json: is the baseline of the report's "
                                        "hardware that the gate may borrow spreads from (baselines/h200.json), ")
    assert _snapshot(files) == before


def test_plot_never_writes_into_a_folder_that_is_its_input(files, capsys):
    pytest.importorskip("matplotlib")
    code, _ = gpucomm("plot", "report.json", "-o", "./report.json", "--force")
    assert code == 2 and f"-o ./report.json: is the report (report.json), {ONTO}" in capsys.readouterr().err
    code, _ = gpucomm("plot", "report.json", "-o", "before.json")
    assert code == 2 and capsys.readouterr().err == "gpucomm: error: -o before.json: is a file, not a folder\n"


# -- plot -o DIR -----------------------------------------------------------------------------------------


def test_plot_replaces_the_files_it_writes_only_with_force_and_leaves_every_other_file_alone(files, capsys):
    pytest.importorskip("matplotlib")
    (files / "figs").mkdir()  # a folder that exists and holds none of its files: no --force needed
    code, text = gpucomm("plot", "report.json", "-o", "figs")
    assert code == 0, capsys.readouterr().err
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("wrote "))  # after what it shows (cli.story)
    written = [Path(line.strip()).name for line in lines[at + 1:]]  # in the order written
    ours = sorted(p.name for p in (files / "figs").iterdir())
    assert sorted(written) == ours and len(ours) == 5 and "replaced" not in text and "also holds" not in text
    (files / "figs" / "notes.txt").write_text("mine")
    (files / "figs" / "old-run.png").write_bytes(b"an earlier run's plot")
    before = _snapshot(files)
    code, text = gpucomm("plot", "report.json", "-o", "figs")
    err = capsys.readouterr().err
    assert (code, text) == (2, "")
    assert err.startswith("gpucomm: error: -o figs: 5 of the 5 files this command writes exist already "
                          f"({written[0]}, ")
    assert "give --force to replace them (other files in the folder are left alone), or write to another folder" in err
    assert _snapshot(files) == before
    code, text = gpucomm("plot", "report.json", "-o", "figs", "--force")
    assert code == 0
    lines = [line for line in text.splitlines() if not line.startswith(("gpucomm plot: ", "    "))]
    assert lines[0] == "wrote 5 plots to figs; replaced 5 files that were there (--force)"
    assert lines[-1] == ("figs also holds 1 other .png files this command did not write (left as they were): "
                         "old-run.png")
    assert (files / "figs" / "notes.txt").read_text() == "mine"
    assert (files / "figs" / "old-run.png").read_bytes() == b"an earlier run's plot"
    assert sorted(p.name for p in (files / "figs").iterdir()) == sorted(ours + ["notes.txt", "old-run.png"])


# -- baselines merge -o C: in place into A or B by design, never over a third file -----------------------


def test_merge_refuses_a_third_file_by_any_name_and_merges_in_place_through_a_symlink_of_a(files, capsys):
    base = files / "baselines"
    for name in ("a", "b", "third"):
        shutil.copy(base / "mi300x.json", base / f"{name}.json")
    os.symlink(base / "third.json", base / "to-third.json")
    before = _snapshot(files)
    for name in ("third", "to-third", "./baselines/third.json"):
        code, _ = gpucomm("baselines", "merge", "a", "b", "-o", name)
        assert code == 2 and "exists and is neither A" in capsys.readouterr().err
    assert _snapshot(files) == before
    os.symlink(base / "a.json", base / "to-a.json")
    code, text = gpucomm("baselines", "merge", "a", "b", "-o", "to-a")
    assert code == 0 and "(in place)" in text, capsys.readouterr().err


# -- compare --json: the run's own threshold ---------------------------------------------------------------


def test_compare_json_keeps_a_row_that_failed_its_own_threshold_fail(files, capsys):
    """The gate's verdict of the row is the baseline's; the row's status stays the run's FAIL (it compared the
    stored word with "FAILED" where the word is "FAIL", so the row took the gate's status and passed)."""
    doc = json.loads((files / "report.json").read_text())
    doc["rows"][0]["status"] = "FAIL"
    doc["rows"][0]["checks"] = ["bandwidth >= 100 GB/s: FAIL (1.63 GB/s)"]
    (files / "report.json").write_text(json.dumps(doc))
    code, text = gpucomm("compare", "mi300x", "report.json", "--no-curves", "--json", "out.json")
    assert code in (0, 1), capsys.readouterr().err
    rows = json.loads((files / "out.json").read_text())["rows"]
    assert rows[0]["status"] == "FAIL" and rows[0]["baseline"]["status"] != "FAIL"
    assert rows[0]["checks"] == ["bandwidth >= 100 GB/s: FAIL (1.63 GB/s)"]
    assert all(r["status"] == r["baseline"]["status"] for r in rows[1:])


# -- the write itself ------------------------------------------------------------------------------------


def test_a_file_created_while_the_command_wrote_is_not_replaced(tmp_path, monkeypatch):
    """The check before the work and the write after it are two steps: write_atomic(replace=False) names the
    new file with a hard link, which fails where the name exists by then; without hard links, it checks."""
    target = tmp_path / "out.json"

    def theirs(tmp: Path) -> None:  # another process writes the file between the check and the rename
        target.write_text("theirs")

    for link in (os.link, None):
        target.unlink(missing_ok=True)
        if link is None:  # a file system without hard links
            monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(PermissionError(1, "no links")))
        with pytest.raises(FileExistsError, match="created while this was written; not replaced") as e:
            write_atomic(target, "mine", theirs, replace=False)
        assert e.value.filename == str(target) and target.read_text() == "theirs"
        assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
        target.unlink()
        write_atomic(target, b"\x89PNG bytes as they are", replace=False)
        assert target.read_bytes() == b"\x89PNG bytes as they are"
        assert not [p for p in tmp_path.iterdir() if temp_file_pattern(target).match(p.name)]


def test_a_reader_gone_away_is_not_an_error(files, capsys):
    """``gpucomm show ... | head``: BrokenPipeError is an OSError, and was reported as bad input (exit 2)."""

    class Gone(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    assert cli.main(["show", "report.json"], out=Gone()) == 0
    assert capsys.readouterr().err == ""

"""``gpucomm compare | show | html | baselines add`` on files of nccl-tests and nvbandwidth (pytest_gpucomm.foreign):
judged with our rule and messages, recorded as baseline runs, refused with exit 2 naming the file and the field."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpucomm import cli

DATA = Path(__file__).parent / "data" / "foreign"
NVB = DATA / "nvbandwidth-b1024.json"
BROADCAST = DATA / "nccl-tests-broadcast.json"
SENDRECV_ITER = DATA / "nccl-tests-sendrecv_iter.json"
ALL_REDUCE = DATA / "nccl-tests-all_reduce.json"
SUMMARY_WORDS = "nvbandwidth summary: one figure per case, judged with the baseline's run spread"


@pytest.fixture(autouse=True)
def _no_baseline_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUCOMM_BASELINE_DIR", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def gpucomm(*argv) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main([str(a) for a in argv], out=out)
    return code, out.getvalue()


def nvb_scaled(tmp_path: Path, name: str, factor: float, only: str = "") -> Path:
    """A copy of the nvbandwidth file with its figures (those of test ``only``, else all) times ``factor``."""
    doc = json.loads(NVB.read_text())
    for tc in doc["nvbandwidth"]["testcases"]:
        if not only or tc["name"] == only:
            tc["bandwidth_matrix"] = [[f"{float(v) * factor:g}" for v in row] for row in tc["bandwidth_matrix"]]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_compare_judges_a_slower_summary_figure_a_regression_naming_the_tool_and_its_version(tmp_path):
    base = tmp_path / "nvb-base.json"
    runs = [NVB, nvb_scaled(tmp_path, "a.json", 1.004), nvb_scaled(tmp_path, "b.json", 0.996)]
    assert gpucomm("baselines", "add", base, *runs)[0] == 0
    slow = nvb_scaled(tmp_path, "slow.json", 0.8, only="host_to_device_memcpy_ce")
    code, text = gpucomm("compare", base, slow)
    assert code == 1
    said = " ".join(text.split())  # the header is wrapped to the terminal's width
    assert f"a judgement made now of the nvbandwidth file {slow} (nvbandwidth v0.8; {SUMMARY_WORDS})" in said
    assert "FAILED nvbandwidth::host_to_device_memcpy_ce[512MiB-cuda:0] (nvbandwidth v0.8):" in text
    assert "FAILED nvbandwidth::device_to_host_memcpy_ce" not in text
    assert "h2d, host->cuda:0 (nvbandwidth v0.8: host_to_device_memcpy_ce[cuda:0])" in text  # each row's group


def test_a_one_figure_case_against_a_one_run_baseline_is_never_ok_by_default(tmp_path):
    """One summary figure against one recorded figure: the spread is not known, so no case passes as ok."""
    code, text = gpucomm("compare", NVB, nvb_scaled(tmp_path, "same.json", 1.0))
    assert code == 0
    assert "verdicts: 9 not gated" in text and " ok" not in text.split("gpucomm verdicts:")[0].split("status")[-1]


def test_compare_of_their_old_and_new_files_says_what_changed_in_their_nccl(tmp_path):
    doc = json.loads(BROADCAST.read_text())
    doc["nccl_version"] = 22901
    new = tmp_path / "broadcast-new.json"
    new.write_text(json.dumps(doc))
    code, text = gpucomm("compare", BROADCAST, new)
    assert code in (0, 1)
    assert "comm_library NCCL 2.28.9 -> NCCL 2.29.1" in " ".join(text.split())


def test_a_file_of_one_tool_is_compared_with_the_environment_of_that_tool_s_last_run_in_a_mixed_baseline(tmp_path):
    # seen on an H100: nvbandwidth's files recorded, then nccl-tests' into the same baseline; an nvbandwidth file
    # compared with it listed NCCL as gone and the driver as new (the diff took the nccl-tests run, the last one)
    base = tmp_path / "mixed.json"
    assert gpucomm("baselines", "add", base, NVB, nvb_scaled(tmp_path, "a.json", 1.002))[0] == 0
    assert gpucomm("baselines", "add", base, BROADCAST)[0] == 0
    today = nvb_scaled(tmp_path, "today.json", 1.0)
    said = " ".join(gpucomm("compare", base, today)[1].split())
    assert "gpucomm environment: same as when the baseline was recorded" in said
    assert "comm_library" not in said
    # the page of the same file drawn against that baseline diffs the same way
    assert gpucomm("html", today, "--baseline", base, "-o", tmp_path / "page.html", "--no-plots")[0] == 0
    assert "The environment changed since the baseline" not in (tmp_path / "page.html").read_text()
    # the other way round: nccl-tests recorded first, nvbandwidth last; an nccl-tests file is compared with its own
    other = tmp_path / "mixed2.json"
    assert gpucomm("baselines", "add", other, BROADCAST)[0] == 0
    assert gpucomm("baselines", "add", other, NVB)[0] == 0
    said = " ".join(gpucomm("compare", other, BROADCAST)[1].split())
    assert "gpucomm environment: same as when the baseline was recorded" in said


def test_baselines_add_records_each_file_as_one_run_with_its_date_session_and_fingerprint(tmp_path):
    base = tmp_path / "h100.json"
    code, text = gpucomm("baselines", "add", base, BROADCAST, SENDRECV_ITER)
    assert code == 0 and f"wrote {base} (2 runs added)" in text
    doc = json.loads(base.read_text())
    assert [r["date"] for r in doc["runs"]] == ["2026-12-07T03:28:02", "2026-12-07T03:28:09"]
    assert {r["session"] for r in doc["runs"]} == {"vm-nccl-tests-2026-12-07"}
    assert {r["fingerprint"]["comm_library"] for r in doc["runs"]} == {"NCCL 2.28.9"}
    assert all(c["test_id"].startswith("nccl-tests::") for c in doc["cases"].values())
    assert len(doc["cases"]) == 22 + 8
    assert gpucomm("baselines", "add", base, BROADCAST)[0] == 0  # the same file again replaces its run
    assert len(json.loads(base.read_text())["runs"]) == 2


def test_baselines_add_refuses_a_figure_of_zero_naming_the_case(tmp_path, capsys):
    """all_reduce on one rank has busbw 0 (2(n-1)/n): nothing a later run can be compared with."""
    assert gpucomm("baselines", "add", tmp_path / "c.json", BROADCAST, ALL_REDUCE)[0] == 2
    assert (f"{ALL_REDUCE}: nccl-tests::all_reduce_perf[float-sum-1KiB-out-of-place]: its figure is 0 GB/s (busbw "
            "of all_reduce on 1 rank)") in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_baselines_add_of_a_wrong_result_writes_nothing_and_names_the_file_and_field(tmp_path, capsys):
    doc = json.loads(BROADCAST.read_text())
    doc["results"][4]["in_place"]["nwrong"] = 12.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    base = tmp_path / "base.json"
    code, _ = gpucomm("baselines", "add", base, SENDRECV_ITER, bad)
    assert code == 2 and not base.exists()
    assert (f"gpucomm: error: {bad}: results[4].in_place.nwrong: 12 wrong elements at 256KiB (broadcast_perf): "
            "a wrong result is a failure, not a figure") in capsys.readouterr().err


def test_show_of_their_file_says_which_tool_wrote_it():
    code, text = gpucomm("show", SENDRECV_ITER)
    assert code == 0
    assert (f"report: the nccl-tests file {SENDRECV_ITER} (nccl-tests JSON format 3; per-iteration times (-I 1) as "
            "the samples)") in " ".join(text.split())


def test_html_of_their_file_escapes_markup_in_its_host_names(tmp_path):
    doc = json.loads(BROADCAST.read_text())
    doc["config"]["devices"][0]["hostname"] = "<script>alert(1)</script>"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc))
    code, _ = gpucomm("html", path, "-o", tmp_path / "page.html", "--no-plots")
    page = (tmp_path / "page.html").read_text()
    assert code == 0 and "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


@pytest.mark.parametrize("text,words", [('{"version": 3, "args": ["all_reduce_perf"', "cut short"),
                                        ('{"nvbandwidth": {"version": "v0.7"}}', "nvbandwidth.version: 'v0.7'")])
def test_gpucomm_compare_of_a_damaged_or_unknown_file_exits_2_naming_the_file_and_field(tmp_path, text, words):
    bad = tmp_path / "their.json"
    bad.write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest_gpucomm", "compare", str(NVB), str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(f"gpucomm: error: {bad}") and words in done.stderr

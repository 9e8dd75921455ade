"""Tests of pytest_gpucomm.cli.baselines and .env: ``gpucomm baselines list|show|prune|merge`` and ``gpucomm
env``, on small baselines saved with gate.store.save_run in a temporary directory."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_gpucomm.cli import baseline_files, baselines, baselines_prune, env
from pytest_gpucomm.gate.cases import CaseRecord
from pytest_gpucomm.gate.schema import BaselineError
from pytest_gpucomm.gate.store import (
    RunToSave,
    load_baseline,
    new_document,
    save_run,
    save_runs,
    update_document,
    write_document,
)
from pytest_gpucomm.env.hardware import detect, fingerprint

GPU_FP = {"kind": "gpu", "vendor": "NVIDIA", "model": "NVIDIA H200", "count": 2, "driver": "580.1",
          "comm_library": "NCCL 2.28.9", "host": "node-a"}


def rec(size: int = 1 << 20, op: str = "all_reduce", samples=(100.0, 101.0, 99.5), test: str = "ar") -> CaseRecord:
    return CaseRecord(test_id=f"suites/test_x.py::test_{test}[{size}]", op=op, size_bytes=size, world_size=2,
                      samples_gbps=list(samples), dtype="float32", devices=["cuda:0", "cuda:1"],
                      summary={"median_gbps": 100.0, "n": len(samples)})


def save(path: Path, run_id: str, records, day: int, fp=None, max_runs: int = 10, session=None) -> None:
    save_run(path, name=path.stem, run_id=run_id, date=f"2026-11-{day:02d}T10:00:00+00:00",
             fingerprint=dict(fp or GPU_FP), cases={r.key: r for r in records}, max_runs=max_runs,
             session=session or f"s{day}")


A, B, C = rec(1 << 20), rec(1 << 24, samples=(170.0, 171.0)), rec(1 << 10, op="all_gather", test="ag")


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    """h200.json: runs r1 (day 1, cases A B C), r2 (day 2, A B), r3 (day 3, A): C is in r1 only, B in r1 r2."""
    d = tmp_path / "baselines"
    p = d / "h200.json"
    save(p, "r1", [A, B, C], 1)
    save(p, "r2", [A, B], 2)
    save(p, "r3", [A], 3)
    return p


def parser() -> argparse.ArgumentParser:
    """The command line as cli.py builds it: ``gpucomm`` with the ``baselines`` and ``env`` subcommands."""
    p = argparse.ArgumentParser(prog="gpucomm")
    sub = p.add_subparsers(dest="command", required=True)
    baselines.add_baselines_parser(sub)
    env.add_env_parser(sub)
    return p


def gpucomm(*argv: str) -> tuple[int, str, str]:
    args = parser().parse_args([str(a) for a in argv])
    out, err = io.StringIO(), io.StringIO()
    code = args.func(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_ids(path: Path) -> list[str]:
    return [r.run_id for r in load_baseline(path).runs]


# --- list / show ----------------------------------------------------------------------------------


def test_list_gives_one_line_per_baseline_with_its_source_counts_dates_and_hardware(base: Path) -> None:
    pub = new_document("mi300x")
    pub["source"] = "published"
    pub["cases"][A.key] = {"test_id": A.test_id, "op": "all_reduce", "size_bytes": A.size_bytes, "world_size": 2,
                           "dtype": "float32", "runs": [], "floor_gbps": 44.0}
    write_document(base.parent / "mi300x.json", pub)
    code, out, err = gpucomm("baselines", "list", "--baseline-dir", base.parent)
    assert code == 0 and err == ""
    h200 = next(line for line in out.splitlines() if line.startswith("h200"))
    assert h200.split()[:7] == ["h200", "measured", "3", "3", "3", "2026-11-01", "2026-11-03"]
    assert h200.endswith("2 x NVIDIA H200")
    mi = next(line for line in out.splitlines() if line.startswith("mi300x"))
    assert mi.split()[:5] == ["mi300x", "published", "1", "0", "0"]


def test_list_reads_the_directory_from_the_environment_as_the_plugin_does(base: Path, monkeypatch) -> None:
    monkeypatch.setenv(baseline_files.BASELINE_DIR_ENV, str(base.parent))
    code, out, _ = gpucomm("baselines", "list")
    assert code == 0 and any(line.startswith("h200") for line in out.splitlines())


def test_list_names_an_unreadable_file_and_exits_2_after_listing_the_others(base: Path) -> None:
    (base.parent / "broken.json").write_text("{not json")
    code, out, err = gpucomm("baselines", "list", "--baseline-dir", base.parent)
    assert code == 2
    assert any(line.startswith("h200") for line in out.splitlines())
    assert "broken.json" in err and "invalid JSON" in err


def test_list_of_a_missing_directory_says_where_it_came_from(tmp_path: Path) -> None:
    code, _, err = gpucomm("baselines", "list", "--baseline-dir", tmp_path / "nowhere")
    assert code == 2 and f"{tmp_path / 'nowhere'}" in err and "--baseline-dir" in err


def test_show_lists_the_runs_with_their_cases_and_fingerprint_and_the_cases_by_op(base: Path) -> None:
    code, out, _ = gpucomm("baselines", "show", "h200", "--baseline-dir", base.parent)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"baseline h200 ({base})"
    assert "3 runs in 3 sessions" in out and "3 cases" in out
    r1 = next(line for line in lines if line.startswith("r1 "))
    assert r1.split()[:6] == ["r1", "2026-11-01", "10:00", "s1", "node-a", "3"]  # the date to the minute
    assert "2 x NVIDIA H200" in r1 and "580.1" in r1 and "NCCL 2.28.9" in r1
    r3 = next(line for line in lines if line.startswith("r3 "))
    assert r3.split()[5] == "1"
    ag = next(line for line in lines if line.startswith("all_gather"))
    assert ag.split() == ["all_gather", "2", "float32", "1", "KiB", "1", "1", "-"]  # 1 case, 1 run, no floor
    ar = lines.index(next(line for line in lines if line.startswith("all_reduce")))
    assert lines[ar].split()[3:] == ["1", "MiB", "1", "3", "-"]
    assert lines[ar + 1].split() == ["16", "MiB", "1", "2", "-"]


@pytest.mark.parametrize("columns", [120, 80, 60])
def test_list_show_and_env_fit_the_terminal_leaving_out_columns_in_order_and_saying_which(
        base: Path, monkeypatch, columns: int) -> None:
    long_session = "nightly-2026-11-04-ci-job-12345"
    save(base, "r4", [A, B], 4, fp={**GPU_FP, "host": "a-host-name-longer-than-most.cluster.example.org"},
         session=long_session)
    monkeypatch.setenv("COLUMNS", str(columns))
    outs = {}
    for argv in (["baselines", "list", "--baseline-dir", base.parent], ["baselines", "show", base],
                 ["env", "--baseline", base]):
        code, out, _ = gpucomm(*argv)
        assert code == 0, out
        # a single word (a path) longer than the width stays whole on its line: never cut
        assert [line for line in out.splitlines() if len(line) > columns and " " in line.strip()] == [], out
        outs[argv[1]] = out
    shown = outs["show"]
    # the long host's column goes first, then the session's, and the table says so; the run ids, dates and case
    # counts stay
    assert f"(left out at {columns} columns: node/host" in shown and "a-host-name" not in shown
    assert (long_session in shown) == (columns == 120)
    if columns != 120:
        r4 = next(line for line in shown.splitlines() if line.startswith("r4 "))
        assert r4.split()[:4] == ["r4", "2026-11-04", "10:00", "2"]


def test_show_accepts_a_path_and_prints_a_floor(tmp_path: Path) -> None:
    doc = new_document("pub")
    doc["source"], doc["source_detail"] = "published", "vendor sheet"
    doc["cases"][A.key] = {"test_id": A.test_id, "op": "all_reduce", "size_bytes": A.size_bytes, "world_size": 2,
                           "dtype": "float32", "runs": [], "floor_gbps": 44.5}
    write_document(tmp_path / "pub.json", doc)
    code, out, _ = gpucomm("baselines", "show", tmp_path / "pub.json")
    assert code == 0 and "source: published -- vendor sheet" in out and "no measured run" in out
    assert next(line for line in out.splitlines() if line.startswith("all_reduce")).split()[-1] == "44.5"


def test_a_table_too_wide_for_the_terminal_is_never_wrapped_and_an_empty_column_goes_first(
        tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "baselines"
    save(d / "dgx-h100-8node-cluster-a-nightly-allreduce.json", "r1", [A], 1)
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = gpucomm("baselines", "list", "--baseline-dir", d)
    assert code == 0
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("name"))
    # the header, the rule and the row: one line each, however narrow the terminal (a cell is never cut)
    assert lines[head + 1].startswith("---") and lines[head + 2].startswith("dgx-h100-8node-cluster-a-nightly")
    assert lines[head + 3].startswith("(left out at 60 columns: ")
    # a published file's floors are its only figures: its empty layout column goes before them
    doc = new_document("pub")
    doc["source"] = "published"
    doc["cases"][A.key] = {"test_id": A.test_id, "op": "all_reduce", "size_bytes": A.size_bytes, "world_size": 2,
                           "dtype": "float32", "runs": [], "floor_gbps": 44.5}
    write_document(tmp_path / "pub.json", doc)
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = gpucomm("baselines", "show", tmp_path / "pub.json")
    row = next(line for line in out.splitlines() if line.startswith("all_reduce"))
    assert code == 0 and row.split()[-1] == "44.5", out
    assert "(left out at 60 columns: layout, dtype;" in out, out


# --- prune ----------------------------------------------------------------------------------------


def test_prune_keep_keeps_the_newest_runs_and_removes_the_cases_left_without_runs(base: Path) -> None:
    code, out, _ = gpucomm("baselines", "prune", "h200", "--keep", "2", "--baseline-dir", base.parent)
    assert code == 0
    b = load_baseline(base)
    assert [r.run_id for r in b.runs] == ["r2", "r3"]
    assert set(b.cases) == {A.key, B.key}
    assert [r.run_id for r in b.cases[A.key].runs] == ["r2", "r3"]
    assert [r.run_id for r in b.cases[B.key].runs] == ["r2"]
    assert "runs removed (1): r1" in out and C.key in out and "removed (no run left and no floor)" in out
    assert "1 case: 3 -> 2 runs" in out and "1 case: 2 -> 1 run" in out and out.strip().endswith(f"wrote {base}")


def test_prune_keep_counts_a_jobs_node_runs_as_one(tmp_path: Path) -> None:
    p = tmp_path / "b.json"
    save(p, "old", [A], 1)
    save_runs(p, name="b", runs=[RunToSave(f"job-node{n}", "2026-11-02T10:00:00+00:00", GPU_FP, {A.key: A}, "s2", n,
                                           f"h{n}") for n in range(3)])
    code, _, _ = gpucomm("baselines", "prune", p, "--keep", "1")
    assert code == 0 and run_ids(p) == ["job-node0", "job-node1", "job-node2"]


def test_prune_before_removes_the_runs_recorded_earlier(base: Path) -> None:
    code, out, _ = gpucomm("baselines", "prune", base, "--before", "2026-11-02")
    assert code == 0 and run_ids(base) == ["r2", "r3"]
    code, _, _ = gpucomm("baselines", "prune", base, "--before", "2026-11-03T11:00:00+02:00")  # 09:00 UTC
    assert code == 0 and run_ids(base) == ["r3"]


def test_prune_run_removes_the_named_runs_and_a_jobs_id_removes_its_node_runs(base: Path) -> None:
    code, _, _ = gpucomm("baselines", "prune", base, "--run", "r2", "--run", "r1")
    assert code == 0 and run_ids(base) == ["r3"] and set(load_baseline(base).cases) == {A.key}
    save_runs(base, name="h200", runs=[RunToSave(f"job-node{n}", "2026-11-04T10:00:00+00:00", GPU_FP, {A.key: A},
                                                 "s4", n, f"h{n}") for n in range(2)])
    code, _, _ = gpucomm("baselines", "prune", base, "--run", "job")
    assert code == 0 and run_ids(base) == ["r3"]


def test_prune_of_an_unknown_run_id_names_the_runs_present_and_changes_nothing(base: Path) -> None:
    before = base.read_bytes()
    code, out, err = gpucomm("baselines", "prune", base, "--run", "r9")
    assert code == 2 and out == ""
    assert err.startswith("gpucomm: error: --run 'r9': no such run in") and str(base) in err and "r1, r2, r3" in err
    assert base.read_bytes() == before


def test_prune_keeps_a_case_with_a_floor_when_its_runs_go(base: Path) -> None:
    doc = json.loads(base.read_text())
    doc["cases"][C.key]["floor_gbps"] = 5.0
    write_document(base, doc)
    code, out, _ = gpucomm("baselines", "prune", base, "--run", "r1")
    assert code == 0
    entry = load_baseline(base).cases[C.key]
    assert entry.runs == [] and entry.floor_gbps == 5.0
    assert "kept on its published floor only" in out and "floor 5 GB/s" in out


def test_prune_of_every_run_says_so_and_writes_a_valid_file_with_no_case(base: Path) -> None:
    code, out, _ = gpucomm("baselines", "prune", base, "--keep", "0")
    assert code == 0 and "every run is removed: the file keeps no case" in out
    b = load_baseline(base)
    assert b.runs == [] and b.cases == {}


def test_prune_dry_run_prints_the_change_and_writes_nothing(base: Path) -> None:
    before = base.read_bytes()
    code, out, _ = gpucomm("baselines", "prune", base, "--keep", "1", "--dry-run", "-v")
    assert code == 0 and base.read_bytes() == before
    assert "runs removed (2): r1" in out and "dry run: nothing written" in out and "wrote" not in out
    assert f"      {A.key}" in out  # -v names the case of "3 -> 1 runs"


@pytest.mark.parametrize("how", [("--before", "2020-01-01"), ("--keep", "3"), ("--keep", "5")])
def test_prune_with_nothing_to_remove_says_so_and_writes_nothing(base: Path, how) -> None:
    before = base.stat().st_mtime_ns, base.read_bytes()
    code, out, _ = gpucomm("baselines", "prune", base, *how)
    assert code == 0 and "nothing to remove" in out and (base.stat().st_mtime_ns, base.read_bytes()) == before


@pytest.mark.parametrize("option, value, said", [("--keep", "x", "--keep 'x': not a whole number"),
                                                 ("--keep", "-1", "must be >= 0"),
                                                 ("--before", "yesterday", "--before 'yesterday': not an ISO date")])
def test_prune_rejects_a_bad_option_value_by_name(base: Path, option: str, value: str, said: str) -> None:
    code, _, err = gpucomm("baselines", "prune", base, f"{option}={value}")
    assert code == 2 and said in err


def test_prune_waits_for_the_lock_of_a_save_and_times_out_with_a_clear_message(base: Path) -> None:
    before = base.read_bytes()
    with FileLock(str(base) + ".lock"):
        code, out, err = gpucomm("baselines", "prune", base, "--keep", "1", "--lock-timeout", "0.2")
    assert code == 2 and base.read_bytes() == before
    assert f"could not lock {base}.lock within 0.2 s" in err and "wrote" not in out


def test_prune_under_the_lock_prunes_what_the_file_holds_then(base: Path, monkeypatch) -> None:
    """A save between the first read and the lock is not lost: the prune is applied to the file re-read."""
    real = baselines_prune.prune_document
    calls = []

    def prune_then_save(doc, path, **how):
        calls.append(1)
        if len(calls) == 1:  # a save lands after the command read the file
            save(base, "r4", [A], 4)
        return real(doc, path, **how)

    monkeypatch.setattr(baselines_prune, "prune_document", prune_then_save)
    code, out, _ = gpucomm("baselines", "prune", base, "--keep", "2")
    assert code == 0 and run_ids(base) == ["r3", "r4"] and "the file changed while this ran" in out
    assert "runs removed (2): r1" in out.split("the file changed")[1]


# --- merge ----------------------------------------------------------------------------------------


@pytest.fixture()
def two(tmp_path: Path) -> tuple[Path, Path]:
    """a.json: r1 (A, C), r2 (A); b.json: r2 (the same run: A) and r3 (A, B), with max_runs 3 and 5."""
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save(pa, "r1", [A, C], 1, max_runs=3)
    save(pa, "r2", [A], 2, max_runs=3)
    save(pb, "r2", [A], 2, max_runs=5)
    save(pb, "r3", [A, B], 3, max_runs=5)
    return pa, pb


def test_merge_writes_the_union_of_runs_and_cases_with_a_shared_run_once(two, tmp_path: Path) -> None:
    pa, pb = two
    code, out, _ = gpucomm("baselines", "merge", pa, pb, "-o", "c", "--baseline-dir", tmp_path)
    c = load_baseline(tmp_path / "c.json")
    assert code == 0 and out.strip().endswith(f"wrote {tmp_path / 'c.json'}")
    assert c.name == "c" and c.source == "measured" and c.max_runs == 5
    assert [r.run_id for r in c.runs] == ["r1", "r2", "r3"]
    assert set(c.cases) == {A.key, B.key, C.key}
    assert [r.run_id for r in c.cases[A.key].runs] == ["r1", "r2", "r3"]
    assert "1 only in A, 1 only in B, 1 in both" in out and "1 case in both: 2 + 2 -> 3 runs" in out


def test_merge_orders_the_runs_by_date_whatever_file_they_come_from(tmp_path: Path) -> None:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save(pa, "late", [A], 5)
    save(pb, "early", [A], 1)
    assert gpucomm("baselines", "merge", pa, pb, "-o", tmp_path / "c.json")[0] == 0
    assert run_ids(tmp_path / "c.json") == ["early", "late"]


def test_merge_into_a_in_place_adds_b_under_the_lock(two) -> None:
    pa, pb = two
    code, out, _ = gpucomm("baselines", "merge", pa, pb, "-o", pa)
    assert code == 0 and "(in place)" in out and run_ids(pa) == ["r1", "r2", "r3"]


def test_merge_keeps_at_most_the_larger_max_runs_per_case_dropping_the_oldest(tmp_path: Path) -> None:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    for day in (1, 3):
        save(pa, f"a{day}", [A], day, max_runs=2)
    for day in (2, 4):
        save(pb, f"b{day}", [A], day, max_runs=2)
    code, out, _ = gpucomm("baselines", "merge", pa, pb, "-o", tmp_path / "c.json")
    assert code == 0 and run_ids(tmp_path / "c.json") == ["a3", "b4"]
    assert "runs dropped beyond max_runs 2 (the oldest): a1" in out and "b2" in out


def test_merge_of_a_run_id_with_other_contents_is_an_error_naming_both_files(two, tmp_path: Path) -> None:
    pa, pb = two
    save(pb, "r1", [A], 9)  # another r1: another date and other cases
    code, _, err = gpucomm("baselines", "merge", pa, pb, "-o", tmp_path / "c.json")
    assert code == 2 and "run 'r1' is in both" in err and str(pa) in err and str(pb) in err and "date" in err
    assert not (tmp_path / "c.json").exists()


def test_merge_of_one_run_with_other_samples_in_a_case_is_an_error(two, tmp_path: Path) -> None:
    pa, pb = two
    save(pb, "r2", [rec(1 << 20, samples=(50.0, 51.0))], 2, max_runs=5)  # r2's record unchanged, A's samples not
    code, _, err = gpucomm("baselines", "merge", pa, pb, "-o", tmp_path / "c.json")
    assert code == 2 and f"run 'r2' of case {A.key!r} holds other samples" in err and str(pb) in err


def test_merge_of_a_case_with_two_different_floors_is_an_error(tmp_path: Path) -> None:
    paths = []
    for name, floor in (("a", 40.0), ("b", 44.0)):
        doc = new_document(name)
        doc["source"] = "published"
        doc["cases"][A.key] = {"test_id": A.test_id, "op": "all_reduce", "size_bytes": A.size_bytes, "world_size": 2,
                               "dtype": "float32", "runs": [], "floor_gbps": floor}
        write_document(tmp_path / f"{name}.json", doc)
        paths.append(tmp_path / f"{name}.json")
    code, _, err = gpucomm("baselines", "merge", *paths, "-o", tmp_path / "c.json")
    assert code == 2 and "floor 40 GB/s" in err and "44 GB/s" in err and A.key in err


def test_merge_of_published_floors_and_measured_runs_is_measured_and_keeps_the_floor(two, tmp_path: Path) -> None:
    pa, _ = two
    doc = new_document("pub")
    doc["source"], doc["source_detail"] = "published", "sheet"
    doc["cases"][B.key] = {"test_id": B.test_id, "op": "all_reduce", "size_bytes": B.size_bytes, "world_size": 2,
                           "dtype": "float32", "runs": [], "floor_gbps": 150.0}
    write_document(tmp_path / "pub.json", doc)
    assert gpucomm("baselines", "merge", tmp_path / "pub.json", pa, "-o", tmp_path / "c.json")[0] == 0
    c = load_baseline(tmp_path / "c.json")
    assert c.source == "measured" and c.source_detail == "sheet" and c.cases[B.key].floor_only


def test_merge_refuses_to_replace_a_third_existing_file(two, base: Path) -> None:
    pa, pb = two
    before = base.read_bytes()
    code, _, err = gpucomm("baselines", "merge", pa, pb, "-o", base)
    assert code == 2 and "exists and is neither A" in err and base.read_bytes() == before


def test_merge_dry_run_writes_nothing(two, tmp_path: Path) -> None:
    pa, pb = two
    before = pa.read_bytes()
    code, out, _ = gpucomm("baselines", "merge", pa, pb, "-o", pa, "--dry-run")
    assert code == 0 and "dry run: nothing written" in out and pa.read_bytes() == before
    code, _, _ = gpucomm("baselines", "merge", pa, pb, "-o", tmp_path / "new.json", "--dry-run")
    assert code == 0 and not (tmp_path / "new.json").exists()


def test_merge_times_out_on_the_lock_of_its_output(two) -> None:
    pa, pb = two
    before = pa.read_bytes()
    with FileLock(str(pa) + ".lock"):
        code, _, err = gpucomm("baselines", "merge", pa, pb, "-o", pa, "--lock-timeout", "0.2")
    assert code == 2 and f"could not lock {pa}.lock" in err and pa.read_bytes() == before


# --- bad input ------------------------------------------------------------------------------------


def test_show_of_a_missing_name_lists_the_available_ones(base: Path) -> None:
    code, _, err = gpucomm("baselines", "show", "b200", "--baseline-dir", base.parent)
    assert code == 2 and "no baseline named 'b200'" in err and "available baselines: h200" in err
    assert "--baseline-dir" in err


def test_show_of_a_missing_file_names_it(tmp_path: Path) -> None:
    code, _, err = gpucomm("baselines", "show", tmp_path / "gone.json")
    assert code == 2 and err == f"gpucomm: error: {tmp_path / 'gone.json'}: baseline file does not exist\n"


def test_prune_of_corrupt_json_names_the_file_and_leaves_it(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('{"schema": "pytest-gpucomm-baseline", ')
    code, _, err = gpucomm("baselines", "prune", p, "--keep", "1")
    assert code == 2 and str(p) in err and "truncated" in err and p.read_text().endswith(", ")


def test_a_report_given_as_a_baseline_is_refused_as_a_report(tmp_path: Path, two) -> None:
    report = tmp_path / "rep.json"
    report.write_text(json.dumps({"format": "pytest-gpucomm-report", "version": 1, "rows": []}))
    for argv in (("show", report), ("prune", report, "--keep", "1"),
                 ("merge", two[0], report, "-o", tmp_path / "c.json")):
        code, _, err = gpucomm("baselines", *argv)
        assert code == 2 and f"{report}: is a pytest-gpucomm report" in err and "not a baseline file" in err


def test_update_document_refuses_an_invalid_result_and_leaves_the_file(base: Path) -> None:
    before = base.read_bytes()

    def drop_runs(doc):
        doc["cases"][C.key]["runs"] = []  # a case with no run and no floor: invalid
        return doc

    with pytest.raises(BaselineError, match="refusing to write an invalid baseline.*floor_gbps"):
        update_document(base, drop_runs)
    with pytest.raises(BaselineError, match="refusing to write.*not a positive finite number"):
        bad_run = {"run_id": "r1", "samples_gbps": [-1.0]}
        update_document(base, lambda doc: {**doc, "cases": {C.key: {**doc["cases"][C.key], "runs": [bad_run]}}})
    assert base.read_bytes() == before


def test_update_document_writes_nothing_when_the_change_returns_none_and_passes_its_errors(base: Path) -> None:
    before = base.read_bytes()
    assert update_document(base, lambda doc: None) is None
    with pytest.raises(KeyError):
        update_document(base, lambda doc: doc["nope"])
    assert base.read_bytes() == before


# --- env ------------------------------------------------------------------------------------------


def test_env_prints_this_machines_fingerprint_as_key_value_lines() -> None:
    fp = fingerprint(detect("cpu"))  # GPUCOMM_DEVICE=cpu, as the tests pin it
    code, out, _ = gpucomm("env")
    assert code == 0
    assert f"kind: {fp['kind']}" in out.splitlines() and f"model: {fp['model']}" in out.splitlines()
    assert f"torch: {fp['torch']}" in out.splitlines()


def test_env_names_what_changed_since_the_baselines_newest_run(tmp_path: Path) -> None:
    fp = fingerprint(detect("cpu"))  # GPUCOMM_DEVICE=cpu, as the tests pin it
    p = tmp_path / "b.json"
    save(p, "r1", [A], 1, fp={**fp, "driver": "older"})
    save(p, "r2", [A], 2, fp={**fp, "driver": "999.1", "host": "another-host"})  # the newest run is compared
    code, out, _ = gpucomm("env", "--baseline", p)
    assert code == 0 and "environment changed since the baseline b" in out and "run r2" in out
    assert f"  driver 999.1 -> {fp['driver']}" in out.splitlines()
    assert "host" not in out.split("environment changed")[1]  # another host of the same kind is no change


def test_env_says_same_when_nothing_but_the_host_and_date_changed(tmp_path: Path) -> None:
    fp = fingerprint(detect("cpu"))  # GPUCOMM_DEVICE=cpu, as the tests pin it
    p = tmp_path / "b.json"
    save(p, "r1", [A], 1, fp={**fp, "host": "elsewhere", "date": "2020-01-01"})
    code, out, _ = gpucomm("env", "--baseline", p, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["fingerprint"]["kind"] == fp["kind"]
    assert doc["baseline"]["same"] is True and doc["baseline"]["changes"] == []
    assert "same as when the baseline b" in doc["baseline"]["text"]


def test_env_with_an_unknown_baseline_exits_2_naming_it(tmp_path: Path) -> None:
    code, _, err = gpucomm("env", "--baseline", "b200", "--baseline-dir", tmp_path)
    assert code == 2 and err.startswith("gpucomm: error: --baseline b200: no baseline named 'b200'")

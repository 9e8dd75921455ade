"""Unit tests of compare/tool_engine.py: the nccl-tests and nvbandwidth programs run as an engine (issue 48
item 2) -- where a program is looked for, the command lines, the sweeps, a run past its time, the cache.

The programs are the stand-ins of tests/data/standin; their files are read by ``pytest_gpucomm.foreign``
(issue 48 item 1).
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_gpucomm.compare.tool_engine import (NcclTests, Nvbandwidth, ToolFailed, ToolMissing, engines_of,
                                                find_program, last_lines, run_program, sweep_ranges)

STANDIN = Path(__file__).resolve().parent / "data" / "standin"


@pytest.fixture(autouse=True)
def _no_faults(monkeypatch):
    for name in ("GPUCOMM_STANDIN_FAULT", "GPUCOMM_STANDIN_SLOWER", "GPUCOMM_STANDIN_RUN"):
        monkeypatch.delenv(name, raising=False)


def test_sizes_of_one_geometric_step_are_one_sweep_and_others_one_run_each():
    assert sweep_ranges([1024, 4096, 16384, 65536]) == [(1024, 65536, 4)]
    assert sweep_ranges([4096]) == [(4096, 4096, 2)]
    assert sweep_ranges([1024, 2048, 8192]) == [(1024, 1024, 2), (2048, 2048, 2), (8192, 8192, 2)]


def test_the_engine_choices_are_torch_nccl_tests_and_both_in_that_order():
    assert engines_of("both") == ("torch", "nccl-tests") and engines_of("torch") == ("torch",)
    with pytest.raises(ValueError, match="unknown engine 'nccl'"):
        engines_of("nccl")


def test_a_program_not_found_names_where_it_was_looked_for(tmp_path, monkeypatch):
    with pytest.raises(ToolMissing, match=f"all_reduce_perf: {tmp_path}/all_reduce_perf is not found "
                                          r"\(--gpucomm-nccl-tests\)"):
        find_program("all_reduce_perf", str(tmp_path), "--gpucomm-nccl-tests", folder=True)
    (tmp_path / "nvbandwidth").write_text("not a program")
    with pytest.raises(ToolMissing, match="is not an executable file"):
        find_program("nvbandwidth", str(tmp_path / "nvbandwidth"), "--gpucomm-nvbandwidth", folder=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing, match="nvbandwidth not found on PATH; give --gpucomm-nvbandwidth=PATH"):
        find_program("nvbandwidth", None, "--gpucomm-nvbandwidth", folder=False)


def test_a_program_past_its_time_is_ended_with_the_children_it_started(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("started", child.pid, flush=True)
        time.sleep(600)
    """))
    start = time.monotonic()
    with pytest.raises(ToolFailed) as e:
        run_program([sys.executable, str(script)], timeout_s=1.0)
    assert time.monotonic() - start < 10
    first, *rest = str(e.value).splitlines()
    assert first == (f"{Path(sys.executable).name} did not finish within the session's --gpucomm-timeout of 1 s "
                     "and was ended")
    assert rest[0] == f"  command: {sys.executable} {script}" and rest[1] == "  its last lines:"
    child = int(str(e.value).split("started ")[1].split()[0])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the child is reaped by init once its group is killed
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_last_lines_keeps_the_tail_and_cuts_long_lines():
    text = "\n".join(f"line {i}" for i in range(30)) + "\n" + "x" * 200
    out = last_lines(text, n=3, width=20).splitlines()
    assert out == ["    line 28", "    line 29", "    " + "x" * 17 + "..."]


def _nccl_tests(tmp_path, sizes=(1024, 4096, 16384)):
    return NcclTests(str(STANDIN), 60.0, tmp_path, set(sizes), dict(os.environ))


def test_the_nccl_tests_command_line_asks_for_per_iteration_times_as_json(tmp_path):
    cmd = _nccl_tests(tmp_path).command("all_gather", 4, "bfloat16", 1024, 1 << 30, 4, tmp_path / "o.json")
    assert cmd == [str(STANDIN / "all_gather_perf"), "-b", "1024", "-e", str(1 << 30), "-f", "4", "-g", "4",
                   "-d", "bfloat16", "-n", "20", "-w", "5", "-c", "1", "-I", "1", "-J", str(tmp_path / "o.json")]


def test_every_size_of_an_op_comes_from_one_run_and_a_fresh_one_runs_that_size_alone(tmp_path):
    engine = _nccl_tests(tmp_path)
    a = engine.measure("all_reduce", 2, "float32", True, 1024)
    b = engine.measure("all_reduce", 2, "float32", False, 16384)
    assert len(engine.runs) == 1 and a.info["command"] == b.info["command"]
    assert (a.size_bytes, a.info["in_place"], len(a.samples_s)) == (1024, True, 20)
    assert b.info["tool_cases"] == 6 and b.busbw_factor == 1.0  # 2 (n - 1) / n on 2 ranks
    c = engine.measure("all_reduce", 2, "float32", True, 4096, fresh=True)
    assert len(engine.runs) == 2 and " -b 4096 -e 4096 " in c.info["command"]


def test_an_op_without_a_binary_or_a_type_not_run_is_missing_not_failed(tmp_path):
    engine = _nccl_tests(tmp_path)
    with pytest.raises(ToolMissing, match="nccl-tests is not run for float64"):
        engine.measure("all_reduce", 2, "float64", True, 1024)


def test_nvbandwidth_measures_whole_mib_and_reads_the_cell_of_the_device(tmp_path, monkeypatch):
    engine = Nvbandwidth(str(STANDIN / "nvbandwidth"), 60.0, tmp_path, dict(os.environ))
    with pytest.raises(ToolMissing, match=r"nvbandwidth copies whole MiB buffers \(-b MiB\); 1.5 MiB is not one"):
        engine.measure("h2d", ["cuda:1"], 3 << 19)
    m = engine.measure("h2d", ["cuda:1"], 1 << 20)
    peer = engine.measure("copy", ["cuda:1", "cuda:0"], 1 << 20)
    assert len(engine.runs) == 1 and m.devices == ("cuda:1",) and 40 < m.gbps < 60 and 390 < peer.gbps < 400
    with pytest.raises(ToolMissing, match="nvbandwidth has no copy-engine test mapped to copy_bidir"):
        engine.measure("copy_bidir", ["cuda:0", "cuda:1"], 1 << 20)


def test_nvbandwidth_s_json_is_read_from_its_standard_output_whatever_it_writes_to_stderr(tmp_path):
    env = {**os.environ, "GPUCOMM_STANDIN_FAULT": "stderr"}
    engine = Nvbandwidth(str(STANDIN / "nvbandwidth"), 60.0, tmp_path, env)
    m = engine.measure("h2d", ["cuda:0"], 1 << 20)
    assert 40 < m.gbps < 60 and "{cudaErrorNotSupported}" in engine.runs[0].text
    assert "{cudaErrorNotSupported}" not in engine.runs[0].output


def test_a_gpu_that_nvbandwidth_does_not_see_fails_the_case_and_is_not_skipped_as_n_a(tmp_path):
    env = {**os.environ, "GPUCOMM_STANDIN_GPUS": "1"}
    engine = Nvbandwidth(str(STANDIN / "nvbandwidth"), 60.0, tmp_path, env)
    with pytest.raises(ToolFailed, match=r"nvbandwidth sees 1 GPU\(s\), not cuda:1: no figure of h2d 1 MiB"):
        engine.measure("h2d", ["cuda:1"], 1 << 20)


class _Gate:
    """A gate whose baseline puts every case's centre at ``1 / ratio`` of today's figure."""

    def __init__(self, ratio):
        self.ratio, self.asked = ratio, []

    def baseline_ratio(self, nodeid, m):
        self.asked.append(nodeid)
        return self.ratio


def _engines(tmp_path):
    from pytest_gpucomm.plugin.engines import Engines, EngineSettings
    from pytest_gpucomm.plugin.settings import Settings

    settings = Settings(baseline="cpu", device="cpu", min_time_s=0.01, max_size=None, json_path=None, timeout_s=60.0,
                        engine="both", nccl_tests_dir=str(STANDIN))
    engines = Engines(EngineSettings.of(settings), devices=None, launched=False)  # type: ignore[arg-type]
    engines.sizes.update({1024, 4096})
    return engines


def _record(nodeid, m):
    from pytest_gpucomm.measurement import Record

    return Record(nodeid=nodeid, measurement=m)


@pytest.mark.parametrize("ratio, line", [
    (1.0, "nccl-tests holds 1.00x: the slowdown is in torch's collective path"),
    (0.96, "nccl-tests holds 0.96x: the slowdown is in torch's collective path"),
    (0.5, "nccl-tests dropped too (0.50x): the slowdown is in what both engines share (the library, the driver, "
          "the hardware)")])
def test_a_torch_collective_regression_says_how_nccl_tests_stands_from_its_kept_sweep(tmp_path, ratio, line):
    engines = _engines(tmp_path)
    torch_m = engines.nccl_tests.measure("all_reduce", 2, "float32", True, 4096)  # a collective's figure
    torch_m.info.pop("source")  # torch's own figure names no other tool
    gate = _Gate(ratio)
    got = engines.counterpart_line(_record("t.py::test_all_reduce[4KiB-torch]", torch_m), [], gate)
    assert got == line and gate.asked == ["t.py::test_all_reduce[4KiB-nccl-tests]"]
    assert len(engines.nccl_tests.runs) == 1  # the sweep kept from the first measure: no second run
    engines.close()


def test_a_nccl_tests_regression_says_that_torch_held_from_the_torch_case_that_ran_before(tmp_path):
    engines = _engines(tmp_path)
    m = engines.nccl_tests.measure("all_reduce", 2, "float32", True, 1024)
    torch_m = engines.nccl_tests.measure("all_reduce", 2, "float32", True, 1024)
    records = [_record("t.py::test_all_reduce[1KiB-torch]", torch_m)]
    got = engines.counterpart_line(_record("t.py::test_all_reduce[1KiB-nccl-tests]", m), records, _Gate(1.0))
    assert got == "torch holds 1.00x: the slowdown is in nccl-tests' own run, not what both engines share"
    assert engines.counterpart_line(_record("t.py::test_all_reduce[1KiB]", m), records, _Gate(1.0)) is None
    engines.close()


def test_an_interrupted_run_ends_the_program_before_the_interruption_goes_on(tmp_path, monkeypatch):
    import subprocess

    real = subprocess.Popen.communicate
    seen = []

    def interrupted(self, input=None, timeout=None):
        if not seen:  # the first wait is Ctrl-C's
            seen.append(self.pid)
            raise KeyboardInterrupt
        return real(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_program([sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=60.0)
    assert seen and not Path(f"/proc/{seen[0]}").exists()  # ended and reaped

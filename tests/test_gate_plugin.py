"""Acceptance tests of the baseline gate on CPU: save, compare, verdicts, messages, reports, errors."""

import json
import math
import subprocess
import sys

import pytest

# The gate imports numpy, scipy, jsonschema and filelock on first use.  pytester's in-process runs drop the
# modules imported during a run, and some extension modules cannot be loaded twice in one process, so
# load them here, before any run (as conftest.py does for torch): the file then also passes on its own.
from pytest_gpucomm.gate import decision, store  # noqa: F401
from pytest_gpucomm.gate.levels import LEVEL_SHARES, STEADY_NAME

from pytest_gpucomm import vocab

FAST = ["--gpucomm-min-time=0.01", "-p", "no:cacheprovider"]

TEST_FILE = """
from pytest_gpucomm import sizes

@sizes("64KiB")
def test_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)
"""


def _save_runs(pytester, n=3, *extra):
    for _ in range(n):
        result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", *extra, *FAST)
        assert result.ret == 0, result.stdout.str()
    return pytester.path / "baselines" / "cpu.json"


def _scale(path, factor):
    doc = json.loads(path.read_text())
    for case in doc["cases"].values():
        for run in case["runs"]:
            run["samples_gbps"] = [x * factor for x in run["samples_gbps"]]
            run["summary"]["median_gbps"] *= factor
    path.write_text(json.dumps(doc))


# CPU timings on a shared 2-core machine swing by tens of percent between runs, which says nothing about
# the gate.  This conftest replaces the timing engine of the copies with the noise model the decision is
# designed for (3% within a run, 1% between runs, a few outliers), seeded per run, so that "an unchanged
# machine raises no alarm" is tested through the whole plugin with realistic, reproducible noise.
SIMULATED_NOISE_CONFTEST = """
import os
import numpy as np
import pytest
import pytest_gpucomm.ops.copies as copies
from pytest_gpucomm import vocab
from pytest_gpucomm.ops.timing import Plan

@pytest.fixture(autouse=True)
def simulated_timing(monkeypatch, request):
    run = int(os.environ["SIM_RUN"])
    case = sum(map(ord, request.node.nodeid))
    rng = np.random.default_rng(1000 * run + case)
    offset = rng.normal(0, 0.01)

    def fake_measure(op, settings, agree=None, prepare=None, clocks=None):
        t = 5e-6 * float(os.environ.get("SIM_SLOWER", "1")) * np.exp(offset + rng.normal(0, 0.03, 50))
        t[rng.random(50) < 0.03] *= 1.4
        return [float(x) for x in t], Plan(batch=1, samples=50, estimate_s=5e-6)

    monkeypatch.setattr(copies, "measure", fake_measure)
    # the gate's re-measures run here, where the simulated timing applies: a fresh re-measure in a new
    # process would time real copies
    monkeypatch.setattr(vocab, "MAX_FRESH_REMEASURES", 0)
"""


def _save_simulated_runs(pytester, monkeypatch, n=3, sessions=False):
    """Record n baseline runs timed by the simulated noise model (run ids 0..n-1).  All runs of one pytest
    process share one session label (host, boot, day): one session, whose spread the gate must assume;
    ``sessions=True`` labels each run a session of its own (GPUCOMM_BASELINE_SESSION), as runs recorded on
    other boots or days would be."""
    pytester.makeconftest(SIMULATED_NOISE_CONFTEST)
    for run in range(n):
        monkeypatch.setenv("SIM_RUN", str(run))
        if sessions:
            monkeypatch.setenv("GPUCOMM_BASELINE_SESSION", f"sim-session-{run}")
        assert pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", *FAST).ret == 0
    monkeypatch.delenv("GPUCOMM_BASELINE_SESSION", raising=False)


def test_saving_creates_the_baseline_and_a_second_run_is_judged_against_it(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch, sessions=True)
    path = pytester.path / "baselines" / "cpu.json"
    monkeypatch.setenv("SIM_RUN", "3")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "pytest-gpucomm-baseline" and doc["source"] == "measured"
    assert len(doc["runs"]) == 3 and doc["runs"][0]["fingerprint"]["kind"] == "cpu"
    assert len(doc["cases"]) == 2
    assert all(len(c["runs"]) == 3 for c in doc["cases"].values())
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.stdout.fnmatch_lines(
        [
            "gpucomm baseline: *cpu.json (measured, 3 runs in 3 sessions, 2 cases, last recorded *); 2 gated "
            "comparisons, alpha 0.01 (Bonferroni), tolerance 5%",
            "gpucomm environment: same as when the baseline was recorded",
            "*size*base GB/s*ratio*status",
            "gpucomm verdicts: *",
        ]
    )
    # an unchanged machine: no false alarm.  Three sessions of runs 1 % apart (2 degrees of freedom) cannot
    # promise to catch a 10 % drop at alpha 0.001 over 2 cases and 2 looks: the verdict says so
    result.stdout.fnmatch_lines(["gpucomm verdicts: 2 not gated"])
    result.stdout.fnmatch_lines(["gpucomm sensitivity: gated (a drop of 2x the tolerance caught 99% of the time): 0 "
                                 "of 2 cases (0 by their own verdict, 0 more by their residual); at the levels: 0 of "
                                 "2 case residuals; the smallest drop a case's own verdict catches is *% at the "
                                 "median case, *% at worst",
                                 "  not gated: *::test_copy[[]64KiB-0->1[]]: catches drops of *% or more (3 baseline "
                                 "runs in 3 sessions)",
                                 "  fix: record more baseline runs, in more sessions*",
                                 # two cases: no class of 5 to judge the offset of, no band of 3; each residual
                                 "gpucomm levels: 2 case residuals: 0 gated, median smallest drop caught *%, level * "
                                 "each"])
    result.stdout.no_fnmatch_line("*REGRESSION*")
    result.stdout.no_fnmatch_line("*WARNING*")
    result.assert_outcomes(passed=2)
    assert result.ret == 0


@pytest.mark.parametrize("slower, failed", [(1.0 / 0.8, 2), (1.0 / 0.97, 0)], ids=["20%-drop", "3%-drop"])
def test_a_simulated_drop_beyond_the_tolerance_fails_and_one_within_it_passes(pytester, monkeypatch, slower, failed):
    pytester.makepyfile(TEST_FILE)
    # eight sessions of one run: the simulated runs move 1 % between runs, so a drop of 20 % is caught (7 df)
    _save_simulated_runs(pytester, monkeypatch, n=8, sessions=True)
    monkeypatch.setenv("SIM_RUN", "7")
    monkeypatch.setenv("SIM_SLOWER", str(slower))
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(failed=failed, passed=2 - failed)
    if failed:  # the first run below 1 - tolerance is measured again before the verdict
        result.stdout.fnmatch_lines(["REGRESSION: copy on *", "  beyond the 5% tolerance of baseline cpu: *",
                                     "  first run * GB/s (*x), measured again: * GB/s (*x) *"])


def test_a_baseline_claiming_more_bandwidth_fails_as_regression_with_the_full_message(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    # simulated timings: three real CPU runs can differ so much that the case is not gated at all
    _save_simulated_runs(pytester, monkeypatch, sessions=True)
    path = pytester.path / "baselines" / "cpu.json"
    _scale(path, 3.0)
    monkeypatch.setenv("SIM_RUN", "6")
    monkeypatch.setenv("NCCL_PROTO", "Simple")  # an environment change the message must show
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "gpucomm environment changed since the baseline: env.NCCL_PROTO (absent) -> Simple",
            # what, where and how much first; the evidence below it, indented
            "REGRESSION: copy on cpu:0->cpu:1 at 64 KiB: 6?.?% drop, * (pooled: *, *) vs * GB/s",
            "  beyond the 5% tolerance of baseline cpu: bandwidth is *x of the baseline, bounds [[]*, *[]] at level "
            "0.0005 a side (alpha over cases and looks; quantile *, * df; * independent run* now, 3 baseline runs in 3 "
            "sessions): even its upper bound is below the 5% tolerance limit 0.95x",
            "  first run * GB/s (*x), measured again: * GB/s (*x) *",
            "  changed since the baseline was recorded: env.NCCL_PROTO (absent) -> Simple",
        ]
    )


def test_a_baseline_recorded_in_one_session_warns_and_assumes_the_spread_between_sessions(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch)  # three runs, one session: their agreement says nothing of the next
    monkeypatch.setenv("SIM_RUN", "3")
    report = pytester.path / "gpucomm.json"
    result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", *FAST)
    result.assert_outcomes(passed=2)
    warning = ("gpucomm baseline WARNING: 2 cases of one session (one host boot and day) cannot be judged: no file "
               "of this hardware with runs in several sessions, and no prior for this kind of machine; the spread "
               "between sessions is assumed (0.5%) and they are not gated; record runs in more sessions")
    result.stdout.fnmatch_lines(["gpucomm baseline: *cpu.json (measured, 3 runs in 1 session, 2 cases, *", warning])
    rows = json.loads(report.read_text())["rows"]
    assert len(rows) == 2
    for row in rows:  # this session's offset and the baseline session's, 0.5 % each; never "ok" on an assumption
        assert row["baseline"]["baseline_sessions"] == 1 and row["status"] == "not gated"
        assert row["baseline"]["prediction_sd"] >= 2**0.5 * 0.005 and row["baseline"]["spread_assumed"] == "session"


def test_a_baseline_claiming_one_and_a_half_times_the_bandwidth_is_a_regression(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch, n=8, sessions=True)
    _scale(pytester.path / "baselines" / "cpu.json", 1.5)
    monkeypatch.setenv("SIM_RUN", "5")
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["REGRESSION: copy on cpu:0->cpu:1 at 64 KiB: 3?.?% drop, * vs * GB/s",
                                 "  beyond the 5% tolerance of baseline cpu: bandwidth is 0.6*x of the baseline, "
                                 "bounds [[]*[]] at *"])
    # a case decided as a regression is not listed as not gated
    result.stdout.fnmatch_lines(["gpucomm verdicts: 2 REGRESSION", "gpucomm sensitivity: * of 2 cases *"])
    result.stdout.no_fnmatch_line("  not gated: *")


def test_a_one_session_baseline_never_fails_a_case_on_one_run_of_today(pytester, monkeypatch):
    # the same 1.5 x claim against a baseline of one session: its spread between sessions is assumed, and the
    # re-measure (in the test's process here, no new process state) is no second run: no evidence, no alarm
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch)
    _scale(pytester.path / "baselines" / "cpu.json", 1.5)
    monkeypatch.setenv("SIM_RUN", "5")
    report = pytester.path / "gpucomm.json"
    result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", *FAST)
    result.assert_outcomes(passed=2)
    for row in json.loads(report.read_text())["rows"]:
        assert row["status"] == "not gated" and row["baseline"]["ratio"] < 0.7
        assert row["baseline"]["spread_assumed"] and row["baseline"]["runs_pooled"] == 1


def test_a_baseline_claiming_half_the_bandwidth_reports_improved_and_passes(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch)  # real CPU runs may be too far apart to gate (not gated)
    _scale(pytester.path / "baselines" / "cpu.json", 0.5)
    monkeypatch.setenv("SIM_RUN", "6")
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["copy, cpu:0->cpu:1 (test_copy[[]0->1[]])", "  64 KiB*improved",
                                 "gpucomm verdicts: 2 improved"])


def test_the_tolerance_keyword_of_the_bandwidth_marker_overrides_the_default(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import bandwidth

        @bandwidth(size="64KiB", tolerance=0.95)
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair)
        """
    )
    path = _save_runs(pytester, 3)
    _scale(path, 3.0)
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(passed=2)


def test_a_case_missing_from_the_baseline_is_new_and_fails_only_when_strict(pytester):
    pytester.makepyfile(TEST_FILE)
    _save_runs(pytester, 1)
    pytester.makepyfile(test_other="""
        def test_more(gpu_pair, comm):
            comm.copy(gpu_pair, 4096)
        """)
    result = pytester.runpytest("test_other.py", "--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["gpucomm verdicts: 2 new"])
    result = pytester.runpytest("test_other.py", "--gpu-baseline=cpu", "--gpu-baseline-strict", *FAST)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["NEW (--gpu-baseline-strict): copy on cpu:0->cpu:1 at 4 KiB: not in the baseline",
                                 "  no entry for test_other.py::test_more*in *cpu.json*"])


def test_saving_keeps_cases_not_run_and_at_most_k_runs(pytester):
    pytester.makepyfile(TEST_FILE)
    pytester.makepyfile(test_other="""
        def test_more(gpu_pair, comm):
            comm.copy(gpu_pair, 4096)
        """)
    path = _save_runs(pytester, 3, "--gpu-baseline-runs=2")
    doc = json.loads(path.read_text())
    assert len(doc["cases"]) == 4 and doc["max_runs"] == 2
    assert [len(c["runs"]) for c in doc["cases"].values()] == [2, 2, 2, 2]  # the oldest of 3 runs dropped
    pytester.runpytest("test_other.py", "--gpu-baseline=cpu", "--gpu-baseline-save", "--gpu-baseline-runs=2",
                       *FAST).assert_outcomes(passed=2)
    doc = json.loads(path.read_text())
    assert len(doc["cases"]) == 4  # the cases of the file not run this time are kept
    assert [len(c["runs"]) for c in doc["cases"].values()] == [2, 2, 2, 2]
    assert len(doc["runs"]) == 3  # run records still referenced by some case


def test_an_unknown_baseline_name_is_a_usage_error_listing_the_available_ones(pytester):
    pytester.makepyfile(TEST_FILE)
    _save_runs(pytester, 1)
    result = pytester.runpytest("--gpu-baseline=mi301", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-baseline=mi301: no baseline named 'mi301'*available baselines: cpu*"])


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"schema": "pytest-gpucomm-baseline", "schema_version": 1, "name": ', "*truncated*"),
        ("{not json", "*invalid JSON*"),
        ('{"schema": "something-else", "schema_version": 1}', "*not a pytest-gpucomm baseline*"),
        ('{"schema": "pytest-gpucomm-baseline", "schema_version": 99, "name": "cpu", "source": "measured", '
         '"max_runs": 5, "runs": [], "cases": {}}', "*schema_version 99*upgrade pytest-gpucomm*"),
        ('{"schema": "pytest-gpucomm-baseline", "schema_version": 1, "name": "cpu", "source": "measured", '
         '"max_runs": 5, "runs": []}', "*cases*"),
    ],
    ids=["truncated", "corrupt", "wrong-schema", "newer-version", "missing-field"],
)
def test_a_bad_baseline_file_is_an_error_naming_the_file_and_is_never_overwritten(pytester, content, problem):
    pytester.makepyfile(TEST_FILE)
    bad = pytester.path / "baselines" / "cpu.json"
    bad.parent.mkdir()
    bad.write_text(content)
    for extra in ([], ["--gpu-baseline-save"]):
        result = pytester.runpytest("--gpu-baseline=cpu", *extra, *FAST)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        text = result.stderr.str()
        assert str(bad) in text
        result.stderr.fnmatch_lines([problem])
        assert bad.read_text() == content


def test_header_says_how_many_runs_a_case_has_when_runs_saved_only_some_cases(pytester):
    pytester.makepyfile(TEST_FILE)
    _save_runs(pytester, 2)
    _save_runs(pytester, 1, "-k", "64KiB-1")
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.stdout.fnmatch_lines(["gpucomm baseline: *cpu.json (measured, 3 runs in 1 session, 2 cases*"])
    _save_runs(pytester, 1, "-k", "64KiB-1", "--gpu-baseline-runs=2")
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.stdout.fnmatch_lines(["gpucomm baseline: *cpu.json (measured, 4 runs in 1 session, at most 2 per case, "
                                 "2 cases*"])


def test_saving_needs_a_baseline_name(pytester):
    pytester.makepyfile(TEST_FILE)
    result = pytester.runpytest("--gpu-baseline-save", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-baseline-save needs --gpu-baseline=NAME|PATH|auto*"])


def test_a_baseline_path_and_a_baseline_dir_are_accepted(pytester):
    pytester.makepyfile(TEST_FILE)
    target = pytester.path / "elsewhere" / "mine.json"
    result = pytester.runpytest(f"--gpu-baseline={target}", "--gpu-baseline-save", *FAST)
    assert result.ret == 0 and target.exists()
    result = pytester.runpytest("--gpu-baseline=mine", f"--gpu-baseline-dir={target.parent}", *FAST)
    result.stdout.fnmatch_lines([f"gpucomm baseline: {target} (measured, 1 run in 1 session, 2 cases*"])


def test_reports_carry_the_verdicts_json_junit_and_pytest_benchmark(pytester):
    pytester.makepyfile(TEST_FILE)
    _save_runs(pytester, 2)
    report = pytester.path / "r" / "gpucomm.json"
    bench = pytester.path / "r" / "bench.json"
    junit = pytester.path / "r" / "junit.xml"
    pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", f"--gpucomm-benchmark-json={bench}",
                       f"--junitxml={junit}", *FAST)
    doc = json.loads(report.read_text())
    row = doc["rows"][0]
    assert row["status"] in ("ok", "not gated", "improved", "REGRESSION")
    assert row["baseline"]["baseline_gbps"] > 0 and row["baseline"]["ratio"] > 0
    assert "p_value" not in row["baseline"] and isinstance(row["baseline"]["remeasured"], int)
    assert row["baseline"]["group"] == "copy" and 0 < row["baseline"]["detectable_drop"]
    assert doc["baseline"]["comparisons"] == 2
    common = doc["baseline"]["common"]["copy"]  # how far the common offset moved over the 2 runs of 1 session
    assert (common["runs"], common["sessions"]) == (2, 1) and common["sd"] > 0 and common["df"] > 0
    assert row["baseline"]["log_ratio"] == pytest.approx(math.log(row["baseline"]["ratio"]))
    levels = doc["baseline"]["levels"]
    [klass] = levels["classes"]
    assert klass["name"] == "copies between GPUs <= 1 MiB" and klass["status"] == "not judged"
    assert klass["text"].endswith("2 cases, fewer than 5") and levels["bands"] == []
    assert sorted(c["cases"][0] for c in levels["cases"]) == sorted(r["baseline"]["case"] for r in doc["rows"])
    assert levels["shares"] == {"case": 0.1, "class": 0.4, "band": 0.25, "residual": 0.25}
    assert row["baseline"]["residual"]["level"] == "case"
    xml = junit.read_text()
    assert 'name="gpucomm.copy.65536.status"' in xml and 'name="gpucomm.copy.65536.ratio"' in xml
    b = json.loads(bench.read_text())
    assert len(b["benchmarks"]) == 2 and b["benchmarks"][0]["stats"]["rounds"] == len(row["samples_s"])
    out = subprocess.run([sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())",
                          "compare", str(bench)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "test_copy[64KiB-0->1]" in out.stdout


def _pid_task(pytester):
    """A rank task `pid_tasks:pid` that returns the worker's pid (a restarted group has new pids)."""
    pytester.makepyfile(pid_tasks="import os\n\ndef pid(ctx):\n    return os.getpid()\n")


@pytest.mark.slow
def test_a_flagged_collective_is_measured_again_on_a_fresh_process_group(pytester):
    _pid_task(pytester)
    pytester.makepyfile(
        """
        import json

        SEEN = []

        def test_all_reduce(process_group, comm):
            SEEN.append(process_group.run("pid_tasks:pid"))
            comm.all_reduce(process_group, 4096)

        def test_after(process_group):
            SEEN.append(process_group.run("pid_tasks:pid"))
            open("pids.json", "w").write(json.dumps(SEEN))
        """
    )
    pytester.syspathinsert()
    # no single ops: a tail comparison would halve the median's level, and on a loaded runner a one-run
    # baseline with a CV over 100 % then catches no drop short of 100 % ("not gated")
    assert pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-tail-time=0", *FAST).ret == 0
    # far beyond any CPU noise, even on a loaded runner (one baseline run): a one-session baseline's spread is
    # assumed, so today's samples are its floor, and a loaded CI runner's 4 KiB gloo samples spread by 125 % (CV);
    # at the quantile of few degrees of freedom that hid a 1e6 x drop once (CI, both tiers side by side)
    _scale(pytester.path / "baselines" / "cpu.json", 1e30)
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpucomm-tail-time=0", *FAST)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["REGRESSION: all_reduce on 2 ranks (gloo) at 4 KiB: *",
                                 "  first run * GB/s (*x), measured again: * GB/s (*x) *"])
    first, second = json.loads((pytester.path / "pids.json").read_text())
    assert set(first).isdisjoint(second)  # the re-measure restarted the ranks


@pytest.mark.slow
def test_only_the_first_max_fresh_remeasures_of_a_session_restart_the_process_group(pytester, monkeypatch):
    monkeypatch.setattr(vocab, "MAX_FRESH_REMEASURES", 3)
    _pid_task(pytester)
    pytester.makepyfile(
        """
        import json

        import pytest

        SEEN = []

        @pytest.mark.parametrize("n", [1024, 2048, 4096, 8192, 16384])
        def test_all_reduce(process_group, comm, n):
            SEEN.append(process_group.run("pid_tasks:pid"))
            comm.all_reduce(process_group, n)

        def test_after(process_group):
            SEEN.append(process_group.run("pid_tasks:pid"))
            open("pids.json", "w").write(json.dumps(SEEN))
        """
    )
    pytester.syspathinsert()
    assert pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-tail-time=0", *FAST).ret == 0
    _scale(pytester.path / "baselines" / "cpu.json", 1e30)  # every case is flagged and re-measured (as above)
    report = pytester.path / "gpucomm.json"
    result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", "--gpucomm-tail-time=0", *FAST)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # a case is measured again once, or twice when the pooled runs are still undecided (noisy CPU timings):
    # the first 3 re-measures of the session, in test order, draw a new group, the others do not
    fresh = [[a["fresh"] for a in row["baseline"]["remeasures"]]
             for row in json.loads(report.read_text())["rows"] if row["test"].split("::")[-1].startswith("test_all")]
    assert len(fresh) == 5 and all(fresh)
    flat = [f for case in fresh for f in case]
    assert flat == [True] * 3 + [False] * (len(flat) - 3)
    seen = [tuple(p) for p in json.loads((pytester.path / "pids.json").read_text())]
    changed = [seen[i] != seen[i + 1] for i in range(len(seen) - 1)]
    assert changed == [any(case) for case in fresh]  # a fresh re-measure restarted the ranks, no other did


# --- what the gate can catch, and the session's common shift ---------------------------------------------


def _scale_runs(path, factors):
    """Scale each baseline run of every case by its own factor (run i by factors[i])."""
    doc = json.loads(path.read_text())
    for case in doc["cases"].values():
        for run, f in zip(case["runs"], factors):
            run["samples_gbps"] = [x * f for x in run["samples_gbps"]]
            run["summary"]["median_gbps"] *= f
    path.write_text(json.dumps(doc))


def test_a_baseline_whose_runs_differ_widely_is_not_gated_and_fails_as_NOT_GATED_only_when_strict(
        pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch, sessions=True)
    _scale_runs(pytester.path / "baselines" / "cpu.json", [0.85, 1.0, 1.15])
    monkeypatch.setenv("SIM_RUN", "4")
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "copy, cpu:0->cpu:1 (test_copy[[]0->1[]])",
        "  64 KiB*not gated",
        "gpucomm verdicts: 2 not gated",
        "gpucomm sensitivity: gated (a drop of 2x the tolerance caught 99% of the time): 0 of 2 cases *",
        "  not gated: test_*.py::test_copy[[]64KiB-0->1[]]: catches drops of *% or more (3 baseline runs in 3 "
        "sessions)",
        "  fix: record more baseline runs, in more sessions*--gpu-baseline-save; or raise --gpu-tolerance",
    ])
    strict = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-strict", *FAST)
    strict.assert_outcomes(failed=2)
    strict.stdout.fnmatch_lines(["NOT GATED (--gpu-baseline-strict): copy on cpu:0->cpu:1 at 64 KiB: catches only "
                                 "drops of *% or more", "  bandwidth is *only catches drops of *% or more*",
                                 "gpucomm verdicts: 2 NOT GATED"])


# Eight cases whose own tolerance (50 %) no common drift crosses: only the session's shift can fail the run.
MANY_CASES_FILE = """
import pytest
from pytest_gpucomm import bandwidth

@pytest.mark.parametrize("i", range(8))
@bandwidth(size="64KiB", tolerance=0.5)
def test_copy(gpu_pair, comm, i):
    comm.copy(gpu_pair)
"""


@pytest.mark.parametrize("claim, slower, fails", [(1.10, "9.*", True), (1.02, "*", False)], ids=["10%", "2%"])
def test_a_baseline_claiming_more_bandwidth_for_every_case_is_a_common_shift(pytester, monkeypatch, claim,
                                                                              slower, fails):
    pytester.makepyfile(MANY_CASES_FILE)
    _save_simulated_runs(pytester, monkeypatch, n=4, sessions=True)
    _scale(pytester.path / "baselines" / "cpu.json", claim)
    monkeypatch.setenv("SIM_RUN", "9")
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpucomm-json=report.json", *FAST)
    result.assert_outcomes(passed=16)  # no single case crosses its 50 % tolerance
    # the small class is judged by its median and by its steady offset (levels.STEADY_NAME), each at half its level
    line = f"gpucomm REGRESSION (class offset) copies between GPUs <= 1 MiB: {slower}% slower (16 cases)"
    steady = (f"gpucomm REGRESSION (class offset) copies between GPUs <= 1 MiB, {STEADY_NAME}: {slower}% slower "
              "(16 cases)")
    failed_note = ("gpucomm: FAILED: 2 regressions at the gate's levels (the 'gpucomm REGRESSION' lines above): "
                   "the exit status is 1 though their cases' tests may pass")
    bound = (f"    upper bound *x at level {0.01 * LEVEL_SHARES['class'] / 2:.2g} (quantile *, * df) is below the 5% "
             "tolerance limit 0.95x")
    if fails:
        result.stdout.fnmatch_lines(["gpucomm levels: 2 class offsets: * 2 REGRESSION", line, bound,
                                     "    covers *test_copy[[]0->1-0[]]", steady, bound, failed_note])
        # what fails the session is in pytest's own final line, beside the tests that passed
        result.stdout.fnmatch_lines(["*= 16 passed, *2 gpucomm level regressions in *"])
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        # the rows the class covers are regressions in the report, though each test passed on its own
        doc = json.loads((pytester.path / "report.json").read_text())
        assert {r["baseline"]["status"] for r in doc["rows"]} == {"REGRESSION"}
        assert all(r["baseline"]["levels"][0]["level"] == "class" for r in doc["rows"])
        # each row's message: the level's heading, the level's own bound under it, the case's own verdict last
        for r in doc["rows"]:
            head, bound_1, bound_2, own, *_ = r["baseline"]["message"].split("\n")
            assert head.startswith("REGRESSION (class offset) copies between GPUs <= 1 MiB: ")
            for b in (bound_1, bound_2):
                assert b.startswith("  class offset: upper bound ") and "is below the 5% tolerance limit" in b
            assert own.startswith("  the case's own verdict (ok): ")
        # a recording run reports the same, but records rather than judges: it does not fail
        recording = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", *FAST)
        recording.stdout.fnmatch_lines([line])
        recording.stdout.no_fnmatch_line(failed_note)
        recording.stdout.no_fnmatch_line("*gpucomm level regression*")
        assert recording.ret == pytest.ExitCode.OK
    else:
        result.stdout.fnmatch_lines(["gpucomm levels: 2 class offsets: * gated, *each",
                                     "gpucomm levels: 16 case residuals: *"])
        result.stdout.fnmatch_lines(["*= 16 passed*in *"])  # a warning of the host's pytest may stand between
        result.stdout.no_fnmatch_line("*gpucomm level regression*")
        result.stdout.no_fnmatch_line("*REGRESSION*")
        assert result.ret == pytest.ExitCode.OK


def test_the_terminal_summary_the_json_report_and_the_html_page_give_one_count_of_gated_per_level(pytester,
                                                                                                  monkeypatch):
    """Once, the sensitivity line counted the cases' own verdicts as "cases gated" and the levels' line
    counted the residuals as "cases: N gated" (16 and 0 on this run); now each level has its one count, the
    same in the three views."""
    from pytest_gpucomm.report.html import html_page
    from pytest_gpucomm.report.html_parts import esc
    from pytest_gpucomm.report.run import GatedCounts

    pytester.makepyfile(MANY_CASES_FILE)
    _save_simulated_runs(pytester, monkeypatch, n=4, sessions=True)
    _scale(pytester.path / "baselines" / "cpu.json", 1.02)
    monkeypatch.setenv("SIM_RUN", "9")
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpucomm-json=report.json", *FAST)
    doc = json.loads((pytester.path / "report.json").read_text())
    counts = GatedCounts.from_dict(doc["baseline"]["gated"])
    levels = doc["baseline"]["levels"]
    # the JSON's count is its levels' and its rows'
    assert counts.levels == {k: (sum(bool(v["gated"]) for v in levels[group] if v["status"] != "not judged"),
                                 sum(v["status"] != "not judged" for v in levels[group]))
                             for k, group in (("class", "classes"), ("band", "bands"), ("case", "cases"))}
    assert counts.own == sum(bool(r["baseline"]["gated"]) for r in doc["rows"]) and counts.cases == 16
    terminal = " ".join(line.strip() for line in result.stdout.lines)
    assert f"gpucomm sensitivity: {counts.text()};" in terminal
    gated, judged = counts.levels["case"]
    assert f"gpucomm levels: {judged} case residuals: {gated} gated," in terminal
    assert esc(counts.text()) in html_page(doc, with_plots=False)


@pytest.mark.slow
def test_under_xdist_the_controller_reads_the_baseline_and_judges_the_levels_over_every_workers_cases(
        pytester, monkeypatch):
    pytest.importorskip("xdist")
    pytester.makepyfile(MANY_CASES_FILE)
    _save_simulated_runs(pytester, monkeypatch, n=4, sessions=True)
    # 20 % more claimed: beyond what 4 sessions of one run each (3 degrees of freedom) leave unresolved
    _scale(pytester.path / "baselines" / "cpu.json", 1.20)
    monkeypatch.setenv("SIM_RUN", "9")
    # the controller, which judges the levels, in this process; the workers are processes of their own
    result = pytester.runpytest_inprocess("--gpu-baseline=cpu", "--gpucomm-json=report.json", "-n", "2", *FAST)
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["gpucomm REGRESSION (class offset) copies between GPUs <= 1 MiB: 1*% slower (16 "
                                 "cases)", "gpucomm: FAILED: * at the gate's levels*",
                                 "*= 16 passed, *gpucomm level regression* in *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    doc = json.loads((pytester.path / "report.json").read_text())
    assert len(doc["baseline"]["levels"]["classes"][0]["cases"]) == 16


def test_a_saved_run_carries_a_session_label_and_GPUCOMM_BASELINE_SESSION_overrides_it(pytester, monkeypatch):
    import re

    pytester.makepyfile(TEST_FILE)
    monkeypatch.delenv("GPUCOMM_BASELINE_SESSION", raising=False)
    path = _save_runs(pytester, 1)
    [run] = json.loads(path.read_text())["runs"]
    assert re.fullmatch(r".+-([0-9a-f]{8}|noboot)-\d{4}-\d{2}-\d{2}", run["session"]), run["session"]
    assert run["session"].endswith(run["date"][:10])  # the UTC day of the run
    monkeypatch.setenv("GPUCOMM_BASELINE_SESSION", "ci-nightly-42")
    _save_runs(pytester, 1)
    runs = json.loads(path.read_text())["runs"]
    assert [r["session"] for r in runs] == [run["session"], "ci-nightly-42"]
    result = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    result.stdout.fnmatch_lines(["gpucomm baseline: *cpu.json (measured, 2 runs in 2 sessions, 2 cases*"])


def test_a_recording_run_leaves_out_figures_of_0_and_says_so(pytester):
    """A collective of one rank (@world(1)) has busbw 0: a baseline keeps positive figures only, so its case is
    left out of the save, with a note, and the run's other cases are saved."""
    pytester.makepyfile(test_one="""
        from pytest_gpucomm import sizes, world

        @world(1)
        @sizes("4KiB")
        def test_one_rank(process_group, size, comm):
            comm.all_reduce(process_group, size)

        @sizes("4KiB")
        def test_pair(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)
        """)
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-tail-time=0", *FAST)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["gpucomm: 1 of this run's 3 measurements are not saved to *cpu.json: their figure is "
                                 "0 GB/s (a collective of one rank has busbw 0), nothing to gate",
                                 "gpucomm: saved 2 cases of this run *"])
    cases = json.loads((pytester.path / "baselines" / "cpu.json").read_text())["cases"]
    assert sorted(k.split("|")[0] for k in cases) == ["test_one.py::test_pair[4KiB-0->1]",
                                                       "test_one.py::test_pair[4KiB-1->0]"]


# --- folds: small collectives measured in several process groups before their verdict ---------------------

FOLD_CONFTEST = """
import json

import pytest

from pytest_gpucomm.plugin.pools import RankPools

_fold_group = RankPools.fold_group


@pytest.fixture(autouse=True, scope="session")
def record_fold_groups():
    seen = []

    def fold_group(self, group, i):
        fg = _fold_group(self, group, i)
        seen.append([i, group.run("pid_tasks:pid"), fg.run("pid_tasks:pid")])
        return fg

    RankPools.fold_group = fold_group
    yield
    RankPools.fold_group = _fold_group
    open("folds.json", "w").write(json.dumps(seen))
"""


def test_a_small_collective_is_measured_in_folds_of_their_own_groups_and_judged_on_them_pooled(pytester):
    from pytest_gpucomm import cli

    _pid_task(pytester)
    pytester.makeconftest(FOLD_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [4096, 2 << 20])
        def test_all_reduce(process_group, comm, n):
            comm.all_reduce(process_group, n)
        """
    )
    pytester.syspathinsert()
    assert pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-tail-time=0", *FAST).ret == 0
    assert json.loads((pytester.path / "folds.json").read_text()) == []  # nothing to judge: no folds
    report = pytester.path / "gpucomm.json"
    result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", "--gpucomm-tail-time=0",
                                "--gpucomm-folds=3", "--gpu-tolerance=0.95", *FAST)  # no verdict on CPU noise
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*folds=3*"])
    rows = {row["size_bytes"]: row["baseline"] for row in json.loads(report.read_text())["rows"]}
    small, large = rows[4096], rows[2 << 20]
    assert small["folds"] == 3 and len(small["fold_runs"]) == 2 and small["runs_pooled"] >= 3
    assert "measured in 3 process groups" in small["message"]
    assert large["folds"] == 1 and large["fold_runs"] == []  # above 1 MiB: measured once
    folds = json.loads((pytester.path / "folds.json").read_text())
    assert [i for i, _, _ in folds] == [1, 2]
    (_, main, fold2), (_, main_again, fold3) = folds
    assert main == main_again  # the session's group, not restarted by the folds
    groups = [set(main), set(fold2), set(fold3)]  # each fold in a group of its own ranks
    assert all(len(g) == 2 for g in groups) and len(set.union(*groups)) == 6
    # offline, the report's folds are judged again as they were measured
    out = pytester.path / "compared.json"
    assert cli.main(["compare", str(pytester.path / "baselines" / "cpu.json"), str(report), "--json", str(out),
                     "--no-curves"], out=open(pytester.path / "compare.txt", "w")) == 0
    again = {row["size_bytes"]: row["baseline"] for row in json.loads(out.read_text())["rows"]}
    assert again[4096]["folds"] == 3 and again[4096]["ratio"] == pytest.approx(small["ratio"])
    assert again[2 << 20]["folds"] == 1


def test_one_fold_measures_every_case_once_and_a_bad_fold_count_is_refused_naming_it(pytester):
    _pid_task(pytester)
    pytester.makeconftest(FOLD_CONFTEST)
    pytester.makepyfile("def test_all_reduce(process_group, comm):\n    comm.all_reduce(process_group, 4096)\n")
    pytester.syspathinsert()
    assert pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-tail-time=0", *FAST).ret == 0
    report = pytester.path / "gpucomm.json"
    assert pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", "--gpucomm-tail-time=0",
                              "--gpucomm-folds=1", "--gpu-tolerance=0.95", *FAST).ret == 0
    [row] = json.loads(report.read_text())["rows"]
    assert row["baseline"]["folds"] == 1 and json.loads((pytester.path / "folds.json").read_text()) == []
    for bad in ("0", "9", "two"):
        result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-folds={bad}", *FAST)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*invalid --gpucomm-folds {bad!r} (from the command line): expected a whole "
                                     "number from 1 (no folds) to 8*"])


def test_a_run_that_judged_fewer_than_half_its_cases_says_so_first_and_last_and_fails_with_min_judged(
        pytester, monkeypatch):
    # a baseline of one session on the CPU variants: no file of this hardware, no prior: nothing can be judged
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch)
    monkeypatch.setenv("SIM_RUN", "3")
    report, junit = pytester.path / "gpucomm.json", pytester.path / "junit.xml"
    result = pytester.runpytest("--gpu-baseline=cpu", f"--gpucomm-json={report}", f"--junitxml={junit}", *FAST)
    assert result.ret == 0  # the default: said, not failed
    lines = result.stdout.lines
    first = lines.index(next(line for line in lines if "gpucomm results" in line)) + 1
    assert lines[first].startswith("gpucomm gate: NOT JUDGED: only 0 of 2 cases could be judged against baseline cpu")
    # the session's last line, after pytest's counts
    assert lines[-1].startswith("gpucomm: NOT JUDGED: 0 of 2 cases judged against baseline cpu; record runs on other "
                                "boots or days") and "2 passed" in lines[-2]
    cov = json.loads(report.read_text())["baseline"]["coverage"]
    assert cov == {"judged": 0, "cases": 2, "share": 0.0, "not_gated_assumed": 2, "not_gated_wide": 0, "new": 0,
                   "fewer_than_half": True}
    text = junit.read_text()
    assert '<property name="gpucomm.judged" value="0" />' in text and 'name="gpucomm.not_judged" value="yes"' in text
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-min-judged=0.5", *FAST)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["gpucomm: FAILED: 0 of 2 cases judged, fewer than --gpu-min-judged=0.5 of them *",
                                 # what fails the session, counted in pytest's own final line
                                 "*= 2 passed, *2 gpucomm cases not judged in *"])
    result.assert_outcomes(passed=2)  # the tests pass; the session does not


def test_a_bad_min_judged_is_a_usage_error_naming_the_value(pytester):
    pytester.makepyfile(TEST_FILE)
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-min-judged=1.5")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*invalid --gpu-min-judged '1.5' (from the command line): expected a share of the "
                                 "cases from 0 to 1*"])


def test_a_prior_file_that_cannot_be_read_is_a_usage_error_naming_it(pytester):
    pytester.makepyfile(TEST_FILE)
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-prior=gone.json")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*invalid --gpu-baseline-prior 'gone.json' (from the command line): gone.json: spread "
                                 "prior file does not exist*"])
    (pytester.path / "bad.json").write_text('{"schema": "x"}')
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-baseline-prior=bad.json")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*the spread prior bad.json is not a valid spread prior: its schema is 'x'*"])

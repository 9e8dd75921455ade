"""The calibration report: sessions, leave-one-session-out A/A and detection, the fitted model, the table."""

import json

import numpy as np
import pytest

from pytest_gpucomm.gate import calibration as cal
from pytest_gpucomm.gate.cases import CaseRecord
from pytest_gpucomm.gate.store import save_run
from pytest_gpucomm.units import size_token


def _write(path, sessions, *, n_cases=6, n=60, within=0.005, run_sd=0.003, offsets=None, seed=3, labels=True,
           fingerprint=None, first_run=0, scale=100.0):
    """A baseline of ``sessions`` (runs per session), a day apart, runs a minute apart; collective cases
    of 2 MiB and up with iid log-normal samples around 100 GB/s and a run offset of ``run_sd``;
    ``offsets[s]`` shifts every case of session s.  ``labels``: runs carry their session label."""
    rng = np.random.default_rng(seed)
    run = first_run
    for s, k in enumerate(sessions):
        for j in range(k):
            run += 1
            date = f"2026-11-{10 + s:02d}T10:{j:02d}:00+00:00"
            off = (offsets or {}).get(s, 0.0)
            cases = {}
            for c in range(n_cases):
                loc = off + rng.normal(0, run_sd)
                size = (2 << 20) << c  # one sweep: its sizes above 1 MiB are one op band
                rec = CaseRecord(test_id=f"t.py::test[{size_token(size)}]", op="all_reduce", size_bytes=size,
                                 world_size=2, samples_gbps=list(scale * np.exp(loc + rng.normal(0, within, n))),
                                 dtype="float32")
                cases[rec.key] = rec
            save_run(path, name="x", run_id=f"r{run}", date=date, fingerprint=dict(fingerprint or {}), cases=cases,
                     max_runs=50, session=f"s{s}{'' if first_run == 0 else f'-{first_run}'}" if labels else None)
    return path


def _load(path):
    cases, dates, labels = cal.load_cases(path)
    return cases, cal.sessions_of(dates, 10, labels)


def test_session_labels_decide_and_unlabelled_runs_further_apart_than_the_gap_start_a_new_session():
    dates = {"a": "2026-11-01T10:00:00+00:00", "b": "2026-11-01T10:05:00+00:00", "c": "2026-11-01T11:00:00+00:00"}
    assert cal.sessions_of(dates, 10) == {"a": 0, "b": 0, "c": 1}
    assert cal.sessions_of(dates, 1) == {"a": 0, "b": 1, "c": 2}
    assert cal.sessions_of(dates, 10, {"a": "x", "b": "y", "c": "x"}) == {"a": 0, "b": 1, "c": 0}


def test_steady_runs_give_no_false_alarm_and_a_20_percent_drop_is_caught(tmp_path):
    cases, session = _load(_write(tmp_path / "b.json", [3, 3, 3, 3]))
    out = cal.loso(cases, session, (0.03, 0.20))
    assert out["sessions"] == 4 and out["suites"] == 12
    assert out["false_alarm_suites"] == 0 and set(out["level_false_alarm_suites"].values()) == {0}
    assert set(out["level_false_alarm_suites"]) == {"case", "class", "band", "residual"}
    assert out["detection_all"]["20%"] == 1.0 and out["uniform_detection"]["20%"] == 1.0
    assert out["detection_all"]["3%"] == 0.0 and out["uniform_detection"]["3%"] == 0.0
    # six sizes of one sweep above 1 MiB: one op band, dropped 10 % in every suite
    assert out["one_band_judged"] == 12 and out["one_band_10pct"] == 1.0
    assert out["one_case_judged"] == 0  # per case only when asked (per_case_every)
    every = cal.loso(cases, session, (0.20,), per_case_every=1)
    assert every["one_case_judged"] == 12 * 6 and every["one_case_10pct"] is not None


def test_a_held_out_session_far_off_the_others_is_a_false_alarm(tmp_path):
    cases, session = _load(_write(tmp_path / "b.json", [3, 3, 3, 3], offsets={3: np.log(0.8)}))
    out = cal.loso(cases, session, (0.10,))
    assert out["false_alarm_suites"] == 3
    assert {s["session"] for s in out["per_suite"] if s["false_alarm"]} == {3}


def test_noisy_runs_are_reported_as_not_gated_with_the_drop_they_catch(tmp_path):
    cases, session = _load(_write(tmp_path / "b.json", [2, 2, 2], run_sd=0.05))
    out = cal.loso(cases, session, (0.10,))
    assert out["not_gated_share"] == 1.0 and out["detectable_drop"]["median"] > 0.10
    assert out["detection_gated"]["10%"] is None  # no gated case to count


def test_the_fit_finds_the_run_spread_and_the_common_offset(tmp_path):
    cases, session = _load(_write(tmp_path / "b.json", [3, 3, 3], run_sd=0.02, n_cases=12))
    model = cal.fit_model(cases, session)
    run_sd = np.median([f["run_sd"] for f in model["cases"].values()])
    assert run_sd == pytest.approx(0.02, rel=0.4)
    assert model["common_sd"]["collective"] < 0.02  # independent run offsets mostly cancel in the median


def test_the_simulation_of_steady_runs_raises_no_alarm_and_catches_big_drops(tmp_path):
    cases, session = _load(_write(tmp_path / "b.json", [2, 2, 2], n_cases=4))
    sim = cal.simulate(cases, session, cal.fit_model(cases, session), suites=4, drops=(0.2,))
    assert sim["suites"] == 4 and sim["false_alarm_suites"] == 0 and sim["detection_all"]["20%"] == 1.0


def test_the_command_prints_the_figures_the_table_and_writes_json(tmp_path, capsys):
    base = _write(tmp_path / "b.json", [2, 2, 2], n_cases=3)
    assert cal.main([str(base), "--sim-suites", "2", "--table", "--json", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out
    assert "3 measured cases, 6 runs in 3 sessions" in out
    assert "leave-one-session-out: 0 of 6 suites with a false REGRESSION" in out
    assert "alpha 0.2   re-measures 4:" in out
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["sessions"] == 3 and doc["simulation"]["suites"] == 2 and len(doc["table"]) == 9


def test_unlabelled_runs_are_grouped_by_the_gap(tmp_path, capsys):
    base = _write(tmp_path / "b.json", [2, 2], n_cases=2, labels=False)
    assert cal.main([str(base), "--sim-suites", "0"]) == 0
    assert "4 runs in 2 sessions (0 runs labelled" in capsys.readouterr().out


def test_the_command_names_a_bad_file_and_bad_arguments(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cal.main([str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    for args, word in ((["--drops", "0,150"], "--drops '0,150'"), (["--alpha", "2"], "--alpha 2.0"),
                       (["--remeasures", "-1"], "--remeasures -1"), (["--tolerance", "0"], "--tolerance 0.0")):
        with pytest.raises(SystemExit):
            cal.main([str(bad), *args])
        assert word in capsys.readouterr().err


def test_a_file_of_two_machines_is_calibrated_one_machine_at_a_time_on_its_own_runs(tmp_path, capsys):
    """As the plugin judges (gate.machines): a machine's runs against its own sessions only.  The second machine
    runs 30 % slower: pooled into one case, the two would pass for a 30 % spread between sessions."""
    path = tmp_path / "b.json"
    two = {"kind": "gpu", "model": "GPU X", "count": 2, "topology": {"0-1": "NV18"}}
    one = {"kind": "gpu", "model": "GPU X", "count": 1}
    _write(path, [3, 3, 3], fingerprint=two)
    _write(path, [3, 3], fingerprint=one, first_run=100, scale=70.0, seed=4)
    machines = cal.machines_of(path)
    assert [(m.describe(), n) for m, n in machines] == [("2 x GPU X linked NV18", 9), ("1 x GPU X", 6)]
    cases, dates, labels = cal.load_cases(path, machines[1][0])
    assert sorted(dates) == [f"r{i}" for i in range(101, 107)] and all(len(c.runs) == 6 for c in cases)
    assert cal.main([str(path), "--sim-suites", "0", "--json", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out
    assert out.index("machine 2 x GPU X linked NV18: its runs only") < out.index("machine 1 x GPU X: its runs only")
    assert "9 runs in 3 sessions" in out and "6 runs in 2 sessions" in out
    doc = json.loads((tmp_path / "o.json").read_text())
    assert [m["machine"] for m in doc["machines"]] == ["2 x GPU X linked NV18", "1 x GPU X"]
    for m in doc["machines"]:  # each machine steady on its own: no false alarm, a 20 % drop caught
        loso = m["leave_one_session_out"]
        assert loso["false_alarm_suites"] == 0 and loso["uniform_detection"]["20%"] == 1.0
    pooled = cal.loso(*_pooled(path), (0.20,))
    assert pooled["not_gated_share"] > doc["machines"][0]["leave_one_session_out"]["not_gated_share"]


def _pooled(path):
    cases, dates, labels = cal.load_cases(path)
    return cases, cal.sessions_of(dates, 10, labels)


def test_a_10_percent_drop_of_the_small_copies_between_gpus_alone_fails_a_held_out_day_of_the_shipped_file():
    """Issue 45 item 2, on the shipped 2 x H200 runs: the last session held out, its first run judged against the
    other four sessions with every copy between GPUs up to 1 MiB 10 % slower, the rest as it was.  The class
    offset catches it (before the prior across the small classes it had 2.9 degrees of freedom, quantile 15.8,
    and passed); the same run unchanged passes."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "baselines" / "h200.json"
    shape = next(s for s, _ in cal.machines_of(path) if s.count == 2)
    cases, dates, labels = cal.load_cases(path, shape)
    session = cal.sessions_of(dates, 30, labels)
    last = max(session.values())
    train = {c.key: [r for r in c.runs if session[r] != last] for c in cases}
    models = cal.models_of(cases, train, session)
    fit = cal.fit_levels_of(cases, train, models, session)
    held = sorted(r for r in session if session[r] == last)
    judged = [(c.key, *models[c.key], [c.runs[r] for r in held if r in c.runs], c.group)
              for c in cases if held[0] in c.runs and c.key in models]
    counts = cal.new_counts(())
    folds = {c.key: 2 if c.member.klass in cal.FOLDED_CLASSES else 1 for c in cases}
    suite = cal.judge_suite(counts, judged, fit, (), tolerance=0.05, alpha=0.01, max_remeasures=1, folds=folds)
    assert not suite["false_alarm"], suite
    caught = counts["class_drop"]["copies between GPUs <= 1 MiB"]
    assert caught[0.10] == [1, 1] and caught[0.05] == [0, 1], caught

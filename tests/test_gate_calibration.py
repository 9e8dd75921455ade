"""The calibration report: sessions, leave-one-session-out A/A and detection, the fitted model."""

import json

import numpy as np
import pytest

from pytest_gpucomm.gate import calibration as cal
from pytest_gpucomm.gate.store import CaseRecord, save_run


def _write(path, sessions, *, n_cases=6, n=60, within=0.01, offsets=None, seed=3):
    """A baseline of ``sessions`` (runs per session), an hour apart, runs a minute apart; collective cases
    with iid log-normal samples around 100 GB/s; ``offsets[s]`` shifts every case of session s."""
    rng = np.random.default_rng(seed)
    run = 0
    for s, k in enumerate(sessions):
        for j in range(k):
            run += 1
            date = f"2026-11-{10 + s:02d}T10:{j:02d}:00+00:00"
            off = (offsets or {}).get(s, 0.0)
            cases = {}
            for c in range(n_cases):
                rec = CaseRecord(test_id=f"t.py::test[{c}]", op="all_reduce", size_bytes=1024 << c, world_size=2,
                                 samples_gbps=list(100 * np.exp(off + rng.normal(0, within, n))), dtype="float32")
                cases[rec.key] = rec
            save_run(path, name="x", run_id=f"r{run}", date=date, fingerprint={}, cases=cases, max_runs=50)
    return path


def test_runs_further_apart_than_the_gap_start_a_new_session():
    dates = {"a": "2026-11-01T10:00:00+00:00", "b": "2026-11-01T10:05:00+00:00", "c": "2026-11-01T11:00:00+00:00"}
    assert cal.sessions_of(dates, 10) == {"a": 0, "b": 0, "c": 1}
    assert cal.sessions_of(dates, 1) == {"a": 0, "b": 1, "c": 2}


def test_steady_runs_give_no_false_alarm_and_a_20_percent_drop_is_caught(tmp_path):
    cases, dates = cal.load_cases(_write(tmp_path / "b.json", [2, 2, 2]))
    session = cal.sessions_of(dates, 10)
    out = cal.aa_and_detection(cases, session, (0.03, 0.20), cal.default_decide())
    assert out["sessions"] == 3 and len(out["suites"]) == 6
    assert out["false_alarm_suites"] == 0
    assert out["detection"]["20%"] == 1.0
    assert out["detection"]["3%"] < 0.5


def test_a_held_out_session_far_off_the_others_is_a_false_alarm(tmp_path):
    cases, dates = cal.load_cases(_write(tmp_path / "b.json", [2, 2, 2], offsets={2: np.log(0.8)}))
    out = cal.aa_and_detection(cases, cal.sessions_of(dates, 10), (0.10,), cal.default_decide())
    alarms = [s for s in out["suites"] if s["false_alarm"]]
    assert alarms and {s["session"] for s in alarms} == {2}


def test_the_fit_finds_a_common_session_offset_and_the_within_run_spread(tmp_path):
    cases, dates = cal.load_cases(_write(tmp_path / "b.json", [2, 2, 2], within=0.02, offsets={0: 0.03},
                                         n_cases=12))
    model = cal.fit(cases, cal.sessions_of(dates, 10))
    within = np.median([f.within for f in model["cases"].values()])
    assert within == pytest.approx(0.02, rel=0.3)
    offs = model["offsets"]
    assert offs["collective session 0"] > offs["collective session 1"] + 0.02


def test_the_simulation_of_steady_runs_raises_no_alarm_and_catches_big_drops(tmp_path):
    cases, dates = cal.load_cases(_write(tmp_path / "b.json", [2, 2], n_cases=4))
    session = cal.sessions_of(dates, 10)
    sim = cal.simulate(cases, session, cal.fit(cases, session), suites=5, drops=(0.2,), decide=cal.default_decide())
    assert sim["false_alarm_rate"] == 0.0 and sim["detection"]["20%"] == 1.0


def test_the_command_prints_the_figures_and_writes_json(tmp_path, capsys):
    base = _write(tmp_path / "b.json", [2, 2], n_cases=3)
    assert cal.main([str(base), "--sim-suites", "2", "--json", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out
    assert "3 measured cases, 4 runs in 2 sessions" in out and "leave-one-session-out A/A: 0 of 4 suites" in out
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["sessions"] == 2 and doc["simulation"]["suites"] == 2


def test_the_command_names_a_bad_file_and_bad_drops(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cal.main([str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cal.main([str(bad), "--drops", "0,150"])
    assert "--drops '0,150'" in capsys.readouterr().err

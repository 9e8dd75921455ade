"""The curve model of a sweep (``pytest_gpucomm.analysis.curves``): known curves give their figures back or the model
says it cannot tell; grouping into sweeps; the comparison with a baseline's curve; bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_gpucomm.analysis.curves import (
    MAX_RESIDUAL,
    STILL_RISING,
    Sweep,
    SweepPoint,
    compare_curves,
    curve_model,
    curve_report,
    fit_latency_bandwidth,
    interpolation_error,
    sweep_id,
    sweeps,
    sweeps_from_baseline,
    sweeps_from_report,
)
from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.report.terminal import CURVES_HEADING, curve_lines
from pytest_gpucomm.units import GB, format_size

ROOT = Path(__file__).resolve().parents[1]
BY4 = [1024 * 4**k for k in range(11)]  # 1 KiB .. 1 GiB, the suites' sweep


def lb_sweep(a: float, bytes_per_s: float, sizes=BY4, *, factor: float = 1.0, noise: float = 0.0, seed: int = 0,
             op: str = "copy", where: str = "cuda:0->cuda:1", slow: dict | None = None) -> Sweep:
    """A sweep whose median times are a + S / B exactly (times ``exp(N(0, noise))`` when noisy, times
    ``slow[size]`` at the sizes given); the figure is ``factor`` x S / t (busbw / algbw)."""
    rng = np.random.default_rng(seed)
    points = []
    for s in sizes:
        t = (a + s / bytes_per_s) * (math.exp(rng.normal(0.0, noise)) if noise else 1.0) * (slow or {}).get(s, 1.0)
        points.append(SweepPoint(size_bytes=s, median_s=t, gbps=factor * s / t / GB))
    return Sweep(op=op, where=where, points=tuple(points), figure="algbw" if factor == 1.0 else "busbw")


def true_crossing(share: float, peak_gbps: float, a: float, bytes_per_s: float, factor: float = 1.0) -> float:
    """The size at which factor x S / (a + S / B) reaches share x peak: x / (1 + x) = q with x = S / (a B)."""
    q = share * peak_gbps / (factor * bytes_per_s / GB)
    return q / (1 - q) * a * bytes_per_s


# -- known curves ----------------------------------------------------------------------------------------


def test_exact_latency_bandwidth_curve_gives_latency_and_bandwidth_back():
    a, b = 5e-6, 100e9
    model = curve_model(lb_sweep(a, b))
    fit = model.fit
    assert fit.ok and not fit.reason
    assert fit.latency_s == pytest.approx(a, rel=1e-6)
    assert fit.bandwidth_gbps == pytest.approx(100.0, rel=1e-6)
    assert fit.n_half_bytes == pytest.approx(a * b, rel=1e-6)
    assert fit.max_residual < 1e-9 and fit.r2_log == pytest.approx(1.0, abs=1e-12)
    assert model.latency_floor_s == pytest.approx(a + 1024 / b) and model.latency_floor_size == 1024
    assert model.peak_size == 1 << 30 and not model.still_rising
    assert model.peak_efficiency == pytest.approx(model.peak_gbps / 100.0)


def test_busbw_sweep_gives_its_bandwidth_in_busbw():
    # all_reduce on 4 ranks: busbw = 1.5 x algbw; the model's bandwidth is in the table's figure
    fit = fit_latency_bandwidth(lb_sweep(20e-6, 50e9, factor=1.5, op="all_reduce", where="4 ranks (nccl)"))
    assert fit.bandwidth_gbps == pytest.approx(75.0, rel=1e-6)
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-6)


@pytest.mark.parametrize("n_half", [3.1e4, 1e5, 2.9e5, 1e6, 3.3e6, 1.07e7])
def test_exact_curve_shares_are_within_the_stated_interpolation_error(n_half):
    a = 4e-6
    b = n_half / a
    model = curve_model(lb_sweep(a, b))
    for c in model.crossings:
        truth = true_crossing(c.share, model.peak_gbps, a, b)
        assert c.interpolated and c.between[0] < truth <= c.between[1]
        bound = interpolation_error(c.share, 4.0)
        # never below the true size (the curve is concave in log-log), at most the bound above it; 0.5 %: the
        # rounding to 3 significant digits; 1e-3: the measured peak is 0.1-1 % below the asymptote
        assert truth * (1 - 0.005) <= c.size_bytes <= truth * (1 + bound + 1e-3) * (1 + 0.005), (c, truth, bound)


def test_interpolation_error_is_the_worst_case_and_matches_the_doc():
    assert [round(interpolation_error(f, 4.0) * 100, 1) for f in (0.5, 0.8, 0.9)] == [12.9, 20.8, 23.5]
    assert [round(interpolation_error(f, 2.0) * 100, 1) for f in (0.5, 0.8, 0.9)] == [3.1, 4.9, 5.5]
    # the worst case is reached: over many placements of the sizes, some crossing lands near the bound
    a, share, worst = 1e-5, 0.9, 0.0
    for n_half in np.geomspace(1e5, 4e5, 40):
        model = curve_model(lb_sweep(a, n_half / a, sizes=[4**k * 1024 for k in range(14)]))
        c = model.crossing(share)
        worst = max(worst, c.size_bytes / true_crossing(share, model.peak_gbps, a, n_half / a) - 1)
    assert 0.8 * interpolation_error(share, 4.0) < worst <= interpolation_error(share, 4.0) + 0.006
    with pytest.raises(ValueError, match="invalid share 1.2"):
        interpolation_error(1.2, 4.0)


@pytest.mark.parametrize("seed", range(8))
def test_noisy_curve_recovered_within_a_few_percent(seed):
    # 3 % lognormal noise on each median: the latency and bandwidth come back within 5 %
    model = curve_model(lb_sweep(5e-6, 100e9, noise=0.03, seed=seed))
    assert model.fit.ok, model.fit.reason
    assert model.fit.latency_s == pytest.approx(5e-6, rel=0.05)
    assert model.fit.bandwidth_gbps == pytest.approx(100.0, rel=0.05)
    assert model.fit.median_residual < 0.05


def test_curve_that_never_plateaus_says_its_peak_lies_beyond_the_sweep():
    # n_half = 100 MB, the sweep stops at 16 MiB: the figure still rises about 4x per step
    model = curve_model(lb_sweep(1e-3, 100e9, sizes=BY4[:8]))
    assert model.still_rising and model.peak_size == 16 << 20
    assert model.last_slope > STILL_RISING
    for c in model.crossings:
        assert c.size_bytes is None and "still rising" in c.reason and "beyond the sweep" in c.reason
    # the model sees the latency but not the bandwidth-bound sizes
    assert model.fit.latency_s == pytest.approx(1e-3, rel=1e-6)
    assert model.fit.bandwidth_gbps is None and "does not reach the bandwidth-bound sizes" in model.fit.reason
    text = model.text()
    assert "still rising" in text and "points: not known, the peak lies beyond the sweep" in text


def test_curve_that_levels_off_at_the_largest_size_is_not_still_rising():
    # n_half 1 MB: from 256 MiB to 1 GiB the figure rises 0.3 %, well under STILL_RISING
    model = curve_model(lb_sweep(1e-5, 1e11))
    assert model.peak_size == BY4[-1] and not model.still_rising
    assert all(c.size_bytes for c in model.crossings)


def test_two_sizes_only_the_model_cannot_tell():
    model = curve_model(lb_sweep(5e-6, 100e9, sizes=[1 << 20, 1 << 24]))
    assert model.fit.latency_s is None and model.fit.bandwidth_gbps is None and model.fit.median_residual is None
    assert model.fit.reason.startswith("2 sizes only")
    assert "cannot tell (2 sizes only" in model.text()
    # the measured figures are still given
    assert model.latency_floor_size == 1 << 20 and model.peak_size == 1 << 24


def test_sweep_starting_above_a_share_says_so():
    model = curve_model(lb_sweep(1e-6, 100e9, sizes=BY4[6:]))  # n_half 100 KB, from 4 MiB: 97 % already
    for c in model.crossings:
        assert c.size_bytes is None and c.reason.startswith("the sweep starts above it (at 4 MiB")
    # and the latency is not seen: every size is mostly transfer
    assert model.fit.latency_s is None and "does not reach the latency-bound sizes" in model.fit.reason
    assert model.fit.bandwidth_gbps == pytest.approx(100.0, rel=1e-6)


def test_two_regimes_make_a_poor_fit_and_no_figures():
    # a protocol switch: below 1 MiB one latency and bandwidth, above it another
    lo, hi = lb_sweep(2e-6, 20e9), lb_sweep(60e-6, 200e9)
    points = tuple(p if p.size_bytes < (1 << 20) else q for p, q in zip(lo.points, hi.points))
    model = curve_model(Sweep(op="all_reduce", where="2 ranks (nccl)", points=points, figure="busbw"))
    fit = model.fit
    assert fit.latency_s is None and fit.bandwidth_gbps is None and fit.n_half_bytes is None
    assert fit.max_residual > MAX_RESIDUAL and fit.reason.startswith("poor fit")
    assert "cannot tell (poor fit" in model.text() and "GB/s" not in model.text().splitlines()[1]


def test_h200_baseline_copies_fit_the_model_and_nccl_collectives_do_not():
    """The thresholds' evidence (module doc): the shipped 2 x H200 baseline's sweeps over its runs' medians."""
    doc = json.loads((ROOT / "baselines" / "h200.json").read_text())
    models = {s.label: curve_model(s) for s in sweeps_from_baseline(doc)}
    assert "all_gather in place, 2 ranks, float32" in models and "all_gather out of place, 2 ranks, float32" in models
    copies = [m for m in models.values() if m.sweep.figure == "algbw"]
    collectives = [m for m in models.values() if m.sweep.figure == "busbw"]
    assert len(copies) == 7 and len(collectives) == 9
    assert all(m.fit.ok and m.fit.max_residual < 0.1 for m in copies)
    assert all(m.fit.reason.startswith("poor fit") for m in collectives)
    # each run taken alone: every copy sweep fits, no collective sweep does (the 15 % threshold's evidence)
    verdicts = set()
    for run_id in [r["run_id"] for r in doc["runs"]]:
        one = {k: {**c, "runs": [r for r in c["runs"] if r["run_id"] == run_id]} for k, c in doc["cases"].items()}
        for sweep in sweeps_from_baseline({"cases": one}, min_sizes=3):
            verdicts.add((sweep.figure, fit_latency_bandwidth(sweep).ok))
    assert verdicts == {("algbw", True), ("busbw", False)}
    peer = models["copy, cuda:0->cuda:1"]
    assert peer.fit.bandwidth_gbps == pytest.approx(392.5, abs=0.1)
    assert peer.fit.latency_s == pytest.approx(2.36e-6, abs=0.01e-6)
    assert peer.crossing(0.9).size_bytes == 14_000_000 and peer.peak_gbps == pytest.approx(395.9, abs=0.1)


# -- the comparison -------------------------------------------------------------------------------------


def test_comparison_of_a_curve_slowed_at_small_sizes_only():
    a, b = 5e-6, 100e9
    base = lb_sweep(a, b)
    now = lb_sweep(a, b, slow={s: 1.38 for s in BY4[:3]})  # 1, 4, 16 KiB take 1.38x as long
    cmp = compare_curves(now, base)
    assert cmp.peak_ratio == pytest.approx(1.0) and cmp.latency_ratio == pytest.approx(1.38)
    assert cmp.worst == (1024, pytest.approx(1 / 1.38))
    c80, c90 = curve_model(base).crossing(0.8), curve_model(base).crossing(0.9)
    assert cmp.text() == (f"copy, cuda:0->cuda:1: peak 1.00x, latency floor 1.38x, "
                          f"80 % point {format_size(c80.size_bytes)} -> {format_size(c80.size_bytes)}, "
                          f"90 % point {format_size(c90.size_bytes)} -> {format_size(c90.size_bytes)}, "
                          f"worst size 1KiB 0.72x")
    assert cmp.text(with_label=False) == cmp.text().split(": ", 1)[1]


def test_comparison_of_a_curve_slowed_at_large_sizes_moves_the_shares():
    base = lb_sweep(5e-6, 100e9)
    now = lb_sweep(5e-6, 50e9)  # half the bandwidth: n_half halves, the shares come at smaller sizes
    cmp = compare_curves(now, base)
    assert cmp.peak_ratio == pytest.approx(0.5, rel=0.01) and cmp.latency_ratio == pytest.approx(1.0, rel=0.01)
    assert cmp.now.crossing(0.9).size_bytes < cmp.baseline.crossing(0.9).size_bytes
    assert cmp.worst[0] == 1 << 30


def test_comparison_uses_only_the_sizes_both_have_and_says_so():
    base = lb_sweep(5e-6, 100e9, sizes=BY4[1:])  # from 4 KiB
    now = lb_sweep(5e-6, 100e9, sizes=BY4[:-1])  # up to 256 MiB
    cmp = compare_curves(now, base)
    assert [s for s, _ in cmp.ratios] == BY4[1:-1]
    assert cmp.now_only == (1024,) and cmp.baseline_only == (1 << 30,)
    assert cmp.text().endswith("(on the 9 sizes both have; only today: 1KiB; only in the baseline: 1GiB)")
    assert cmp.peak_ratio == pytest.approx(1.0) and cmp.latency_ratio == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no size in common"):
        compare_curves(lb_sweep(5e-6, 1e11, sizes=BY4[:3]), lb_sweep(5e-6, 1e11, sizes=BY4[5:]))


def test_comparison_with_a_still_rising_curve_says_unknown():
    base = lb_sweep(1e-5, 1e11)
    now = lb_sweep(1e-3, 1e11)  # latency 100x: still rising at 1 GiB
    text = compare_curves(now, base).text()
    assert "-> ? (still rising)" in text and "latency floor 99." in text


def test_to_dict_is_json_with_the_documented_keys():
    model = curve_model(lb_sweep(5e-6, 100e9))
    d = json.loads(json.dumps(model.to_dict()))
    assert set(d) == {"sweep", "latency_floor_s", "latency_floor_size", "peak_gbps", "peak_size", "still_rising",
                      "last_rise", "last_slope", "crossings", "fit", "peak_efficiency", "text"}
    assert set(d["fit"]) == {"latency_s", "bandwidth_gbps", "n_half_bytes", "median_residual", "max_residual",
                             "r2_log", "sizes", "reason", "fit_latency_s", "fit_bytes_per_s"}
    assert [c["share"] for c in d["crossings"]] == [0.5, 0.8, 0.9] and d["crossings"][2]["interpolated"] is True
    assert len(d["sweep"]["points"]) == 11 and d["sweep"]["points"][0]["size_bytes"] == 1024
    cd = json.loads(json.dumps(compare_curves(model.sweep, model.sweep).to_dict()))
    assert set(cd) == {"label", "peak_ratio", "latency_ratio", "ratios", "now_only", "baseline_only", "crossings",
                       "text"}
    assert cd["crossings"]["0.9"][0] == cd["crossings"]["0.9"][1] == model.crossing(0.9).size_bytes


# -- grouping into sweeps ---------------------------------------------------------------------------------


def _m(op, size, *, t=1e-4, kind="collective", world=2, devices=None, dtype="float32", info=None, factor=1.0):
    return Measurement(op=op, size_bytes=size, samples_s=[t * 0.98, t, t * 1.03], world_size=world,
                       devices=devices or tuple(f"rank{r}" for r in range(world)), dtype=dtype, kind=kind,
                       busbw_factor=factor, info={"backend": "gloo", **(info or {})})


def test_sweeps_group_measurements_by_op_place_form_and_order_by_size():
    ms = [
        _m("all_reduce", 4096, info={"in_place": True}),
        _m("all_gather", 1024, info={"in_place": False}),
        _m("all_reduce", 1024, info={"in_place": True}),
        _m("all_gather", 1024, info={"in_place": True}),
        _m("all_gather", 4096, info={"in_place": False}),
        _m("all_gather", 4096, info={"in_place": True}),
        _m("all_reduce", 2048, info={"in_place": True}, world=4),  # another world: a group of one
        _m("copy", 1024, kind="copy", world=1, devices=("cuda:0", "cuda:1"), dtype=None),
        _m("copy", 65536, kind="copy", world=1, devices=("cuda:0", "cuda:1"), dtype=None),
        _m("copy", 1024, kind="copy", world=1, devices=("cuda:1", "cuda:0"), dtype=None),
        _m("dp_grad_sync", 1 << 20, info={"step_comm_s": 0.1}),  # a training step: not a sweep
        _m("dp_grad_sync", 1 << 22, info={"step_comm_s": 0.2}),
    ]
    got = sweeps(ms)
    assert [(s.label, s.sizes) for s in got] == [
        ("all_reduce in place, 2 ranks (gloo), float32", [1024, 4096]),
        ("all_gather out of place, 2 ranks (gloo), float32", [1024, 4096]),
        ("all_gather in place, 2 ranks (gloo), float32", [1024, 4096]),
        ("copy, cuda:0->cuda:1", [1024, 65536]),
    ]
    assert [s.figure for s in got] == ["busbw"] * 3 + ["algbw"]
    assert got[0].points[0].median_s == pytest.approx(1e-4) and got[0].points[0].n == 3
    assert len(sweeps(ms, min_sizes=1)) == 6


def test_sweeps_by_test_id_strip_the_size_and_match_the_baseline_keys():
    assert sweep_id("suites/test_collectives.py::test_collective[float32-1KiB-all_reduce-inplace]", 1024) == \
        "suites/test_collectives.py::test_collective[float32-all_reduce-inplace]"
    assert sweep_id("suites/test_copies.py::test_peer_copy[256KiB-0->1]", 262144) == \
        "suites/test_copies.py::test_peer_copy[0->1]"
    assert sweep_id("t.py::test_x[a-b]", 1024) == "t.py::test_x[a-b]"  # no size parameter: the whole id
    assert sweep_id("t.py::test_x[1KB-a]", 1024, requested_bytes=1000) == "t.py::test_x[a]"
    ids = {s: f"suites/test_collectives.py::test_collective[float32-{tok}-all_reduce-inplace]"
           for s, tok in ((1024, "1KiB"), (4096, "4KiB"), (16384, "16KiB"))}
    pairs = [(ids[s], _m("all_reduce", s, t=1e-4 + s * 1e-9, info={"in_place": True})) for s in ids]
    # a report's rows (to_dict with samples, plus the test id) give the same sweep as the measurements
    doc = {"format": "pytest-gpucomm-report", "rows": [{"test": t, **m.to_dict()} for t, m in pairs]}
    (now,) = sweeps_from_report(doc)
    assert now.key == sweeps(pairs)[0].key and now.sizes == [1024, 4096, 16384]
    baseline = {"name": "x", "cases": {
        f"{t}|all_reduce|{m.size_bytes}B|float32|ws2": {
            "test_id": t, "op": "all_reduce", "size_bytes": m.size_bytes, "world_size": 2, "dtype": "float32",
            "devices": ["rank0", "rank1"],
            "runs": [{"run_id": f"r{i}", "summary": {"median_gbps": m.gbps * k, "p50_us": m.median_s * 1e6 / k}}
                     for i, k in enumerate((0.9, 1.0, 1.1))]}
        for t, m in pairs}}
    (base,) = sweeps_from_baseline(baseline)
    assert base.key == now.key and base.sizes == now.sizes
    p = base.points[0]
    assert p.n == 3 and p.gbps == pytest.approx(pairs[0][1].gbps) and p.lo_gbps == pytest.approx(0.9 * p.gbps)
    assert compare_curves(now, base).peak_ratio == pytest.approx(1.0)


def test_sweeps_name_a_size_measured_twice():
    tid = "t.py::test_x[4KiB-a]"
    with pytest.raises(ValueError, match=r"size 4 KiB \(4,096 bytes\) measured twice in the sweep of all_reduce on "
                                         r"2 ranks \(gloo\): t.py::test_x\[4KiB-a\] and t.py::test_x\[4KiB-a\]"):
        sweeps([(tid, _m("all_reduce", 4096)), (tid, _m("all_reduce", 4096))])


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("point, message", [
    (SweepPoint(0, 1e-5, 1.0), "invalid size 0 in t: a size must be a positive whole number of bytes"),
    (SweepPoint(-4096, 1e-5, 1.0), "invalid size -4096 in t"),
    (SweepPoint(True, 1e-5, 1.0), "invalid size True in t"),
    (SweepPoint(1024, 0.0, 1.0), r"invalid median time 0.0 at size 1 KiB \(1,024 bytes\) in t"),
    (SweepPoint(1024, -1e-5, 1.0), "invalid median time -1e-05 at size 1 KiB"),
    (SweepPoint(1024, 1e-5, float("nan")), r"invalid figure \(GB/s\) nan at size 1 KiB"),
    (SweepPoint(1024, float("inf"), 1.0), "invalid median time inf"),
])
def test_bad_points_are_named_with_their_value(point, message):
    with pytest.raises(ValueError, match=message):
        Sweep(op="copy", where="x", points=(SweepPoint(4096, 1e-5, 0.4), point), source="t")


def test_duplicate_sizes_and_empty_sweeps_are_named():
    with pytest.raises(ValueError, match=r"size 4 KiB \(4,096 bytes\) given twice in copy, x: a sweep has one point"):
        Sweep(op="copy", where="x", points=(SweepPoint(4096, 1e-5, 0.4), SweepPoint(4096, 2e-5, 0.2)))
    with pytest.raises(ValueError, match="no sizes in copy, x"):
        Sweep(op="copy", where="x", points=())
    with pytest.raises(ValueError, match="invalid share of the peak 1.5"):
        curve_model(lb_sweep(5e-6, 1e11), shares=(0.5, 1.5))
    with pytest.raises(ValueError, match="not a pytest-gpucomm report: no list of rows"):
        sweeps_from_report({"format": "something"})
    with pytest.raises(ValueError, match="not a pytest-gpucomm baseline: no cases"):
        sweeps_from_baseline({"schema": "other"})
    with pytest.raises(ValueError, match="is not of the sweep of all_reduce on 2 ranks"):
        Sweep.from_measurements([_m("all_reduce", 1024), _m("broadcast", 2048)])


def test_importing_curves_imports_neither_torch_nor_scipy_nor_pytest():
    code = ("import sys, pytest_gpucomm.analysis.curves; "
            "bad = [m for m in ('torch', 'scipy', 'pytest') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# -- the report's section ----------------------------------------------------------------------------------


def test_curve_report_compares_only_the_sweeps_the_baseline_has():
    base = [lb_sweep(5e-6, 100e9)]
    now = [lb_sweep(5e-6, 50e9), lb_sweep(5e-6, 100e9, where="cuda:1->cuda:0")]
    entries = curve_report(now, base)
    assert [e["label"] for e in entries] == [s.label for s in now]
    first, second = entries
    assert first["comparison"]["peak_ratio"] == pytest.approx(0.5, rel=0.01)
    assert first["comparison"]["text_short"].startswith("peak 0.50x, latency floor 1.00x")
    assert second["comparison"] is None  # another pair: not in the baseline
    assert "points" not in first["model"]["sweep"]  # the rows hold them
    assert first["model"]["text"] == curve_model(now[0]).text()
    json.dumps(entries)  # the JSON report holds it as it is


def test_curve_report_without_a_common_size_says_why_instead_of_a_comparison():
    entries = curve_report([lb_sweep(5e-6, 1e11, sizes=BY4[:3])], [lb_sweep(5e-6, 1e11, sizes=BY4[5:])])
    assert entries[0]["comparison"]["text"].startswith("not compared with the baseline: no size in common")


def test_curve_lines_give_the_heading_a_short_line_per_sweep_and_count_the_rest():
    now = [lb_sweep(5e-6, 50e9), lb_sweep(5e-6, 100e9, where="cuda:1->cuda:0"), lb_sweep(5e-6, 1e11, where="x")]
    lines = curve_lines(curve_report(now, [lb_sweep(5e-6, 100e9)]), limit=2, width=1000)
    assert lines[0] == CURVES_HEADING and len(lines) == 4
    # one line per sweep: what is known of its curve (the fit where one line fits), then against the baseline
    assert lines[1].startswith("  copy, cuda:0->cuda:1: floor 5.02 us, peak 49.99 GB/s at 1 GiB, 90% at 2740 KB, fit "
                               "5 us + size / 50.00 GB/s; vs baseline"), lines[1]
    assert lines[1].endswith("; vs baseline: peak 0.50x, floor 1.00x, worst 1 GiB 0.50x"), lines[1]
    assert lines[2].startswith("  copy, cuda:1->cuda:0:") and "vs baseline" not in lines[2]
    assert lines[-1] == '  ... and 1 more sweeps (the JSON report\'s "curves" has every one)'
    assert curve_lines([]) == []


def test_a_curve_line_says_only_what_is_known_and_fits_the_width():
    rising = lb_sweep(5e-6, 1e11, sizes=BY4[:4])  # 1 KiB .. 64 KiB: still rising, no 90 % point, no bandwidth
    noisy = lb_sweep(5e-6, 1e11, noise=0.3, seed=3)  # one line does not fit it: no fit
    assert curve_model(noisy).fit.latency_s is None and curve_model(rising).still_rising
    _, first, second = curve_lines(curve_report([rising, noisy]), width=1000)
    assert first.endswith("peak 11.59 GB/s at 64 KiB, still rising, fit latency 5 us"), first
    assert "90%" in second and "fit" not in second
    lines = curve_lines(curve_report([rising, noisy]), width=80)
    assert all(len(x) <= 80 for x in lines) and not any("cannot tell" in x or "not known" in x for x in lines)
    wide = curve_lines(curve_report([rising, noisy]), width=1000)
    assert " ".join(x.strip() for x in lines) == " ".join(x.strip() for x in wide)  # wrapped, nothing cut


def test_a_collective_on_one_rank_whose_busbw_is_zero_makes_no_sweep_and_no_error():
    # on one GPU the suites run the collectives on one rank: busbw = algbw x 2 (n - 1) / n = 0 (seen on one H200)
    one = [Measurement(op="all_reduce", size_bytes=s, samples_s=[1e-5, 1.1e-5], devices=("rank0",), world_size=1,
                       busbw_factor=0.0, kind="collective") for s in (1024, 4096, 16384)]
    copies = [Measurement(op="copy", size_bytes=s, samples_s=[1e-5, 1.1e-5], devices=("cuda:0", "cuda:1"))
              for s in (1024, 4096)]
    assert one[0].gbps == 0.0
    got = sweeps(one + copies)
    assert [s.op for s in got] == ["copy"]

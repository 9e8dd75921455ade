"""The levels (pytest_gpucomm.gate.levels): classes and bands of cases, residuals after the class offset,
the shrunk residual spreads, the verdicts at each level and their words, and a case's verdict after them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpucomm.gate.decision import Prior
from pytest_gpucomm.gate.levels import (
    LEVEL_SHARES,
    MIN_CLASS_CASES,
    SMALL_CLASS_WEIGHT,
    STEADY_NAME,
    Member,
    Residual,
    borrowed_class_priors,
    case_class,
    class_model,
    common_of,
    fit_levels,
    judge_run,
    member,
    residual_spread,
    residuals,
    weighted_median,
    within_share,
)
from pytest_gpucomm.gate.levels import fit_residual
from pytest_gpucomm.units import size_token

SIZES = [1 << (10 + 2 * i) for i in range(6)]  # 1 KiB .. 1 MiB: one class, one band per op


def _member(op: str, size: int, form: str = "inplace"):
    test = f"t.py::test_collective[float32-{size_token(size)}-{op}-{form}]"
    key = f"{test}|{op}|{size}B|float32|ws2"
    return member(key, test_id=test, op=op, kind="collective", size_bytes=size, dtype="float32", world_size=2,
                  devices=["rank0", "rank1"])


OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
MEMBERS = {m.key: m for m in (_member(op, s) for op in OPS for s in SIZES)}


def _baseline(rng: np.random.Generator, runs: int = 12, class_sd: float = 0.015, case_sd: float = 0.01):
    """Runs of every member: each run has a class offset (``class_sd``) and each case its own noise."""
    out: dict[str, dict[str, float]] = {k: {} for k in MEMBERS}
    for r in range(runs):
        off = rng.normal(0, class_sd)
        for k in MEMBERS:
            out[k][f"r{r}"] = off + rng.normal(0, case_sd)
    return out, {f"r{r}": f"s{r // 3}" for r in range(runs)}  # 4 sessions of 3 runs


def _fit(rng: np.random.Generator):
    runs, sessions = _baseline(rng)
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    return fit_levels(runs, centers, MEMBERS, sessions), centers


def _today(rng: np.random.Generator, centers, drop=lambda k: 0.0, class_sd: float = 0.015, case_sd: float = 0.01):
    off = rng.normal(0, class_sd)
    return {k: off + rng.normal(0, case_sd) + math.log(1 - drop(k)) for k in centers}


def test_a_case_belongs_to_its_kind_and_size_class_and_its_band_is_its_sweep_without_the_size():
    a, b = _member("all_reduce", 1024), _member("all_reduce", 1 << 20)
    assert a.klass == b.klass == "collectives <= 1 MiB" and a.band == b.band
    assert case_class("host", 4 << 20) == "host<->device copies > 1 MiB"
    assert case_class("peer", 4096) == "copies between GPUs <= 1 MiB"
    assert _member("all_reduce", 4 << 20).band != a.band  # above 1 MiB: another band, as another class
    assert _member("all_reduce", 1024, "outplace").band != a.band
    assert a.band_name == "all_reduce in place, float32, 2 ranks"


def test_a_bands_residual_is_taken_against_its_class_outside_the_band_so_a_dropped_band_keeps_its_reference():
    dev = {k: (math.log(0.9) if m.klass and "all_reduce" in k else 0.0) for k, m in MEMBERS.items()}
    res, bands, offsets = residuals(dev, MEMBERS)
    band = MEMBERS[next(k for k in MEMBERS if "all_reduce" in k)].band
    assert bands[band][0] == pytest.approx(math.log(0.9)) and bands[band][1] == len(SIZES)
    assert all(res[k] == pytest.approx(0.0) for k in MEMBERS if "all_reduce" not in k)
    assert offsets["collectives <= 1 MiB"] == (0.0, len(MEMBERS))  # the median: the dropped band is a quarter
    # a class of one band has no other cases to take an offset from: its residuals are the deviations
    alone = {k: m for k, m in MEMBERS.items() if "all_reduce" in k}
    res, _, _ = residuals({k: 0.03 for k in alone}, alone)
    assert set(res.values()) == {0.03}


def test_the_residual_spread_is_shrunk_towards_the_class_prior_both_ways():
    r = Residual(center=0.0, s2=0.02 ** 2, df=9.0, runs=10, sessions=4)
    sd, df = residual_spread(r, Prior(0.01 ** 2, 9.0))
    assert sd == pytest.approx(math.sqrt((0.02 ** 2 + 0.01 ** 2) / 2 * 1.25)) and df == 18.0  # down, not kept
    sd, _ = residual_spread(Residual(0.0, 0.001 ** 2, 9.0, 10, 4), Prior(0.01 ** 2, 9.0))
    assert sd > 0.007  # and up: a case whose runs happen to agree borrows the class's spread
    sd, df = residual_spread(r, Prior(0.01 ** 2, math.inf))  # equal spreads: the pooled one, normal quantiles
    assert sd == pytest.approx(0.01 * math.sqrt(1.25)) and df >= 1000


def test_the_within_session_share_is_pooled_from_the_sums_of_squares_and_divides_by_the_folds():
    within = fit_residual([0.01, -0.01, 0.01, -0.01], ["a", "a", "b", "b"])  # sessions agree: all within
    assert within_share([within]) == pytest.approx(1.0)
    between = fit_residual([0.01, 0.01, -0.01, -0.01], ["a", "a", "b", "b"])  # runs of a session agree
    assert within_share([between]) == 0.0 and within_share([]) == 0.0
    assert within_share([fit_residual([0.01, -0.01], ["a", "b"])]) == 0.0  # no session of two runs
    r = Residual(center=0.0, s2=0.02 ** 2, df=9.0, runs=10, sessions=4)
    one, _ = residual_spread(r, Prior(0.02 ** 2, 9.0))
    two, _ = residual_spread(r, Prior(0.02 ** 2, 9.0), k=2, within=1.0)
    assert two == pytest.approx(0.02 * math.sqrt(0.5 + 0.25)) and one == pytest.approx(0.02 * math.sqrt(1.25))
    assert residual_spread(r, Prior(0.02 ** 2, 9.0), k=2, within=0.0)[0] == pytest.approx(one)  # all between


def test_a_band_measured_in_folds_is_judged_on_a_spread_its_folds_divide():
    rng = np.random.default_rng(3)
    fit, centers = _fit(rng)
    assert 0.5 < fit.within[next(iter(fit.within))] <= 1.0  # the simulated runs vary within sessions
    today = _today(rng, centers)
    plain = judge_run(today, fit, {k: 1e-4 for k in centers})
    folded = judge_run(today, fit, {k: 1e-4 for k in centers}, folds={k: 2 for k in centers})
    assert all(f.sd < p.sd for f, p in zip(folded.bands, plain.bands))
    assert all(f.sd < p.sd for f, p in zip(folded.cases, plain.cases))
    half = judge_run(today, fit, {k: 1e-4 for k in centers}, folds={k: 2 for k in centers if "size" not in k
                                                                      and k.endswith("ws2") and "1024B" in k})
    assert [b.sd for b in half.bands] == [b.sd for b in plain.bands]  # a band: its cases' fewest folds


def test_without_a_change_no_level_fails_and_every_verdict_prints_the_bound_that_decided():
    rng = np.random.default_rng(1)
    fit, centers = _fit(rng)
    for _ in range(20):
        lv = judge_run(_today(rng, centers), fit, {k: 1e-4 for k in centers})
        assert not lv.failed
        for v in lv.all:
            assert f"at level {v.alpha:.2g} (quantile {v.quantile:.2f}" in v.text()
            assert "within the tolerance" not in v.text()
    assert lv.shares == LEVEL_SHARES and sum(LEVEL_SHARES.values()) == pytest.approx(1.0)
    assert [v.alpha for v in lv.bands] == [0.01 * LEVEL_SHARES["band"] / len(OPS)] * len(OPS)


def test_one_band_10_percent_slower_fails_at_the_band_level_and_covers_its_cases_only():
    rng = np.random.default_rng(2)
    fit, centers = _fit(rng)
    lv = judge_run(_today(rng, centers, lambda k: 0.10 if "all_gather" in k else 0.0), fit, {k: 1e-4 for k in centers})
    [band] = [v for v in lv.failed if v.level == "band"]
    assert set(band.keys) == {k for k in MEMBERS if "all_gather" in k}
    assert band.headline().startswith("REGRESSION (op band) all_gather in place, float32, 2 ranks, 1 KiB-1 MiB: ")
    assert band.headline().endswith(f"slower than its class ({len(SIZES)} sizes)")
    assert "is below the 5% tolerance limit 0.95x" in band.detail()
    assert not any(v.failed for v in lv.classes)
    assert set(lv.failed_keys()) <= set(band.keys)


def test_every_case_10_percent_slower_fails_the_class_offset_and_not_the_residuals():
    rng = np.random.default_rng(3)
    runs, sessions = _baseline(rng, class_sd=0.002)
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    fit = fit_levels(runs, centers, MEMBERS, sessions)
    lv = judge_run(_today(rng, centers, lambda k: 0.10, class_sd=0.002), fit, {k: 1e-4 for k in centers})
    klass, steady = lv.classes  # a small class: its median, then its steady offset (each half its weight)
    assert steady.name == f"collectives <= 1 MiB, {STEADY_NAME}" and steady.failed, steady.text()
    assert klass.failed and klass.headline() == (f"REGRESSION (class offset) collectives <= 1 MiB: "
                                                 f"{1 - klass.ratio:.1%} slower ({len(MEMBERS)} cases)")
    assert not any(v.failed for v in lv.bands + lv.cases)


def test_a_class_of_fewer_cases_than_the_minimum_is_not_judged_and_says_why():
    rng = np.random.default_rng(4)
    fit, centers = _fit(rng)
    few = dict(list(_today(rng, centers).items())[:MIN_CLASS_CASES - 1])
    [klass] = judge_run(few, fit, {}).classes
    assert klass.status == "not judged" and not klass.gated
    assert klass.text().endswith(f"{MIN_CLASS_CASES - 1} cases, fewer than {MIN_CLASS_CASES}")


def test_a_cases_verdict_after_the_levels_regression_where_one_covers_it_ok_where_its_residual_gates_it():
    rng = np.random.default_rng(5)
    fit, centers = _fit(rng)
    lv = judge_run(_today(rng, centers, lambda k: 0.10 if "broadcast" in k else 0.0), fit, {k: 1e-4 for k in centers})
    hit = next(k for k in MEMBERS if "broadcast" in k)
    status, message, extra = lv.update(hit, "not gated", "bandwidth is 0.9x")
    assert status == "REGRESSION" and message.startswith("REGRESSION (op band) broadcast")
    assert message.endswith("\n  the case's own verdict (not gated): bandwidth is 0.9x")
    assert "band" in [v["level"] for v in extra["levels"]]
    other = next(k for k in MEMBERS if "all_reduce" in k)
    mine = next(v for v in lv.cases if v.keys == (other,))
    status, message, extra = lv.update(other, "not gated", "m")
    assert extra["residual"]["level"] == "case"
    assert status == ("ok" if mine.gated else "not gated")
    assert lv.update(None, "new", "no entry") == ("new", "no entry", {})


def test_a_bad_tolerance_is_refused_naming_the_value():
    rng = np.random.default_rng(6)
    fit, centers = _fit(rng)
    with pytest.raises(ValueError, match=r"tolerance.*got -0\.1"):
        judge_run(_today(rng, centers), fit, {}, tolerance=-0.1)


def test_a_one_session_residual_takes_its_session_part_from_the_prior_else_is_never_ok_nor_fails_on_one_run():
    from pytest_gpucomm.gate.levels import _pseudo

    one_session = fit_residual([0.001, -0.001, 0.0005, -0.0005], ["s"] * 4)
    fitted = (one_session, Prior(0.0, 0.0))
    kw = dict(tolerance=0.05, alpha=0.001)
    with_prior = _pseudo("case", "x", ["k"], 0.0, fitted, session=(0.003 ** 2, math.inf), **kw)
    assert with_prior.status == "ok" and with_prior.gated and not with_prior.assumed
    assumed = _pseudo("case", "x", ["k"], 0.0, fitted, **kw)
    assert assumed.status == "not gated" and assumed.assumed and not assumed.gated
    assert _pseudo("case", "x", ["k"], math.log(0.5), fitted, runs=1, **kw).status == "not gated"
    assert _pseudo("case", "x", ["k"], math.log(0.5), fitted, runs=2, **kw).status == "regression"
    # today's runs of the case disagree by 30 %: its residual is not judged tighter than that
    floored = _pseudo("case", "x", ["k"], math.log(0.85), fitted, session=(0.003 ** 2, math.inf),
                      floor=0.15 ** 2, **kw)
    assert floored.status != "regression" and floored.sd >= 0.15


def test_a_band_less_slow_than_its_collapsed_class_is_not_called_improved_and_says_why():
    """Issue 45, item 4: every copy 40 % slower but one op's 20 %; its residual against the other cases (themselves
    40 % slower) read "improved" while the op was 20 % slower than its baseline.  The reference collapsed: the
    residual is not used, and the verdict says so."""
    rng = np.random.default_rng(7)
    runs, sessions = _baseline(rng, class_sd=0.002)
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    fit = fit_levels(runs, centers, MEMBERS, sessions)
    today = _today(rng, centers, lambda k: 0.20 if "all_gather" in k else 0.40, class_sd=0.002)
    lv = judge_run(today, fit, {k: 1e-4 for k in centers})
    assert lv.classes[0].failed  # the class offset judges such a run
    gather = [v for v in lv.bands + lv.cases if any("all_gather" in k for k in v.keys)]
    assert gather and all(v.status == "not judged" for v in gather)
    assert all("its reference, the other cases of its class, is 40." in v.why and "slower itself" in v.why
               and "a residual against it is not used" in v.why for v in gather)
    assert not any(v.status == "improved" for v in lv.bands + lv.cases)


def test_no_level_verdict_reads_improved_for_a_case_slower_than_its_baseline_beyond_the_tolerance():
    """Issue 45, item 4, over a grid of class and band drops (and gains): a band or case whose own cases are
    below 1 - tolerance of their baseline is never "improved"."""
    rng = np.random.default_rng(8)
    runs, sessions = _baseline(rng, class_sd=0.002)
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    fit = fit_levels(runs, centers, MEMBERS, sessions)
    seen = 0
    for class_drop in (-0.2, 0.0, 0.06, 0.1, 0.3, 0.6):
        for band_drop in (-0.3, 0.0, 0.06, 0.2, 0.5):
            today = _today(rng, centers, lambda k, b=band_drop, c=class_drop: b if "broadcast" in k else c,
                           class_sd=0.002)
            lv = judge_run(today, fit, {k: 1e-4 for k in centers})
            for v in lv.bands + lv.cases:
                if v.status == "improved":
                    seen += 1
                    assert all(math.exp(today[k]) >= 1 - v.tolerance for k in v.keys), v.text()
    assert seen  # the grid does reach "improved" verdicts (a band faster than an unchanged class)


# -- the class offsets: a prior across the classes of a size, folds, weights, borrowed spreads ----------------


def _class_members(kind: str, n: int, size: int) -> dict[str, Member]:
    out = {}
    for i in range(n):
        test = f"t.py::test_{kind}[{i}-{size_token(size)}]"
        key = f"{test}|{kind}{i}|{size}B"
        out[key] = member(key, test_id=test, op=f"{kind}{i}", kind=kind, size_bytes=size, dtype=None, world_size=1,
                          devices=[f"d{i}"])
    return out


def test_a_small_class_of_few_sessions_borrows_the_degrees_of_freedom_of_its_sizes_other_classes():
    rng = np.random.default_rng(5)
    sessions = {f"r{r}": f"s{r // 3}" for r in range(9)}  # 3 sessions of 3 runs: 2 df of its own
    members = {**_class_members("peer", 6, 4096), **_class_members("host", 6, 4096),
               **MEMBERS}  # three small classes: copies between GPUs, host<->device copies, collectives
    s_off = {k: {s: rng.normal(0, 0.01) for s in set(sessions.values())} for k in ("peer", "host", "coll")}
    runs = {}
    for key in members:
        kind = "peer" if "peer" in key else "host" if "host" in key else "coll"
        runs[key] = {r: s_off[kind][s] + rng.normal(0, 0.003) for r, s in sessions.items()}
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    fit = fit_levels(runs, centers, members, sessions)
    alone = fit_levels({k: v for k, v in runs.items() if "peer" in k}, centers,
                       {k: m for k, m in members.items() if "peer" in k}, sessions)
    klass = "copies between GPUs <= 1 MiB"
    assert alone.class_models[klass][1].df == 0  # one class of its size: no prior
    assert fit.class_models[klass][1].df > 0
    assert fit.classes[klass].df > alone.classes[klass].df
    # the prior never takes the spread below what the class's own runs show (decision step 3)
    assert fit.classes[klass].sd >= alone.classes[klass].sd - 1e-12


def test_a_class_measured_in_folds_is_judged_on_an_offset_spread_its_folds_divide():
    rng = np.random.default_rng(3)
    fit, centers = _fit(rng)
    klass = "collectives <= 1 MiB"
    model, prior = fit.class_models[klass]
    assert common_of(model, prior, 2).sd < common_of(model, prior, 1).sd
    dev = _today(rng, centers)
    one = judge_run(dev, fit, {k: 1e-4 for k in dev})
    two = judge_run(dev, fit, {k: 1e-4 for k in dev}, folds={k: 2 for k in dev})
    assert two.classes[0].sd < one.classes[0].sd


def test_a_small_class_offset_has_its_weight_of_the_class_share_of_alpha():
    small, large = _class_members("host", 6, 4096), _class_members("host", 6, 64 << 20)
    members = {**small, **large}
    rng = np.random.default_rng(9)
    sessions = {f"r{r}": f"s{r // 2}" for r in range(8)}
    runs = {k: {r: rng.normal(0, 0.003) for r in sessions} for k in members}
    centers = {k: float(np.mean(list(v.values()))) for k, v in runs.items()}
    lv = judge_run({k: 0.0 for k in members}, fit_levels(runs, centers, members, sessions),
                   {k: 1e-5 for k in members}, alpha=0.01)
    by = {v.name: v for v in lv.classes}
    a_small, a_large = by["host<->device copies <= 1 MiB"].alpha, by["host<->device copies > 1 MiB"].alpha
    # a small class is judged twice, by its median and by its steady offset, each at half its weight
    a_steady = by[f"host<->device copies <= 1 MiB, {STEADY_NAME}"].alpha
    assert a_small == a_steady == pytest.approx(SMALL_CLASS_WEIGHT / 2 * a_large)
    assert a_small + a_steady + a_large == pytest.approx(0.01 * LEVEL_SHARES["class"])  # the level's alpha, shared


def test_a_one_session_class_offset_judged_on_borrowed_spreads_is_gated_and_fails_a_10_percent_drop():
    rng = np.random.default_rng(11)
    members = _class_members("host", 10, 4096)
    src_sessions = {f"r{r}": f"s{r // 3}" for r in range(12)}  # the other file: 4 sessions of 3 runs
    s_off = {s: rng.normal(0, 0.004) for s in set(src_sessions.values())}
    src = {k: {r: s_off[s] + rng.normal(0, 0.002) for r, s in src_sessions.items()} for k in members}
    src_centers = {k: float(np.mean(list(v.values()))) for k, v in src.items()}
    borrowed = borrowed_class_priors(
        {"host<->device copies <= 1 MiB": class_model(list(src.values()), list(src_centers.values()), src_sessions)})
    one = {k: {"b0": rng.normal(0, 0.002)} for k in members}  # a one-run baseline
    centers = {k: v["b0"] for k, v in one.items()}
    dev = {k: math.log(0.9) + rng.normal(0, 0.002) for k in members}
    var = {k: 1e-5 for k in members}
    plain = judge_run(dev, fit_levels(one, centers, members, {"b0": None}), var, runs={k: 2 for k in dev})
    lent = judge_run(dev, fit_levels(one, centers, members, {"b0": None}, borrowed=borrowed), var,
                     runs={k: 2 for k in dev})
    assert plain.classes[0].assumed and plain.classes[0].status == "not gated"
    assert not lent.classes[0].assumed and lent.classes[0].status == "regression", lent.classes[0].text()
    same = judge_run({k: rng.normal(0, 0.002) for k in members},
                     fit_levels(one, centers, members, {"b0": None}, borrowed=borrowed), var)
    assert same.classes[0].status == "ok", same.classes[0].text()


def test_a_level_not_judged_says_why_once_in_its_text():
    from pytest_gpucomm.gate.levels import LevelVerdict

    why = "its reference, the other cases of its class, is 46.3% slower itself"
    v = LevelVerdict("case", "h2d 4 KiB", ("k",), "not judged", 0.5, math.nan, math.nan, 0.001, math.nan, math.nan,
                     math.nan, math.nan, 0.05, why=why)
    assert v.text().count("46.3% slower itself") == 1
    assert v.text() == f"not judged (case residual) h2d 4 KiB: {why}"


# -- the steady offset of a small class (issue 45 item 2) -------------------------------------------------------


def test_the_weighted_median_counts_each_value_by_its_weight_and_is_the_median_with_equal_weights():
    assert weighted_median([1.0, 2.0, 3.0, 10.0], [1.0, 1.0, 1.0, 10.0]) == 10.0
    assert weighted_median([5.0, 1.0, 3.0], [1.0, 1.0, 1.0]) == 3.0
    assert weighted_median([4.0, 1.0, 3.0, 2.0], [1.0] * 4) == 2.5 == float(np.median([4.0, 1.0, 3.0, 2.0]))
    assert weighted_median([4.0, 1.0, 3.0, 2.0]) == 2.5


#: a host<->device copy's share of its time that is a fixed cost per copy, by size (2 x H200: about 1 - its
#: bandwidth over 55 GB/s): a boot that moves that cost moves the small sizes most and 1 MiB little
LATENCY_SHARE = {4 << 10: 0.97, 16 << 10: 0.89, 64 << 10: 0.68, 256 << 10: 0.35, 1 << 20: 0.13}


def _latency_bound_class(rng: np.random.Generator, sessions: int = 4, runs: int = 3, shift_sd: float = 0.025):
    """A small host<->device class of 4 directions x 5 sizes whose sessions move each case by its latency share
    of a session's latency shift (``shift_sd``), its runs by 0.3 %; (members, runs, session of each run)."""
    members = {}
    for d in range(4):
        for size in LATENCY_SHARE:
            test = f"t.py::test_h2d[{d}-{size_token(size)}]"
            key = f"{test}|h2d|{size}B"
            members[key] = member(key, test_id=test, op="h2d", kind="host", size_bytes=size, dtype=None,
                                  world_size=1, devices=[f"host->cuda:{d}"])
    session_of = {f"r{s}-{r}": f"s{s}" for s in range(sessions) for r in range(runs)}
    shift = {f"s{s}": rng.normal(0, shift_sd) for s in range(sessions)}
    base = {k: {rid: -shift[s] * LATENCY_SHARE[m.size_bytes] + rng.normal(0, 0.003) for rid, s in session_of.items()}
            for k, m in members.items()}
    return members, base, session_of


def test_a_flat_10_percent_drop_of_a_small_class_whose_boots_move_its_latency_fails_on_its_steady_offset():
    rng = np.random.default_rng(45)  # one draw of many: with seeds 0-29 the steady offset failed it in 26, the median 1
    members, base, session_of = _latency_bound_class(rng)
    centers = {k: float(np.mean(list(v.values()))) for k, v in base.items()}
    fit = fit_levels(base, centers, members, session_of)
    klass = "host<->device copies <= 1 MiB"
    assert set(fit.steady) == {klass}
    weights = fit.steady[klass][0]
    assert min(w for k, w in weights.items() if members[k].size_bytes == 1 << 20) > \
        5 * max(w for k, w in weights.items() if members[k].size_bytes == 4 << 10)  # the steadiest count most
    var = {k: 1e-5 for k in members}
    today_shift = -0.025  # a boot of today 2.5 % slower in its fixed cost than the baseline's average
    for drop, fails in ((0.0, False), (0.10, True)):
        dev = {k: -today_shift * LATENCY_SHARE[m.size_bytes] + rng.normal(0, 0.003) + math.log(1 - drop)
               for k, m in members.items()}
        lv = judge_run(dev, fit, var, runs={k: 1 for k in dev})
        plain, steady = lv.classes
        assert steady.name == f"{klass}, {STEADY_NAME}" and plain.name == klass
        assert steady.failed is fails, steady.text()
        # the class's median moves with the boots' latency: judged on that spread, it catches no 10 % drop
        assert not plain.failed and plain.status == "not gated", plain.text()
        assert steady.sd < plain.sd / 2, (steady.text(), plain.text())


def test_no_steady_offset_without_the_runs_to_weigh_its_cases_or_two_sessions():
    rng = np.random.default_rng(46)
    members, base, session_of = _latency_bound_class(rng, sessions=1, runs=4)
    centers = {k: float(np.mean(list(v.values()))) for k, v in base.items()}
    one = fit_levels(base, centers, members, session_of)
    assert one.steady == {}  # one session: its offset's spread between sessions is not measured
    members, base, session_of = _latency_bound_class(rng, sessions=2, runs=1)
    two = fit_levels(base, centers, members, session_of)
    assert two.steady == {}  # two runs of each case: fewer than MIN_STEADY_RUNS to weigh them by
    lv = judge_run({k: 0.0 for k in members}, two, {k: 1e-5 for k in members})
    assert [v.name for v in lv.classes] == ["host<->device copies <= 1 MiB"]

"""One count of "gated" per level (issue 45, item 1): the cases (by their own verdict, or else by their residual),
the class offsets, the op bands and the case residuals, worked out once (``report.run.gated_counts``) and
printed alike by the terminal summary, the JSON report and the HTML page; and a level's heading over its own
evidence, the case's own verdict below it labelled as such."""

from __future__ import annotations

from pytest_gpucomm.gate.decision import GATED_DROP_FACTOR
from pytest_gpucomm.gate.levels import LevelVerdict, RunLevels
from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.report.document import Levels, ReportDocument, Row, RowVerdict
from pytest_gpucomm.report.run import GatedCounts, counts_line, gated_counts, gated_of, sensitivity_lines
from pytest_gpucomm.vocab import DEFAULT_TOLERANCE

TOL = DEFAULT_TOLERANCE


def _verdict(level: str, key: str, *, status: str, drop: float, ratio: float = 1.0, assumed: bool = False
             ) -> LevelVerdict:
    """A level verdict on ``key`` whose smallest drop caught is ``drop``; the bounds about ``ratio``."""
    return LevelVerdict(level, f"{level} {key}", (key,), status, ratio, ratio * 1.02, ratio * 0.98, 0.001, 3.3,
                        12.0, 0.01, drop, TOL, assumed=assumed)


def _levels(cases: list[LevelVerdict], classes: tuple[LevelVerdict, ...] = ()) -> RunLevels:
    return RunLevels(classes=list(classes), bands=[], cases=cases, alpha=0.01,
                     shares={"class": 0.2, "band": 0.35, "residual": 0.35})


def _case(key: str, *, gated: bool, status: str = "not gated") -> dict[str, object]:
    """A case's own verdict as the report keeps it (``gate.Verdict.to_dict``, the fields counted here)."""
    return {"case": key, "status": status, "gated": gated, "detectable_drop": TOL if gated else 4 * TOL,
            "message": f"{key}: bandwidth is 1.00x", "baseline_runs": 4, "baseline_sessions": 2}


def _after_levels(verdicts: list[dict[str, object]], levels: RunLevels) -> list[dict[str, object]]:
    """The verdicts after the levels, as ``report.run.apply_levels`` makes a session's."""
    for v in verdicts:
        status, v["message"], extra = levels.update(str(v["case"]), str(v["status"]), str(v["message"]))
        v.update(extra)
        v["status"] = status
    return verdicts


def test_a_case_gated_by_its_residual_only_counts_once_as_gated_and_its_row_reads_ok():
    small = TOL  # caught well within twice the tolerance: gated
    levels = _levels([_verdict("case", "a", status="ok", drop=small), _verdict("case", "b", status="ok", drop=small),
                      _verdict("case", "c", status="not gated", drop=3 * GATED_DROP_FACTOR * TOL)])
    verdicts = _after_levels([_case("a", gated=True, status="ok"), _case("b", gated=False), _case("c", gated=False)],
                             levels)
    counts = gated_counts(verdicts, levels.to_dict())
    # a by its own verdict, b by its residual (not by both), c by neither
    assert (counts.cases, counts.own, counts.by_residual, counts.gated) == (3, 1, 1, 2)
    assert counts.levels == {"class": (0, 0), "band": (0, 0), "case": (2, 3)}
    # the rows say the same: as many ok as gated, the rest not gated
    assert [v["status"] for v in verdicts] == ["ok", "ok", "not gated"]
    assert sum(v["status"] == "ok" for v in verdicts) == counts.gated



def test_with_strict_a_case_failed_as_not_gated_is_not_counted_gated_by_its_residual():
    """--gpu-baseline-strict fails a case that is not gated at its test, before the levels: its row stays NOT GATED
    though its residual gates it at the end, and the count of gated says what the rows say."""
    levels = _levels([_verdict("case", "a", status="ok", drop=TOL), _verdict("case", "b", status="ok", drop=TOL)])
    verdicts = _after_levels([_case("a", gated=False, status="NOT GATED"), _case("b", gated=False)], levels)
    assert [v["status"] for v in verdicts] == ["NOT GATED", "ok"]
    counts = gated_counts(verdicts, levels.to_dict())
    assert (counts.cases, counts.own, counts.by_residual) == (2, 0, 1)
    assert counts.levels["case"] == (2, 2)  # the residuals themselves are gated: the level's count is theirs

def test_the_sensitivity_line_says_the_cases_gated_and_each_levels_count_in_one_sentence():
    counts = GatedCounts(cases=169, own=39, by_residual=21, levels={"class": (2, 6), "band": (10, 30),
                                                                   "case": (45, 169)})
    text = counts.text()
    assert text == ("gated (a drop of 2x the tolerance caught 99% of the time): 60 of 169 cases (39 by their own "
                    "verdict, 21 more by their residual); at the levels: 2 of 6 class offsets, 10 of 30 op bands, "
                    "45 of 169 case residuals")
    line = " ".join(sensitivity_lines([RowVerdict(_case("a", gated=True, status="ok"))], gated=counts, width=1000))
    assert line.startswith(f"gpucomm sensitivity: {text}; the smallest drop a case's own verdict catches is ")
    assert GatedCounts.from_dict(counts.to_dict()) == counts


def test_a_level_read_back_from_the_json_report_is_gated_as_it_was_judged():
    """A class offset whose spread between sessions is assumed is never gated, however small the drop it
    would catch: read back from the JSON report (the terminal summary of ``gpucomm show``, ``compare``, the
    HTML page), it is still not gated, and the levels' summary gives the same count."""
    assumed = _verdict("class", "k", status="not gated", drop=TOL, assumed=True)
    levels = _levels([_verdict("case", "k", status="ok", drop=TOL)], classes=(assumed,))
    assert not assumed.gated
    back = Levels(levels.to_dict()).run_levels()
    assert [v.gated for v in back.all] == [v.gated for v in levels.all] == [False, True]
    assert back.summary() == levels.summary()
    assert levels.to_dict()["gated"] == {"class": {"gated": 0, "judged": 1}, "band": {"gated": 0, "judged": 0},
                                         "case": {"gated": 1, "judged": 1}}


def test_a_report_without_the_counts_has_them_worked_out_from_its_rows_and_levels():
    """A JSON report written before it held ``baseline.gated``: :func:`gated_of` works them out, the same as
    the session writes them."""
    levels = _levels([_verdict("case", "a", status="ok", drop=TOL), _verdict("case", "b", status="ok", drop=TOL)])
    verdicts = _after_levels([_case("a", gated=True, status="ok"), _case("b", gated=False)], levels)
    m = Measurement(op="copy", size_bytes=4096, samples_s=[1e-6, 2e-6, 3e-6], devices=("cpu:0", "cpu:1"))
    rows = [Row(f"t.py::test[{v['case']}]", m, str(v["status"]), verdict=RowVerdict(v)) for v in verdicts]
    old = ReportDocument.of_run(rows, baseline={"path": "b.json", "levels": levels.to_dict()})
    written = ReportDocument.of_run(rows, baseline={"path": "b.json", "levels": levels.to_dict(),
                                                    "gated": gated_counts(verdicts, levels.to_dict()).to_dict()})
    assert gated_of(old) == gated_of(written) == GatedCounts(2, 1, 1, {"class": (0, 0), "band": (0, 0),
                                                                       "case": (2, 2)})
    assert counts_line(old.rows) == "gpucomm verdicts: 2 ok"


def test_a_failing_levels_heading_is_followed_by_its_own_bound_and_the_cases_own_verdict_labelled():
    """The heading says REGRESSION at the level; the line under it is that level's bound against the limit;
    the case's own verdict, which may say the case alone catches no such drop, comes last and says whose it
    is (the issue's ``REGRESSION (case residual) ...`` over ``this case only catches drops of 83.0% ...``)."""
    res = _verdict("case", "k", status="regression", drop=3 * GATED_DROP_FACTOR * TOL, ratio=0.91)
    res = LevelVerdict(**{**res.__dict__, "upper_bound": 0.93})
    own = ("copy on cpu:1->cpu:0 at 16 MB: not shown beyond the 5% tolerance; only catches drops of 83.0% or more: "
           "a drop of 10% could pass")
    status, message, extra = _levels([res]).update("k", "not gated", own)
    head, bound, mine = message.split("\n")
    assert status == "REGRESSION" and head == res.headline() and head.startswith("REGRESSION (case residual)")
    limit = 1 - TOL
    assert bound == f"  case residual: {res.detail()}"
    assert bound.endswith(f"is below the {TOL:.0%} tolerance limit {limit:.3g}x") and "0.93x" in bound
    assert mine == f"  the case's own verdict (not gated): {own}"
    assert [v["status"] for v in extra["levels"]] == ["regression"]


def test_a_case_made_ok_by_its_residual_says_the_residuals_bound_before_its_own_not_gated_verdict():
    res = _verdict("case", "k", status="ok", drop=TOL)
    status, message, _ = _levels([res]).update("k", "not gated", "only catches drops of 40.0% or more")
    assert status == "ok"
    assert message == (f"gated by its residual: {res.detail()}; the case's own verdict (not gated): only catches "
                       "drops of 40.0% or more")

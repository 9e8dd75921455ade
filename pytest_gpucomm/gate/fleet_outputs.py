"""What ``gpucomm fleet`` writes of a :class:`~pytest_gpucomm.gate.fleet.FleetResult`: the terminal's lines, the
drain list (JSON), the whole result (JSON) and a JUnit XML file of one test case per node.  Pure: strings and
dicts, no file written here (``cli.fleet`` writes them)."""

from __future__ import annotations

import json
import math
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .fleet import FleetResult

__all__ = ["text_lines", "drain_document", "result_document", "junit_xml", "dumps", "SUITE_NAME"]

#: the JUnit test suite's name; each node's test case is ``<SUITE_NAME>::<node>``, the fleet's ``::fleet``
SUITE_NAME = "gpucomm fleet"


def text_lines(r: FleetResult) -> list[str]:
    """The drain list first (each node's first line says what, where and how much), then what was left out,
    the fleet's shifts and the notes, then the verdict."""
    out = []
    for v in r.drain:
        out += v.lines()
    for e in r.excluded:
        out.append(f"left out: {e.name} ({e.where}): {e.reason}")
    for s in r.shifts:
        if s.level == "class" or s.status == "REGRESSION":
            out.append(s.line())
    out += [f"note: {n}" for n in r.notes]
    word = "FAILED" if r.failed else "passed"
    fleet = "the fleet slower than the baseline" if r.fleet_failed else "the fleet as a whole healthy"
    if not r.shifts:
        fleet = "no baseline: the fleet as a whole not judged"
    out.append(f"gpucomm fleet: {word}: {len(r.drain)} of {len(r.nodes)} nodes to drain, {fleet}"
               + (f", {len(r.excluded)} reports left out" if r.excluded else ""))
    return out


def drain_document(r: FleetResult) -> dict[str, Any]:
    """The nodes to drain, each with its reasons (the first line of its message and each finding)."""
    return {"drain": [{"node": v.node.name, "host": v.node.host, "report": v.node.where, "status": v.status,
                       "reason": v.lines()[0], "findings": [f.to_dict() for f in v.peers + v.baseline]}
                      for v in r.drain],
            "left_out": [e.to_dict() for e in r.excluded],
            "fleet_failed": r.fleet_failed}


def result_document(r: FleetResult) -> dict[str, Any]:
    """Everything: settings, every node's verdict, those left out, the fleet's shifts and notes."""
    return {"format": "pytest-gpucomm-fleet", "version": 1, "alpha": r.alpha, "tolerance": r.tolerance,
            "baseline": r.baseline or None, "failed": r.failed, "fleet_failed": r.fleet_failed,
            "nodes": [v.to_dict() for v in r.nodes], "left_out": [e.to_dict() for e in r.excluded],
            "fleet": [s.to_dict() for s in r.shifts], "notes": list(r.notes)}


def _case(name: str, failure: str = "", text: str = "", error: bool = False) -> str:
    head = f"  <testcase classname={quoteattr(SUITE_NAME)} name={quoteattr(name)} time=\"0\""
    if not failure:
        return head + "/>"
    tag = "error" if error else "failure"
    return f"{head}>\n    <{tag} message={quoteattr(failure)}>{escape(text)}</{tag}>\n  </testcase>"


def junit_xml(r: FleetResult) -> str:
    """One test case per node (failed: slower than its peers or the baseline; an error: its report left out),
    and one for the fleet as a whole."""
    cases = []
    for v in r.nodes:
        lines = v.lines()
        cases.append(_case(v.node.name, lines[0] if v.failed else "", "\n".join(lines)))
    for e in r.excluded:
        cases.append(_case(e.name, f"node {e.name}: report left out: {e.reason}", e.where, error=True))
    bad = [s.line() for s in r.shifts if s.status == "REGRESSION"]
    cases.append(_case("fleet", bad[0] if bad else "", "\n".join(bad)))
    failures = sum(v.failed for v in r.nodes) + bool(bad)
    head = (f"<testsuite name={quoteattr(SUITE_NAME)} tests=\"{len(cases)}\" failures=\"{failures}\" "
            f"errors=\"{len(r.excluded)}\" skipped=\"0\">")
    return "\n".join(['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>", head, *cases, "</testsuite>",
                      "</testsuites>"]) + "\n"


def dumps(doc: dict[str, Any]) -> str:
    """``doc`` as JSON text, a figure that is not finite (an interval not measured) as null."""
    return json.dumps(_finite(doc), indent=1, allow_nan=False) + "\n"


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x

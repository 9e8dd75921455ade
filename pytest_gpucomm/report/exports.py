"""The report document written to files: the JSON report (:func:`write_json`) and the same measurements in
pytest-benchmark's format (:func:`benchmark_document`)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Mapping

from ..files.atomic import write_atomic
from .document import ReportDocument

__all__ = ["write_json", "benchmark_document"]


def write_json(path: "str | Path", doc: "ReportDocument | Mapping[str, object]", *, replace: bool = True) -> None:
    """Write a document's JSON (or a JSON document) atomically: a temp file in the same folder, then rename;
    ``replace=False``: never over an existing file (``atomic.write_atomic``)."""
    data = doc.to_json() if isinstance(doc, ReportDocument) else doc
    write_atomic(Path(path), json.dumps(data, indent=1) + "\n", replace=replace)


def benchmark_document(doc: ReportDocument, date: str) -> dict[str, object]:
    """The document's measurements in pytest-benchmark's JSON format, so ``pytest-benchmark compare`` reads
    them.

    One benchmark per row; its "round" times are our per-iteration seconds, and the statistics come from
    pytest-benchmark's own Stats class.  GB/s, the op and the size are in ``extra_info``.
    """
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    fp = doc.fingerprint or {}
    benchmarks = []
    per_test = Counter(r.test for r in doc.rows)  # a test with several rows gets a suffix
    for r in doc.rows:
        m = r.measurement
        st = Stats()
        for s in m.samples_s:
            st.update(s)
        stats = st.as_dict()
        stats["data"] = list(m.samples_s)
        stats["iterations"] = 1
        node = f"-node{m.info['node']}" if "node" in m.info else ""  # launched mode: a copy's row per node
        suffix = f"[{m.op}-{m.size_bytes}{node}]" if per_test[r.test] > 1 else ""
        benchmarks.append({
            "group": m.op,
            "name": r.test.split("::", 1)[-1] + suffix,
            "fullname": r.test + suffix,
            "params": {"size": m.size_bytes},
            "param": str(m.size_bytes),
            "extra_info": {"gbps": m.gbps, "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps,
                           "size_bytes": m.size_bytes, "where": m.where, "status": r.status},
            "options": {"timer": m.info.get("timer", ""), "min_rounds": 1, "max_time": 0, "min_time": 0,
                        "warmup": True, "disable_gc": False},
            "stats": stats,
        })
    return {
        "machine_info": {"node": fp.get("host", ""), "processor": fp.get("cpu", ""), "machine": fp.get("model", ""),
                         "python_version": fp.get("python", ""), "gpucomm": fp},
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": date,
        "version": pb_version,
    }

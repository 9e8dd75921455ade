"""NVIDIA nvbandwidth's JSON (``-j``, v0.8: its json_output.cpp) read as a run of ours.

The file: ``{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version", "Driver Version", "GPU Device
list": ["0: NVIDIA H100 80GB HBM3 (00000000:00:06): (host)", ...], "testcases": [{"name", "status",
"bandwidth_description", "bandwidth_matrix": rows of strings ("53.6057" GB/s, or "N/A"), "sum"}], "error"?}}``.
It does not hold the buffer size (``-b``, MiB; 512 MiB by default): the reader takes it from the caller
(``gpucomm compare|baselines add --nvbandwidth-size``), else nvbandwidth's default.

What becomes of it (:func:`read`): one case per testcase and matrix entry that has a figure, op by the name:
``host_to_device_*`` -> ``h2d``, ``device_to_host_*`` -> ``d2h`` (``host``, ``cuda:N``), ``device_to_device_*``
and ``device_local_copy`` -> ``copy`` (row and column by the arrow of its description: ``(row) <- (column)``
copies the column's GPU into the row's), the others keep nvbandwidth's name as their op (no op of ours is
theirs).  A ``*_bidirectional_*`` figure is the named direction's bandwidth while the reverse copy runs
(nvbandwidth's ``doMemcpy`` returns the first copy's), so it keeps the one-way op and bytes.  Its one sample is
the figure turned into the time of one buffer (size / bandwidth): one location per case, judged with the
spread the baseline knows.  A testcase that did not pass (``Error``, ``Not Found``) or a top-level ``error`` is
refused; a ``Waived`` one is left out, said in the notes; a latency test (``*_latency_*``: a time, not a
bandwidth) is left out, said too.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional

from ..measurement import Measurement
from ..units import size_token
from .model import Field, ForeignCase, ForeignRun, short

__all__ = ["VERSIONS", "DEFAULT_SIZE", "looks_like", "read"]

#: the versions read (the layout of their JSON checked against the files they wrote)
VERSIONS = frozenset({"v0.8"})
#: nvbandwidth's own default buffer size (its common.h: 512 MiB)
DEFAULT_SIZE = 512 * 1024 * 1024
_NAME = re.compile(r"^[a-z0-9_]{1,80}$")
_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*\(([0-9A-Fa-f:.]+)\)\s*:\s*\((.*)\)\s*$")


def looks_like(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("nvbandwidth"), Mapping)


def read(doc: Mapping[str, Any], path: str, size: Optional[int] = None) -> ForeignRun:
    """The run of a parsed nvbandwidth JSON document from the file ``path``, its buffers ``size`` bytes."""
    top = Field(path, "nvbandwidth")
    body = top.mapping(doc["nvbandwidth"])
    version = top.at("version").text(top.get(body, "version"))
    if version not in VERSIONS:
        top.at("version").fail(f"{short(version)}: this pytest-gpucomm reads nvbandwidth JSON of "
                               f"{', '.join(sorted(VERSIONS))} (another version's layout is not checked)")
    if body.get("error"):
        top.at("error").fail(f"nvbandwidth stopped with an error: {short(body['error'], 200)}")
    size = DEFAULT_SIZE if size is None else size
    listed = top.at("GPU Device list").list(top.get(body, "GPU Device list"))
    models, host = [], ""
    for i, item in enumerate(listed):
        m = _DEVICE.match(top.at("GPU Device list", i).text(item))
        if not m:
            top.at("GPU Device list", i).fail(f"{short(item)} is not '<n>: <model> (<bus id>): (<host>)'")
        models.append(m.group(2))
        host = m.group(4)
    runtime = body.get("CUDA Runtime Version")
    fingerprint: dict[str, Any] = {
        "kind": "gpu", "vendor": "NVIDIA", "model": models[0] if models else None, "count": len(models),
        "driver": top.at("Driver Version").text(top.get(body, "Driver Version")),
        "runtime": (f"CUDA {top.at('CUDA Runtime Version').whole(runtime) // 1000}."
                    f"{int(runtime) % 1000 // 10}") if runtime is not None else None,
        "host": host, "devices": [f"{i}: {m}" for i, m in enumerate(models)],
        "source": {"tool": "nvbandwidth", "git_version": str(body.get("git_version", ""))},
    }
    cases: list[ForeignCase] = []
    notes: list[str] = []
    for i, tc in enumerate(top.at("testcases").list(top.get(body, "testcases"))):
        at = top.at("testcases", i)
        tc = at.mapping(tc)
        name = at.at("name").text(at.get(tc, "name"))
        if not _NAME.match(name):
            at.at("name").fail(f"{short(name)} is no nvbandwidth test name (lower-case letters, digits and '_')")
        status = at.at("status").text(at.get(tc, "status"))
        if status == "Waived":
            notes.append(f"{name}: waived by nvbandwidth (not run on this machine): left out")
            continue
        if status != "Passed":
            at.at("status").fail(f"{short(status)} ({name}"
                                 + (f": {short(tc['error'], 200)}" if tc.get("error") else "")
                                 + "): a test that did not pass is a failure, not a figure")
        if "latency" in name:
            notes.append(f"{name}: a latency, not a bandwidth: left out")
            continue
        if name.startswith("device_to_device_bidirectional"):
            notes.append(f"{name}: its matrices (each way and the total) are not read: left out")
            continue
        cases += _cases(tc, at, name, size, version, len(models))
    seen: set[str] = set()
    for c in cases:
        if c.test_id in seen:
            top.at("testcases").fail(f"two figures of {c.test_id}: a test listed twice")
        seen.add(c.test_id)
    if not cases:
        top.at("testcases").fail("no bandwidth figure: every testcase was left out" if notes else "empty")
    return ForeignRun(tool="nvbandwidth", version=version, path=path, cases=tuple(cases), env=fingerprint,
                      per_iteration=False, notes=tuple(notes))


def _where(name: str, description: str, row: int, col: int) -> tuple[str, tuple[str, ...]]:
    """(our op, devices) of a testcase's entry at ``row``, ``col``: a copy by kernel (``*_memcpy_sm``) is our
    op of the same copy by kernel (``h2d_sm``, ``d2h_sm``, ``copy_sm``).  Between GPUs the direction comes from
    the test's name, not its description: in nvbandwidth v0.8 (testcases_ce.cpp, testcases_sm.cpp) a ``read``
    test copies from the column's GPU to the row's and a ``write`` test from the row's to the column's, while
    their descriptions print the arrows the other way round.  A one-row test's column is its GPU."""
    sm = "_sm" if name.endswith("_memcpy_sm") or "_memcpy_read_sm" in name or "_memcpy_write_sm" in name else ""
    if name.startswith("host_to_device"):
        return "h2d" + sm, ("host", f"cuda:{col}")
    if name.startswith("device_to_host"):
        return "d2h" + sm, (f"cuda:{col}", "host")
    if name == "device_local_copy":
        return "copy", (f"cuda:{col}", f"cuda:{col}")
    src, dst = (col, row) if "_read_" in name else (row, col)
    if name.startswith("device_to_device") and "bidirectional" not in name:
        return "copy" + sm, (f"cuda:{src}", f"cuda:{dst}")
    return name, (f"cuda:{src}", f"cuda:{dst}")


def _cases(tc: Mapping[str, Any], at: Field, name: str, size: int, version: str,
           gpus: int) -> list[ForeignCase]:
    description = str(tc.get("bandwidth_description", ""))
    matrix = at.at("bandwidth_matrix").list(at.get(tc, "bandwidth_matrix"))
    rows = 1 if name.startswith(("host_to_device", "device_to_host")) or name == "device_local_copy" else gpus
    if len(matrix) != rows or any(not isinstance(r, list) or len(r) != gpus for r in matrix):
        widths = ", ".join(str(len(r)) if isinstance(r, list) else "?" for r in matrix[:4])
        at.at("bandwidth_matrix").fail(f"{len(matrix)} row(s) of {widths} entries: {name} on {gpus} GPU(s) "
                                       f"has {rows} row(s) of {gpus}")
    out: list[ForeignCase] = []
    for r, row in enumerate(matrix):
        for c, value in enumerate(at.at("bandwidth_matrix", r).list(row)):
            v_at = at.at("bandwidth_matrix", r, c)
            if value == "N/A":
                continue
            try:
                gbps = float(value) if isinstance(value, str) else math.nan
            except ValueError:
                gbps = math.nan
            if not isinstance(value, str) or math.isnan(gbps):
                v_at.fail(f"{short(value)} is not a bandwidth (nvbandwidth writes a number as a string, or 'N/A')")
            v_at.positive(gbps, "GB/s")
            op, devices = _where(name, description, r, c)
            info: dict[str, Any] = {"source": "nvbandwidth", "source_version": version, "source_case": name,
                    "timer": "nvbandwidth (its figure for the buffer, turned into one buffer's time)",
                    "engine": "SM kernel" if name.endswith("_sm") else "copy engine"}
            if "bidirectional" in name:
                info["source_note"] = ("the named direction's bandwidth while the reverse copy runs" if
                                       name.endswith("_ce") else "both directions' bandwidth / 2 (one kernel)")
            where = devices[1] if devices[0] == "host" else devices[0] if devices[1] == "host" else \
                f"{devices[0]}-{devices[1]}"
            m = Measurement(op=op, size_bytes=size, samples_s=[size / (gbps * 1e9)], devices=devices, kind="copy",
                            info=info)
            out.append(ForeignCase(f"nvbandwidth::{name}[{size_token(size)}-{where}]", m))
    return out

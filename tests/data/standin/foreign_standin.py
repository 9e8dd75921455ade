"""A minimal private stand-in of ``pytest_gpucomm.foreign.read_foreign`` (issue 48 item 1, written on another
branch), for the engine's tests until that package is merged: tests/test_tool_engine_plugin.py installs it
as ``pytest_gpucomm.foreign`` only where that module cannot be imported.

It follows the contract the engine codes against: ``read_foreign(path) -> ForeignRun`` with ``cases`` of
``ForeignCase(test_id, measurement)``, our op names and sizes; a nccl-tests case per size and placement
(``info["in_place"]``), its samples the per-iteration times where ``-I 1`` wrote them, else the one mean time;
an nvbandwidth case per test and matrix cell, one sample (``h2d``/``d2h`` name the GPU, ``copy`` source and
destination; the file does not say the buffer size, so a case is of 1 MiB and the engine sets the size it
ran).  Nothing else of the real reader (checks of damaged files, the fingerprint) is here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pytest_gpucomm.compare.nccl_output import normalize_dtype, normalize_op
from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops.collectives import busbw_factor

NVB_OPS = {"host_to_device_memcpy_ce": "h2d", "device_to_host_memcpy_ce": "d2h",
           "device_to_device_memcpy_write_ce": "copy"}


class ForeignError(ValueError):
    pass


@dataclass(frozen=True)
class ForeignCase:
    test_id: str
    measurement: Measurement


@dataclass(frozen=True)
class ForeignRun:
    tool: str
    version: str
    path: str
    cases: tuple
    env: Mapping[str, str]
    per_iteration: bool


def read_foreign(path) -> ForeignRun:
    doc = json.loads(Path(path).read_text())
    if "nvbandwidth" in doc:
        return _nvbandwidth(path, doc["nvbandwidth"])
    if "results" not in doc:
        raise ForeignError(f"{path}: neither nccl-tests nor nvbandwidth JSON")
    op = normalize_op(Path(doc["args"][0]).name)
    world = int(doc["config"]["ngpus"]) * int(doc["config"].get("nthreads", 1))
    devices = tuple(f"cuda:{d['device']}" for d in doc["config"]["devices"])
    cases, per_iter = [], False
    for r in doc["results"]:
        for placement in ("out_of_place", "in_place"):
            block = r.get(f"{placement}_per_iter")
            times = block["times_us"] if block else [r[placement]["time"]]
            per_iter = per_iter or bool(block)
            m = Measurement(op, int(r["size"]), [t * 1e-6 for t in times], devices, bytes_per_iter=int(r["size"]),
                            busbw_factor=busbw_factor(op, world), world_size=world, dtype=normalize_dtype(r["type"]),
                            kind="collective", info={"in_place": placement == "in_place"})
            cases.append(ForeignCase(f"{op}[{r['size']}B-{placement}]", m))
    env = dict(e.split("=", 1) for e in doc.get("env", []) if "=" in e)
    return ForeignRun("nccl-tests", str(doc.get("version", "")), str(path), tuple(cases), env, per_iter)


def _nvbandwidth(path, doc) -> ForeignRun:
    cases = []
    for t in doc["testcases"]:
        op = NVB_OPS.get(t["name"])
        if op is None or t.get("status") != "Passed":
            continue
        for r, row in enumerate(t["bandwidth_matrix"]):
            for c, cell in enumerate(row):
                if cell == "N/A":
                    continue
                devices = (f"cuda:{c}",) if op in ("h2d", "d2h") else (f"cuda:{r}", f"cuda:{c}")
                m = Measurement(op, 1 << 20, [(1 << 20) / (float(cell) * 1e9)], devices, bytes_per_iter=1 << 20)
                cases.append(ForeignCase(f"{t['name']}[{r}-{c}]", m))
    return ForeignRun("nvbandwidth", str(doc.get("version", "")), str(path), tuple(cases), {}, False)

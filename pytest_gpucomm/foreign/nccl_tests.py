"""NVIDIA nccl-tests' JSON (``-J FILE``, format 3: nccl-tests 2.19; src/util.cu) read as a run of ours.

The file: ``version`` (its format), ``start_time``, ``args`` (the command line: ``args[0]`` is the binary,
which names the op), ``env`` (the WHOLE process environment: only the variables our own fingerprint records
are kept, ``env.variables.recorded_environment``: NCCL_/CUDA_/... and the thread counts, never a name that
looks like a secret), ``nccl_version`` (NCCL's code: 22809 is 2.28.9), ``config`` (the ranks: ``devices[]``
with each rank's host and GPU), ``results[]`` (per size: ``size``, ``count``, ``type``, ``redop``, ``root`` and,
out of place and in place, ``time`` in microseconds, ``alg_bw``, ``bus_bw``, ``nwrong``; with ``-I 1`` also
``*_per_iter`` blocks holding the raw ``times_us[]``: each iteration's time, the slowest process's, of which
nccl-tests' own statistics leave out the first ``skipped_iterations``, ``-K``).

What becomes of it (:func:`read`): one case per size and placement, op by the binary (``all_reduce_perf`` ->
``all_reduce``), ``size_bytes`` nccl-tests' size column, which is ours (``Measurement``: the op's S as
nccl-tests defines it), world size the ranks of ``config.devices``, busbw by our formula (the same as theirs).
The samples are the per-iteration times where the file has them (less the ``-K`` ones); else the one summary
time (the mean of ``iterations`` launches), and the run counts as one location, judged with the spread the
baseline knows.
A wrong result (``nwrong`` > 0) is a failure, not a figure: the file is refused.  CPU time (``-C 1``,
``cpu_time``) is not the operation's time: refused.  rccl-tests writes the same file (a fork): told apart by
``rccl`` in the binary's path or an AMD device in ``config`` -- not checked on AMD hardware.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Optional

from ..env.variables import recorded_environment
from ..measurement import Measurement
from ..ops.collectives import OPS, busbw_factor
from ..units import size_token
from .model import Field, ForeignCase, ForeignRun, short

__all__ = ["FORMATS", "BINARIES", "DTYPES", "looks_like", "read", "nccl_version_text"]

#: the JSON formats read (``JSON_FILE_VERSION`` of nccl-tests' src/util.cu; 3 is nccl-tests 2.19)
FORMATS = frozenset({3})
#: the perf binaries -> our op names (``ops.collectives.OPS``); an ``_mpi`` build has the same names
BINARIES: dict[str, str] = {spec.nccl_tests: name for name, spec in OPS.items() if spec.nccl_tests}
#: nccl-tests' type names (its ``-d``) -> ours
DTYPES = {"int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
          "uint64": "uint64", "half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16",
          "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
_PLACEMENTS = (("out_of_place", False), ("in_place", True))
_WORD = re.compile(r"^[A-Za-z0-9_]{1,32}$")
_ROOT = re.compile(r"^-?[0-9]{1,9}$")


def looks_like(doc: Mapping[str, Any]) -> bool:
    """The top-level keys nccl-tests' writer always puts first, whatever the format."""
    return "version" in doc and "args" in doc and "nccl_version" in doc and "results" in doc


def nccl_version_text(code: int) -> str:
    """NCCL's version code as its version: 22809 -> 2.28.9 (from 2.9 on: major*10000 + minor*100 + patch;
    before, major*1000 + minor*100 + patch)."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _op_of(args: list[Any], at: Field) -> tuple[str, str]:
    """(our op, the binary's name) of ``args[0]``."""
    if not args:
        at.fail("empty: the binary that wrote the file is its first entry")
    binary = os.path.basename(at.at(0).text(args[0]))
    stem = binary[:-len("_mpi")] if binary.endswith("_mpi") else binary
    if stem not in BINARIES:
        at.at(0).fail(f"{short(binary)} is no nccl-tests perf binary this pytest-gpucomm knows "
                      f"({', '.join(sorted(BINARIES))})")
    return BINARIES[stem], stem


def read(doc: Mapping[str, Any], path: str, version: Optional[str] = None) -> ForeignRun:
    """The run of a parsed nccl-tests (or rccl-tests) JSON document from the file ``path``; ``version`` the
    tool's version where the caller knows it (the binary prints it; the JSON does not hold it)."""
    top = Field(path)
    fmt = top.at("version").whole(top.get(doc, "version"))
    if fmt not in FORMATS:
        top.at("version").fail(f"JSON format {fmt}: this pytest-gpucomm reads nccl-tests JSON of format "
                               f"{', '.join(map(str, sorted(FORMATS)))} (nccl-tests 2.19)")
    args = top.at("args").list(top.get(doc, "args"))
    op, binary = _op_of(args, top.at("args"))
    config = top.at("config").mapping(top.get(doc, "config"))
    devices_at = top.at("config", "devices")
    ranks = devices_at.list(config.get("devices"))
    if not ranks:
        devices_at.fail("empty: the ranks are listed there")
    hosts, gpus, infos = [], [], []
    for i, r in enumerate(ranks):
        r = devices_at.at(i).mapping(r)
        hosts.append(devices_at.at(i, "hostname").text(r.get("hostname")))
        gpus.append(devices_at.at(i, "device").whole(r.get("device")))
        infos.append(devices_at.at(i, "device_info").text(r.get("device_info")))
    amd = any("AMD" in s or "Instinct" in s for s in infos) or "rccl" in str(args[0]).lower()
    tool, library = ("rccl-tests", "RCCL") if amd else ("nccl-tests", "NCCL")
    code = top.at("nccl_version").whole(top.get(doc, "nccl_version"))
    world = len(ranks)
    graph = config.get("graph")
    per_iter = config.get("per_iter_timing") == "true"
    env_list = top.at("env").list(doc.get("env", []))
    environ: dict[str, str] = {}
    for i, item in enumerate(env_list):
        name, eq, value = top.at("env", i).text(item).partition("=")
        if eq:
            environ[name] = value
    fingerprint: dict[str, Any] = {
        "kind": "gpu", "vendor": "AMD" if amd else "NVIDIA", "model": infos[0], "count": world,
        "comm_library": f"{library} {nccl_version_text(code)}", "host": hosts[0],
        "hosts": sorted(set(hosts)), "devices": [f"{h}:{g} {d}" for h, g, d in zip(hosts, gpus, infos)],
        "env": recorded_environment(environ), "source": {"tool": tool, "binary": binary},
    }
    tool_version = version or f"JSON format {fmt}"
    date = doc.get("start_time")
    date = top.at("start_time").text(date).strip().replace(" ", "T") if date is not None else ""
    if date:
        fingerprint["date"] = date
    results = top.at("results").list(top.get(doc, "results"))
    cases: list[ForeignCase] = []
    for i, row in enumerate(results):
        cases += _cases(top.at("results", i).mapping(row), top.at("results", i), op, binary, world, gpus, tool,
                        tool_version, per_iter, graph)
    if not cases:
        top.at("results").fail("no result: the file holds no figure")
    return ForeignRun(tool=tool, version=tool_version, path=path, cases=tuple(cases), env=fingerprint,
                      per_iteration=per_iter, date=date)


def _cases(row: Mapping[str, Any], at: Field, op: str, binary: str, world: int, gpus: list[int], tool: str,
           version: str, per_iter: bool, graph: Any) -> list[ForeignCase]:
    size = at.at("size").whole(at.get(row, "size"))
    if size <= 0:
        at.at("size").fail(f"{size} bytes: a size is positive")
    typ = at.at("type").text(at.get(row, "type"))
    dtype = DTYPES.get(typ.strip())
    if dtype is None:
        at.at("type").fail(f"{short(typ)} is no nccl-tests type ({', '.join(DTYPES)})")
    redop = at.at("redop").text(row.get("redop", "none")).strip()
    if not _WORD.match(redop):
        at.at("redop").fail(f"{short(redop)} is no reduction name (letters, digits and '_')")
    root = at.at("root").text(row.get("root", "-1")).strip()
    if not _ROOT.match(root):
        at.at("root").fail(f"{short(root)} is no root rank (a whole number, -1 for none)")
    iterations = row.get("actual_iterations")
    out: list[ForeignCase] = []
    for key, in_place in _PLACEMENTS:
        if key not in row or row[key] is None:  # a trace replay writes no out-of-place body
            continue
        part = at.at(key).mapping(row[key])
        if "cpu_time" in part and "time" not in part:
            at.at(key, "cpu_time").fail("CPU time (nccl-tests -C 1) is not the operation's time: run it without -C")
        wrong = part.get("nwrong")
        if wrong is not None:  # null: not checked (-c 0, or alltoall in place)
            n_wrong = at.at(key, "nwrong").whole(wrong) if not isinstance(wrong, str) else at.at(key, "nwrong").fail(
                f"{short(wrong)} is not a count of wrong elements")
            if n_wrong != 0:
                at.at(key, "nwrong").fail(f"{n_wrong} wrong elements at {size_token(size)} ({binary}): a wrong result "
                                          "is a failure, not a figure")
        mean_us = at.at(key, "time").positive(at.get(part, "time"), "microseconds")
        block = row.get(f"{key}_per_iter")
        if per_iter and block is not None:
            b_at = at.at(f"{key}_per_iter")
            times = b_at.at("times_us").list(b_at.get(b_at.mapping(block), "times_us"))
            if not times:
                b_at.at("times_us").fail("empty: no iteration was timed")
            samples = [b_at.at("times_us", j).positive(t, "microseconds") * 1e-6 for j, t in enumerate(times)]
            skip = b_at.at("skipped_iterations").whole(block.get("skipped_iterations", 0))
            if not 0 <= skip < len(samples):
                b_at.at("skipped_iterations").fail(f"{skip} of {len(samples)} iterations: leaves no sample")
            samples = samples[skip:]  # -K: the leading iterations its own statistics leave out
            timer = "device events (nccl-tests -I 1: each iteration between CUDA events)"
        else:
            samples = [mean_us * 1e-6]
            timer = (f"host clock (nccl-tests: the mean of {iterations} launches"
                     + (" replayed as a CUDA graph" if graph else "") + ", one figure)")
        placement = "in-place" if in_place else "out-of-place"
        params = [typ.strip(), redop] + ([f"root{root}"] if root not in ("-1", "") else []) + [size_token(size),
                                                                                                placement]
        info: dict[str, Any] = {"source": tool, "source_version": version, "source_case": binary, "timer": timer,
                "backend": "rccl" if tool == "rccl-tests" else "nccl", "in_place": in_place, "graph": bool(graph)}
        if not (per_iter and block is not None):
            info["batch"] = int(iterations) if isinstance(iterations, int) and iterations > 0 else 1
        m = Measurement(op=op, size_bytes=size, samples_s=samples, devices=tuple(f"cuda:{g}" for g in gpus),
                        busbw_factor=busbw_factor(op, world), world_size=world, dtype=dtype, kind="collective",
                        info=info)
        out.append(ForeignCase(f"{tool}::{binary}[{'-'.join(params)}]", m))
    return out

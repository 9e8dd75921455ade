"""What NVIDIA nccl-tests prints, read: the rows of a perf binary's output (:func:`parse_nccl_tests_output`),
the facts of its header and footer (:func:`parse_nccl_tests_summary`), and the names of its programs, ops
and types as pytest-gpucomm's (:func:`normalize_op`, :func:`normalize_dtype`).  The comparison with our
figures is :mod:`.nccl_tests`'.

Conventions (taken from nccl-tests src/common.cu, src/util.cu and doc/PERFORMANCE.md):

* "size" column = max(send bytes, recv bytes) of one rank, i.e. the full output buffer for
  all_gather, the full input buffer for reduce_scatter, the full send buffer for alltoall;
  "count" column = the element count passed to the NCCL call (per-rank chunk for
  all_gather / reduce_scatter, per-peer chunk for alltoall).
* time is in microseconds: wall-clock time of ``-n`` back-to-back launches divided by
  ``-n`` (and by ``-G`` launches in graph mode), i.e. a mean, not a median.
* algbw = size / time (GB/s, 1e9 bytes); busbw = algbw * factor with factor
  2(n-1)/n all_reduce, (n-1)/n all_gather / reduce_scatter / alltoall,
  1 broadcast / reduce / sendrecv.

Pure: the standard library and the op definitions (``pytest_gpucomm.ops.collectives.OPS``, which import no
torch, pytest or numpy).
"""

from __future__ import annotations

import re

from ..ops.collectives import OPS

__all__ = ["NCCL_TESTS_BINARIES", "OP_ALIASES", "DTYPE_ALIASES", "DEFAULT_DTYPE", "normalize_op", "normalize_dtype",
           "parse_nccl_tests_output", "parse_nccl_tests_summary"]

#: nccl-tests binary -> our op name, in the order of OPS.
NCCL_TESTS_BINARIES: dict[str, str] = {spec.nccl_tests: name for name, spec in OPS.items() if spec.nccl_tests}


def _aliases() -> dict[str, str]:
    """Any spelling of an op -> our op name: ours, the nccl-tests program's stem, each without its
    underscores, and the op's own ``aliases`` (NCCL API names such as ``bcast``)."""
    out: dict[str, str] = {}
    for name, spec in OPS.items():
        stem = spec.nccl_tests[:-len("_perf")] if spec.nccl_tests.endswith("_perf") else spec.nccl_tests
        for alias in (name, name.replace("_", ""), stem, stem.replace("_", ""), *spec.aliases):
            if alias:
                out.setdefault(alias, name)
    return out


#: Any spelling of an op (nccl-tests program name, NCCL API, ours) -> our op name.
OP_ALIASES: dict[str, str] = _aliases()
#: dtype spellings (nccl-tests "type" column, torch, short names) -> canonical name.
DTYPE_ALIASES = {
    "float": "float32", "float32": "float32", "fp32": "float32", "f32": "float32",
    "half": "float16", "float16": "float16", "fp16": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "double": "float64", "float64": "float64", "fp64": "float64",
    "int8": "int8", "char": "int8", "uint8": "uint8",
    "int32": "int32", "int": "int32", "uint32": "uint32",
    "int64": "int64", "uint64": "uint64",
    "f8e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
}
DEFAULT_DTYPE = "float32"  # nccl-tests default (-d float)

_TIMESTAMP_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIMESTAMP_TIME_RE = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_PROGRAM_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")


def normalize_op(name: str | None) -> str | None:
    if name is None:
        return None
    key = str(name).strip().lower()
    key = key.rsplit("/", 1)[-1]
    if key.endswith("_perf") or "_perf_" in key:  # all_reduce_perf, all_reduce_perf_mpi
        key = key[: key.index("_perf")]
    return OP_ALIASES.get(key, OP_ALIASES.get(key.replace("_", ""), key))


def normalize_dtype(name: str | None) -> str:
    if not name:
        return DEFAULT_DTYPE
    key = str(name).strip().lower()
    if key.startswith("torch."):
        key = key[len("torch."):]
    return DTYPE_ALIASES.get(key, key)


def _num(tok: str) -> float:
    """nccl-tests prints with %.2f/%.1f/%.0f or %.1e when the field overflows."""
    return float(tok)


def _wrong(tok: str) -> int | None:
    if tok.upper() == "N/A":
        return None
    return int(float(tok))


def parse_nccl_tests_output(text: str, op: str | None = None) -> list[dict]:
    """Parse the stdout of one nccl-tests perf binary.

    Returns one dict per (data row, placement):
    ``{op, size_bytes, count, type, dtype, redop, root, in_place, time_us, algbw, busbw,
    wrong}`` where ``wrong`` is None when the column says N/A (-c 0, or alltoall
    in-place).  ``op`` is taken from the "# Collective test starting: <prog>" line
    unless given.  Lines starting with '#' and unparseable lines (NCCL INFO/WARN, error
    messages) are ignored.  Handles the per-iteration (-I 1, 8 values per placement)
    and timestamp (-S 1) layouts, and rows with only the in-place part.
    """
    cur_op = normalize_op(op) if op else None
    rows: list[dict] = []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if op is None:
                m = _PROGRAM_RE.match(s)
                if m:
                    cur_op = normalize_op(m.group(1))
            continue
        toks = s.split()
        if len(toks) < 9 or not (toks[0].isdigit() and toks[1].isdigit()):
            continue
        # strip trailing "%Y-%m-%d %H:%M:%S" timestamp (-S 1)
        if len(toks) >= 2 and _TIMESTAMP_DATE_RE.match(toks[-2]) and _TIMESTAMP_TIME_RE.match(toks[-1]):
            toks = toks[:-2]
        size_bytes, count = int(toks[0]), int(toks[1])
        typ, redop = toks[2], toks[3]
        try:
            root = int(toks[4])
        except ValueError:
            continue
        vals = toks[5:]
        if len(vals) == 8:          # standard: oop(time algbw busbw wrong) ip(...)
            groups = [(False, vals[0:4]), (True, vals[4:8])]
        elif len(vals) == 16:       # -I 1: oop(... + i_min i_max i_p99 i_cv%) ip(...)
            groups = [(False, vals[0:4]), (True, vals[8:12])]
        elif len(vals) == 4:        # out-of-place body omitted (trace replay)
            groups = [(True, vals[0:4])]
        else:
            continue
        try:
            parsed = [
                (in_place, _num(g[0]), _num(g[1]), _num(g[2]), _wrong(g[3]))
                for in_place, g in groups
            ]
        except ValueError:
            continue
        for in_place, t, alg, bus, wrong in parsed:
            rows.append({
                "op": cur_op,
                "size_bytes": size_bytes,
                "count": count,
                "type": typ,
                "dtype": normalize_dtype(typ),
                "redop": redop,
                "root": root,
                "in_place": in_place,
                "time_us": t,
                "algbw": alg,
                "busbw": bus,
                "wrong": wrong,
            })
    return rows


def parse_nccl_tests_summary(text: str) -> dict:
    """Header/footer facts: version, NCCL header/library codes, nGpus, graph launches,
    iters, "Out of bounds values", "Avg bus bandwidth"."""
    out: dict = {}
    m = re.search(r"^#\s*nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", text, re.M)
    if m:
        out.update(nccl_tests_version=m.group(1), nccl_headers=int(m.group(2)),
                   nccl_library=int(m.group(3)))
    for line in text.splitlines():
        pm = _PROGRAM_RE.match(line.strip())
        if pm:
            out["program"] = pm.group(1)
            out["op"] = normalize_op(pm.group(1))
            break
    m = re.search(r"^#\s*nThread (\d+) nGpus (\d+) .*?warmup iters: (\d+) iters: (\d+) agg iters: (\d+)"
                  r" validation: (\d+) graph: (\d+)", text, re.M)
    if m:
        out.update(nthreads=int(m.group(1)), ngpus=int(m.group(2)), warmup_iters=int(m.group(3)),
                   iters=int(m.group(4)), agg_iters=int(m.group(5)), validation=int(m.group(6)),
                   graph=int(m.group(7)))
    m = re.search(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)", text, re.M)
    if m:
        out["out_of_bounds"] = int(m.group(1))
    m = re.search(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)", text, re.M)
    if m:
        try:
            out["avg_busbw"] = float(m.group(1))
        except ValueError:
            pass
    out["ranks"] = len(re.findall(r"^#\s*Rank\s+\d+\s+Group", text, re.M)) or None
    return out

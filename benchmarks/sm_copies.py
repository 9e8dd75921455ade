"""Our copies by kernel (SM copies), by the copy engines and both ways between host and GPU, against nvbandwidth's
tests of the same copies on the same machine (issue 48, items 3 and 4).

    python benchmarks/sm_copies.py --nvbandwidth PATH [--sizes 1,4,16,64,256,1024] [--variants] [--json OUT]
    python benchmarks/sm_copies.py --nvbandwidth-json DIR ...   (nvbandwidth's -j files recorded as DIR/b<MiB>.json)

On GPU 0, at each size (MiB), through the package's own measuring code (``pytest_gpucomm.ops.copies``): host->device
and device->host by the copy engines and by the copy kernel, both ways at once (per direction), and a copy within
the GPU by each; then nvbandwidth ``-j -b <MiB> -t <its tests>`` (or its recorded files).  Prints ours / theirs
per size and test, and exits 1 where a ratio is under 0.97 from 1 MiB up (2 on a usage error).  Pairs:

- ``h2d`` / ``d2h`` -> ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce``;
- ``host_bidir`` per direction, each direction's own time while the other copies (``info["h2d_gbps"]``,
  ``["d2h_gbps"]``) -> ``host_to_device_bidirectional_memcpy_ce`` / ``device_to_host_bidirectional_memcpy_ce``;
- ``h2d_sm`` / ``d2h_sm`` -> ``host_to_device_memcpy_sm`` / ``device_to_host_memcpy_sm``;
- ``host_bidir_sm`` (one kernel both ways, the total / 2) -> ``host_to_device_bidirectional_memcpy_sm`` and
  ``device_to_host_bidirectional_memcpy_sm`` (the same split-warp kernel in nvbandwidth: the total / 2);
- ``copy`` and ``copy_sm`` within GPU 0 -> ``device_local_copy`` (nvbandwidth's is a copy-engine copy; it is the
  reference for both).

``--variants`` measures the SM copies again with each kernel shape of :data:`VARIANTS` (programs per SM, words per
chunk, warps, the layout of both ways) and prints each against nvbandwidth, so that the default
(``pytest_gpucomm.ops.sm_copy.DEFAULT_CONFIG``) can be picked on the GPU.  Runs in under 4 minutes on one H100 with
``--min-time 0.2`` (the default), nvbandwidth included.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpucomm.foreign import ForeignRun, foreign_of, read_foreign  # noqa: E402
from pytest_gpucomm.ops.sm_copy import DEFAULT_CONFIG, KernelConfig  # noqa: E402

MIB = 1024 * 1024

SIZES_MIB = (1, 4, 16, 64, 256, 1024)
#: a ratio under this, from ``GATED_FROM_MIB`` up, fails the run (the issue's target)
TARGET = 0.97
GATED_FROM_MIB = 1
#: (our op, how its figure is read, nvbandwidth's test): "gbps" the measurement's own figure, "h2d_gbps" /
#: "d2h_gbps" an info entry
PAIRS = (
    ("h2d", "gbps", "host_to_device_memcpy_ce"),
    ("d2h", "gbps", "device_to_host_memcpy_ce"),
    ("host_bidir", "h2d_gbps", "host_to_device_bidirectional_memcpy_ce"),
    ("host_bidir", "d2h_gbps", "device_to_host_bidirectional_memcpy_ce"),
    ("h2d_sm", "gbps", "host_to_device_memcpy_sm"),
    ("d2h_sm", "gbps", "device_to_host_memcpy_sm"),
    ("host_bidir_sm", "gbps", "host_to_device_bidirectional_memcpy_sm"),
    ("host_bidir_sm", "gbps", "device_to_host_bidirectional_memcpy_sm"),
    ("copy", "gbps", "device_local_copy"),
    ("copy_sm", "gbps", "device_local_copy"),
)
SM_OPS = ("h2d_sm", "d2h_sm", "host_bidir_sm", "copy_sm")
#: pairs printed but not held to TARGET: nvbandwidth has no copy by kernel within one GPU, and its
#: ``device_local_copy`` is a copy-engine copy (another path through the hardware), so our copy by kernel beside
#: it is for reading only (on one H100 it ran 1.7-5.5x faster at 1-16 MiB, where both buffers sit in the 50 MB L2
#: and the kernel's loop re-reads them there, and 0.94-0.96x from 256 MiB up)
UNGATED = frozenset({("copy_sm", "device_local_copy")})
#: the kernel shapes ``--variants`` tries (the first is the default)
VARIANTS = (
    DEFAULT_CONFIG,
    KernelConfig(programs_per_sm=2, block=4096, warps=8, bidir_layout="programs"),
    KernelConfig(programs_per_sm=1, block=8192, warps=16, bidir_layout="programs"),
    KernelConfig(programs_per_sm=4, block=2048, warps=8, bidir_layout="programs"),
    KernelConfig(programs_per_sm=2, block=4096, warps=8, bidir_layout="alternate"),
    KernelConfig(programs_per_sm=2, block=4096, warps=8, bidir_layout="paired"),
    KernelConfig(programs_per_sm=4, block=2048, warps=8, bidir_layout="paired"),
    KernelConfig(programs_per_sm=8, block=1024, warps=4, bidir_layout="paired"),
    KernelConfig(programs_per_sm=8, block=512, warps=4, bidir_layout="alternate"),
    KernelConfig(programs_per_sm=8, block=256, warps=2, bidir_layout="alternate"),
    KernelConfig(programs_per_sm=16, block=256, warps=2, bidir_layout="alternate"),
)


def nvbandwidth_tests() -> list[str]:
    """nvbandwidth's tests that the pairs name, each once, in order."""
    return list(dict.fromkeys(test for _, _, test in PAIRS))


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: MiB, comma-separated, each a whole number of at least 1; ValueError naming the bad one."""
    out = []
    for part in text.split(","):
        p = part.strip()
        if not p.isdigit() or int(p) < 1:
            raise ValueError(f"--sizes {text!r}: {p!r} is not a whole number of MiB of at least 1")
        out.append(int(p))
    return out


def gpu0_figures(run: ForeignRun) -> dict[str, float]:
    """An nvbandwidth run read by the plugin's own reader (:mod:`pytest_gpucomm.foreign`: the checks and messages
    of ``gpucomm compare``): each test's figure on GPU 0 (GB/s) by its name; a test the reader left out (waived,
    a latency) is absent."""
    return {str(c.measurement.info["source_case"]): c.measurement.gbps for c in run.cases
            if all(d in ("host", "cuda:0") for d in c.measurement.devices)}


def run_nvbandwidth(binary: str, mib: int, tests: Sequence[str]) -> dict[str, float]:
    cmd = [binary, "-j", "-b", str(mib), "-t", *tests]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    start = proc.stdout.find("{")
    if start < 0:
        raise SystemExit(f"nvbandwidth -b {mib}: no JSON (exit {proc.returncode}): {proc.stderr[-400:]}")
    try:
        return gpu0_figures(foreign_of(json.loads(proc.stdout[start:]), f"{' '.join(cmd)} (its output)",
                                       nvbandwidth_size=mib * MIB))
    except ValueError as e:  # json's errors and the reader's ForeignError
        raise SystemExit(f"nvbandwidth -b {mib}: {e}") from None


def recorded_nvbandwidth(folder: Path, mib: int) -> dict[str, float]:
    try:
        return gpu0_figures(read_foreign(folder / f"b{mib}.json", nvbandwidth_size=mib * MIB))
    except ValueError as e:
        raise SystemExit(str(e)) from None


def our_figure(row: Mapping[str, Any], how: str) -> Optional[float]:
    """Our figure of a pair: the row's ``gbps``, or an entry of its ``info``."""
    value = row.get("gbps") if how == "gbps" else (row.get("info") or {}).get(how)
    return float(value) if isinstance(value, (int, float)) else None


def compare(ours: Mapping[tuple[str, int], Mapping[str, Any]], theirs: Mapping[int, Mapping[str, float]],
            ops: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
    """Every pair (of ``ops``, default all) at every size that both sides have: size (MiB), op, how, test,
    ours, theirs, ratio, ``gated`` (held to ``TARGET``: not one of :data:`UNGATED`) and ``low`` (gated and under
    ``TARGET`` from ``GATED_FROM_MIB`` up)."""
    wanted = set(ops) if ops is not None else None
    out = []
    for mib in sorted(theirs):
        for op, how, test in PAIRS:
            if wanted is not None and op not in wanted:
                continue
            row = ours.get((op, mib))
            mine = our_figure(row, how) if row is not None else None
            them = theirs[mib].get(test)
            if mine is None or them is None:
                continue
            ratio = mine / them
            gated = (op, test) not in UNGATED
            out.append({"mib": mib, "op": op, "how": how, "test": test, "ours": mine, "theirs": them,
                        "ratio": ratio, "gated": gated, "low": gated and mib >= GATED_FROM_MIB and ratio < TARGET})
    return out


def table(rows: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    """The comparison as lines of at most 120 columns."""
    lines = [title, f"{'MiB':>5}  {'ours':<24} {'nvbandwidth':<40} {'ours GB/s':>10} {'theirs':>9} {'ratio':>6}"]
    for r in rows:
        ours = r["op"] if r["how"] == "gbps" else f"{r['op']} {r['how'].split('_')[0]}"
        flag = f"  < {TARGET}" if r["low"] else ("" if r["gated"] else "  (not held)")
        lines.append(f"{r['mib']:>5}  {ours:<24} {r['test']:<40} {r['ours']:>10.2f} {r['theirs']:>9.2f} "
                     f"{r['ratio']:>6.3f}{flag}")
    return lines


def measure_ours(mib: int, ops: Sequence[str], min_time_s: float, kernel: Optional[KernelConfig] = None,
                 pool: Any = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Our measurements of ``ops`` at ``mib`` MiB on cuda:0, through the package's own code: op -> its row."""
    from pytest_gpucomm.ops import copies
    from pytest_gpucomm.ops.timing import TimingSettings

    settings = TimingSettings(min_time_s=min_time_s)
    pool = pool or copies.BufferPool()
    size = mib << 20
    out = {}
    for op in ops:
        engine = "sm" if op.endswith("_sm") else "ce"
        base = op[:-3] if engine == "sm" else op
        if base in ("h2d", "d2h"):
            m = copies.measure_host_device("cuda:0", size, base, settings, pool, engine, kernel)
        elif base == "host_bidir":
            m = copies.measure_host_both_ways("cuda:0", size, settings, pool, engine, kernel)
        else:
            m = copies.measure_copy("cuda:0", "cuda:0", size, settings, pool, engine=engine, kernel=kernel)
        out[(op, mib)] = {"gbps": m.algbw_gbps, "info": dict(m.info)}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--nvbandwidth", help="the nvbandwidth binary, run with -j -b <MiB> -t <tests>")
    src.add_argument("--nvbandwidth-json", help="a folder of nvbandwidth's -j files, b<MiB>.json")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES_MIB)), help="MiB, comma-separated. Default: %(default)s")
    ap.add_argument("--min-time", type=float, default=0.2, help="our seconds per case. Default: %(default)s")
    ap.add_argument("--variants", action="store_true", help="also each kernel shape of VARIANTS (SM copies)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("sm_copies: needs a GPU (torch sees none)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    theirs = {}
    for mib in sizes:
        theirs[mib] = (run_nvbandwidth(args.nvbandwidth, mib, nvbandwidth_tests()) if args.nvbandwidth
                       else recorded_nvbandwidth(Path(args.nvbandwidth_json), mib))
    ours: dict[tuple[str, int], dict[str, Any]] = {}
    from pytest_gpucomm.ops.copies import BufferPool

    pool = BufferPool()
    for mib in sizes:
        ours.update(measure_ours(mib, [op for op in dict.fromkeys(op for op, _, _ in PAIRS)], args.min_time,
                                 pool=pool))
    rows = compare(ours, theirs)
    device = torch.cuda.get_device_name(0)
    title = f"ours / nvbandwidth on {device}, GPU 0 (default kernel: {DEFAULT_CONFIG.describe()})"
    print("\n".join(table(rows, title)))
    doc: dict[str, Any] = {"device": device, "sizes_mib": sizes, "rows": rows, "nvbandwidth": theirs,
                           "ours": {f"{op}@{mib}": v for (op, mib), v in ours.items()}, "variants": []}
    if args.variants:
        for cfg in VARIANTS[1:]:
            mine: dict[tuple[str, int], dict[str, Any]] = {}
            for mib in sizes:
                mine.update(measure_ours(mib, SM_OPS, args.min_time, cfg, pool))
            vrows = compare(mine, theirs, SM_OPS)
            print("\n".join(table(vrows, f"variant: {cfg.describe()}")))
            doc["variants"].append({"config": cfg.describe(), "rows": vrows})
    pool.clear()
    print(f"sm_copies: {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    low = [r for r in rows if r["low"]]
    if low:
        held = sum(1 for r in rows if r["gated"] and r["mib"] >= GATED_FROM_MIB)
        print(f"sm_copies: {len(low)} of {held} default figures held to the target under {TARGET} x nvbandwidth "
              f"from {GATED_FROM_MIB} MiB up")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

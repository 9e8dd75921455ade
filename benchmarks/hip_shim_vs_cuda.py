"""The HIP copy engine, run on an NVIDIA GPU through the hip shim, against the CUDA engine: side by side.

    python benchmarks/hip_shim_vs_cuda.py [--sizes 64KiB,1MiB,1GiB] [--rounds 3] [--min-time 0.1] [--json OUT]

Builds tests/hipshim/hipshim.c (the HIP entry points of ``pytest_gpucomm.ops.engines.HIP``, forwarded to
the CUDA driver) with the C compiler (``$CC``, else ``cc``) into a temporary directory, or takes
``--shim PATH``, and measures every copy with the CUDA engine (``GPUCOMM_COPY_CALL=cuda``) and with the
HIP engine (``GPUCOMM_COPY_CALL=hip``, ``GPUCOMM_HIP_LIBRARY`` = the shim), alternating, ``--rounds``
times each, in this one process with ``measure_copy`` / ``measure_host_device`` as the suites measure.
The copies: cuda:0 -> cuda:1 one way and both ways (cuda:0 -> cuda:0 one way on a single GPU), pinned
host -> cuda:0 and cuda:0 -> host; the sizes 64 KiB to 1 GiB by factors of 4.  An engine's figure is the
median over its rounds of each measurement's median GB/s; the ratio is the median over the rounds of the
ratio of a round's two measurements, taken back to back in alternating order, so that a drift of the machine
cancels.  Each measurement must name the engine asked for (``info["engine"]``), or the run stops.

What it shows: the shim adds one forwarding call per copy, so the two engines issue the same driver
copies; equal figures say the HIP engine's table (its signature, the copy kinds, the batching around it)
measures what the CUDA engine measures.  Target: hip/cuda within ``--tolerance`` (3 %) of 1 at every size
from ``--target-from`` (64 KiB).  A row outside the target is FAIL when each
engine's own rounds spread (interquartile range over median) less than the target, and NOISY when one
engine's own rounds spread more: then this machine's copy cannot resolve 3 % whichever engine runs it
(host->device from 256 KiB to 16 MiB on one H200 on 2026-12-01: the CUDA engine's own rounds ran 27-36
GB/s at 256 KiB).  Exit code 0 when every ratio meets the target, 1 when a row FAILs, 3 when no row fails
but some are NOISY, 2 when it cannot run (no CUDA GPU, no compiler, the shim does not build, a bad
argument).

Importing this module imports no torch: :func:`compare` does when it measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pytest_gpucomm.ops import engines
from pytest_gpucomm.units import format_size, parse_size

TOLERANCE = 0.03
#: rounds per engine: on one H200 (2026-12-01) with 3 rounds and the median of each engine's own figures, 1 or
#: 3 of 24 rows were 3.3-9.6 % apart, at sizes that changed between runs and in either direction (device-local
#: 4 MiB copies near 1.4 TB/s, host->device at 1 MiB): the copies' own round-to-round noise, not the engine
ROUNDS = 7
TARGET_FROM = 64 << 10
SIZES = [(64 << 10) << (2 * k) for k in range(8)]  # 64 KiB .. 1 GiB, factor 4
BUILD_HELPER = Path(__file__).resolve().parent.parent / "tests" / "hipshim" / "build.py"


def load_build_helper() -> Any:
    """tests/hipshim/build.py, loaded by its path (the tests are not a package)."""
    spec = importlib.util.spec_from_file_location("gpucomm_hipshim_build", BUILD_HELPER)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {BUILD_HELPER}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copies(n_gpus: int) -> list[tuple[str, Callable[..., Any]]]:
    """(label, measure(size, settings, pool) -> Measurement) per copy compared."""
    from pytest_gpucomm.ops.copies import measure_copy, measure_host_device

    dst = "cuda:1" if n_gpus >= 2 else "cuda:0"
    out: list[tuple[str, Callable[..., Any]]] = [
        (f"copy cuda:0->{dst}", lambda size, st, pool: measure_copy("cuda:0", dst, size, st, pool)),
    ]
    if n_gpus >= 2:
        out.append(("copy_bidir cuda:0<->cuda:1",
                    lambda size, st, pool: measure_copy("cuda:0", "cuda:1", size, st, pool, both_ways=True)))
    out.append(("h2d host->cuda:0", lambda size, st, pool: measure_host_device("cuda:0", size, "h2d", st, pool)))
    out.append(("d2h cuda:0->host", lambda size, st, pool: measure_host_device("cuda:0", size, "d2h", st, pool)))
    return out


def _measure_with(engine: str, shim: Path, run: Callable[[], Any]) -> Any:
    """Run ``run`` with the copy engine ``engine`` ("cuda" or "hip" through ``shim``) selected."""
    saved = {k: os.environ.get(k) for k in (engines.ENV_CALL, engines.ENV_HIP_LIBRARY)}
    os.environ[engines.ENV_CALL] = engine
    if engine == "hip":
        os.environ[engines.ENV_HIP_LIBRARY] = str(shim)
    else:
        os.environ.pop(engines.ENV_HIP_LIBRARY, None)
    try:
        m = run()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    want = engines.TABLES[engine].label
    if m.info.get("engine") != want:
        raise RuntimeError(f"asked for the {engine} engine, but the copy ran with {m.info.get('engine')!r} "
                           f"({m.info.get('engine_note', 'no note')})")
    return m


def compare(shim: Path, sizes: Sequence[int], rounds: int = ROUNDS, min_time_s: float = 0.1,
            progress: Optional[Callable[[dict[str, Any]], None]] = None) -> list[dict[str, Any]]:
    """One row per copy and size: ``copy``, ``size_bytes``, ``cuda_gbps``, ``hip_gbps`` (each the median
    over ``rounds`` of a measurement's median GB/s), ``ratio`` (hip / cuda: the median over the rounds of
    the ratio of the round's two measurements, taken back to back), and the rounds' figures."""
    import torch

    from pytest_gpucomm.ops.copies import BufferPool
    from pytest_gpucomm.ops.timing import TimingSettings

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU visible to torch")
    settings = TimingSettings(min_time_s=min_time_s)
    pool = BufferPool()
    rows = []
    try:
        for label, measure in copies(torch.cuda.device_count()):
            for size in sizes:
                figures: dict[str, list[float]] = {"cuda": [], "hip": []}
                for r in range(rounds):
                    order = ("cuda", "hip") if r % 2 == 0 else ("hip", "cuda")
                    for engine in order:
                        m = _measure_with(engine, shim,
                                          lambda measure=measure, size=size: measure(size, settings, pool))
                        figures[engine].append(m.gbps)
                cuda, hip = statistics.median(figures["cuda"]), statistics.median(figures["hip"])
                # the ratio of each round's pair (measured back to back), then their median: a drift of the
                # machine between rounds cancels in a pair, and one odd round does not decide
                paired = [h / c for h, c in zip(figures["hip"], figures["cuda"])]
                row = {"copy": label, "size_bytes": size, "cuda_gbps": cuda, "hip_gbps": hip,
                       "ratio": statistics.median(paired), "paired_ratios": paired,
                       "cuda_rounds_gbps": figures["cuda"], "hip_rounds_gbps": figures["hip"]}
                rows.append(row)
                if progress is not None:
                    progress(row)
    finally:
        pool.clear()
    return rows


def noise(row: dict[str, Any]) -> float:
    """How far one engine's own rounds spread: the larger over the two engines of the interquartile range of
    its rounds' figures over their median (0 with fewer than 3 rounds, or without the rounds)."""
    spreads = [0.0]
    for key in ("cuda_rounds_gbps", "hip_rounds_gbps"):
        values = sorted(row.get(key) or [])
        if len(values) >= 3:
            q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
            spreads.append((q3 - q1) / statistics.median(values))
    return max(spreads)


def verdict(row: dict[str, Any], tolerance: float = TOLERANCE, target_from: int = TARGET_FROM) -> Optional[str]:
    """PASS (hip/cuda within ``tolerance`` of 1), FAIL (outside it while each engine's own rounds spread less
    than ``tolerance``: the engines differ), NOISY (outside it, but one engine's own rounds spread more than
    ``tolerance`` (:func:`noise`): this machine's copy cannot resolve the target, whichever engine runs it), or
    None below ``target_from`` (shown, not checked)."""
    ok = within(row, tolerance, target_from)
    if ok is None:
        return None
    return "PASS" if ok else ("NOISY" if noise(row) > tolerance else "FAIL")


def within(row: dict[str, Any], tolerance: float = TOLERANCE, target_from: int = TARGET_FROM) -> Optional[bool]:
    """Whether the row meets the target; None for a size below ``target_from`` (not checked)."""
    if row["size_bytes"] < target_from:
        return None
    return abs(row["ratio"] - 1) <= tolerance


def line(row: dict[str, Any], tolerance: float = TOLERANCE, target_from: int = TARGET_FROM) -> str:
    mark = verdict(row, tolerance, target_from) or "-"
    return (f"{row['copy']:<27} {format_size(row['size_bytes']):>9} {row['cuda_gbps']:>10.1f} "
            f"{row['hip_gbps']:>10.1f} {row['ratio']:>9.3f} {noise(row):>6.1%}  {mark}")


HEADER = f"{'copy':<27} {'size':>9} {'cuda GB/s':>10} {'hip GB/s':>10} {'hip/cuda':>9} {'noise':>6}  target"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, metavar="SIZE[,SIZE]",
                    help="comma-separated sizes. Default: 64KiB to 1GiB by factors of 4")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"measurements per engine, alternating. Default: {ROUNDS}")
    ap.add_argument("--min-time", type=float, default=0.1, metavar="SECONDS",
                    help="measuring time per measurement (--gpucomm-min-time). Default: 0.1")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help=f"Default: {TOLERANCE}")
    ap.add_argument("--target-from", default="64KiB", help="smallest size the target applies to. Default: 64KiB")
    ap.add_argument("--shim", default=None, metavar="PATH",
                    help="a built libhipshim.so. Default: build tests/hipshim/hipshim.c into a temporary directory")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the rows and the verdict as JSON")
    args = ap.parse_args(argv)
    try:
        sizes = ([parse_size(s, "--sizes") for s in args.sizes.split(",")] if args.sizes else SIZES)
        target_from = parse_size(args.target_from, "--target-from")
    except ValueError as e:
        print(f"hip_shim_vs_cuda: error: {e}", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"hip_shim_vs_cuda: error: --rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    import torch

    if not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
        print(f"hip_shim_vs_cuda: error: needs a CUDA GPU visible to a CUDA build of torch (torch "
              f"{torch.__version__})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hipshim-") as tmp:
        if args.shim:
            shim = Path(args.shim).resolve()
            if not shim.is_file():
                print(f"hip_shim_vs_cuda: error: --shim {args.shim}: no such file", file=sys.stderr)
                return 2
        else:
            build = load_build_helper()
            try:
                shim = build.build_shim(Path(tmp))
            except build.BuildError as e:
                print(f"hip_shim_vs_cuda: error: cannot build the shim: {e}", file=sys.stderr)
                return 2
        print(f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, torch {torch.__version__}; "
              f"shim: {shim}")
        print(HEADER)
        try:
            rows = compare(shim, sizes, args.rounds, args.min_time,
                           progress=lambda row: print(line(row, args.tolerance, target_from), flush=True))
        except RuntimeError as e:
            print(f"hip_shim_vs_cuda: error: {e}", file=sys.stderr)
            return 2
    checked = [r for r in rows if within(r, args.tolerance, target_from) is not None]
    failed = [r for r in checked if verdict(r, args.tolerance, target_from) == "FAIL"]
    noisy = [r for r in checked if verdict(r, args.tolerance, target_from) == "NOISY"]
    outcome = "FAIL" if failed else ("not resolved on the NOISY rows" if noisy else "PASS")
    if checked:
        worst = max(checked, key=lambda r: abs(r["ratio"] - 1))
        print(f"{len(rows)} compared, {len(checked)} from {format_size(target_from)} up; worst hip/cuda "
              f"{worst['ratio']:.3f} ({worst['copy']}, {format_size(worst['size_bytes'])}); {len(failed)} FAIL, "
              f"{len(noisy)} NOISY (an engine's own rounds spread more than {args.tolerance:.0%}); target within "
              f"{args.tolerance:.0%} of 1: {outcome}")
    else:
        print(f"no size from {format_size(target_from)} up: nothing checked against the target")
    if args.json:
        from pytest_gpucomm.files.atomic import write_atomic

        doc = {"shim": str(shim), "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "rounds": args.rounds, "min_time_s": args.min_time, "tolerance": args.tolerance,
               "target_from": target_from, "ok": bool(checked) and not failed and not noisy,
               "verdicts": {f"{r['copy']} {r['size_bytes']}": verdict(r, args.tolerance, target_from) for r in rows},
               "rows": rows}
        write_atomic(Path(args.json), json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")
    if not checked:
        return 2
    return 1 if failed else (3 if noisy else 0)


if __name__ == "__main__":
    sys.exit(main())

"""Our peer-copy figures against a raw cudaMemcpyPeerAsync, on the same machine.

    python benchmarks/peer_copy_vs_raw.py --ours-json results/copies.json [--size 1GiB] [--iters 50]

Reads the rows pytest-gpucomm wrote (``pytest suites/test_copies.py --gpucomm-json=...``), measures the
same copies raw -- cupy's cudaMemcpyPeerAsync with peer access enabled, timed with CUDA events, one way
(every ordered pair) and both ways (every pair, two streams, the bytes of both directions over the span
of both) -- and prints our figure divided by the raw one.  Target: at least 0.97.  Exit code 1 when a
ratio misses it, 2 when there is nothing to compare (no GPU pair, no matching row).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TARGET = 0.97


def _size(text: str) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pytest_gpucomm.units import parse_size

    return parse_size(text, "--size")


def raw_copy(cp: Any, src: int, dst: int, nbytes: int, iters: int, both: bool) -> float:
    """GB/s of raw peer copies (median of per-iteration event times)."""
    rt = cp.cuda.runtime
    for a, b in ((src, dst), (dst, src)):
        with cp.cuda.Device(a):
            try:
                rt.deviceEnablePeerAccess(b)
            except cp.cuda.runtime.CUDARuntimeError as e:  # already enabled
                if "PeerAccessAlreadyEnabled" not in str(e):
                    raise
    bufs = {}
    for d in (src, dst):
        with cp.cuda.Device(d):
            bufs[d] = (cp.empty(nbytes, dtype=cp.uint8), cp.empty(nbytes, dtype=cp.uint8))
            bufs[d][0].fill(7)
    with cp.cuda.Device(src):
        s0 = cp.cuda.Stream(non_blocking=True)
    with cp.cuda.Device(dst):
        s1 = cp.cuda.Stream(non_blocking=True)
    times = []
    for i in range(iters + 3):
        with cp.cuda.Device(src):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(s0)
        s1.wait_event(start)
        rt.memcpyPeerAsync(bufs[dst][1].data.ptr, dst, bufs[src][0].data.ptr, src, nbytes, s0.ptr)
        if both:
            rt.memcpyPeerAsync(bufs[src][1].data.ptr, src, bufs[dst][0].data.ptr, dst, nbytes, s1.ptr)
            with cp.cuda.Device(dst):
                e1 = cp.cuda.Event()
                e1.record(s1)
            s0.wait_event(e1)
        with cp.cuda.Device(src):
            end.record(s0)
            end.synchronize()
            if i >= 3:
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    times.sort()
    t = times[len(times) // 2]
    return nbytes * (2 if both else 1) / t / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours-json", required=True, help="JSON report of pytest suites/test_copies.py")
    ap.add_argument("--size", default="1GiB", help="message size to compare (default 1GiB)")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args(argv)
    nbytes = _size(args.size)
    try:
        import cupy as cp
    except ImportError:
        print("cupy is needed for the raw copies", file=sys.stderr)
        return 2
    rows = json.loads(Path(args.ours_json).read_text())["rows"]
    ours = {}
    for r in rows:
        if r["op"] in ("copy", "copy_bidir") and r["size_bytes"] == nbytes:
            a, b = (int(d.split(":")[1]) for d in r["devices"])
            ours[(r["op"], a, b)] = r["gbps"]
    if not ours:
        print(f"no copy rows at {nbytes} bytes in {args.ours_json}", file=sys.stderr)
        return 2
    n = cp.cuda.runtime.getDeviceCount()
    out, worst = [], 1e9
    print(f"{'op':<11} {'pair':<7} {'ours GB/s':>10} {'raw GB/s':>10} {'ratio':>7}  peer-access")
    for (op, a, b), g in sorted(ours.items()):
        if max(a, b) >= n:
            continue
        raw = raw_copy(cp, a, b, nbytes, args.iters, op == "copy_bidir")
        peer = bool(cp.cuda.runtime.deviceCanAccessPeer(a, b))
        ratio = g / raw
        worst = min(worst, ratio)
        pair = f"{a}{'<->' if op == 'copy_bidir' else '->'}{b}"
        print(f"{op:<11} {pair:<7} {g:>10.1f} {raw:>10.1f} {ratio:>7.3f}  {'on' if peer else 'OFF'}")
        out.append({"op": op, "src": a, "dst": b, "ours_gbps": g, "raw_gbps": raw, "ratio": ratio, "peer": peer})
    if not out:
        return 2
    ok = worst >= TARGET
    print(f"worst ratio {worst:.3f} (target >= {TARGET}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

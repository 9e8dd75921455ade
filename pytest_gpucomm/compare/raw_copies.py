"""Our copy figures against raw CUDA runtime copies, on the same machine, at every size.

    pytest suites/test_copies.py --gpucomm-json=copies.json
    python -m pytest_gpucomm.compare.raw_copies --ours-json copies.json [--sizes 256KiB,1GiB] [--iters 30]

Reads the rows pytest-gpucomm wrote and measures the same copies raw, the way nvbandwidth does: cupy's
``cudaMemcpyPeerAsync`` (peer copies, peer access on) or ``cudaMemcpyAsync`` (pinned host <-> device),
a batch of copies queued on one stream behind a spin kernel so that the device runs them back to back,
timed with CUDA events around the batch; both ways = a second stream on the other GPU, timed over the
span of both.  The figure is the median over ``--iters`` batches.  It prints ours divided by raw.
Target: at least 0.97 at every size from ``--target-from`` (default 64 KiB) up; smaller copies are
printed for information.  Exit code 1 when a ratio misses the target, 2 when there is nothing to compare
(no cupy, no GPU, no matching row).

Importing this module imports no torch or cupy: :func:`main` imports them when it measures.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Optional, cast

from ..ops.copy_timing import spin_rate  # imports no torch until called
from ..units import parse_size

TARGET = 0.97
BATCH_S = 1e-3  # a batch of copies lasts about this long
ENQUEUE_S = 20e-6  # host time to enqueue one copy, with margin: sets the spin before the batch


def _device(name: str) -> Optional[int]:
    return None if name == "host" else int(name.split(":")[1]) if ":" in name else 0


def _spin(torch: Any, device: int, seconds: float) -> None:
    torch.cuda._sleep(int(seconds * spin_rate(device)))


class RawCopies:
    """Raw copies of one row: one (src, dst) direction, or two at once."""

    def __init__(self, cp: Any, torch: Any, op: str, devices: tuple[str, str], nbytes: int) -> None:
        self.cp, self.torch, self.nbytes = cp, torch, nbytes
        a, b = (_device(d) for d in devices)
        both = op == "copy_bidir"
        if a is not None and b is not None:
            for x, y in ((a, b), (b, a)):
                with cp.cuda.Device(x):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(y)
                    except cp.cuda.runtime.CUDARuntimeError as e:
                        if "PeerAccessAlreadyEnabled" not in str(e):
                            raise
        dirs = [(a, b)] + ([(b, a)] if both else [])
        # the stream that holds the spin kernel and the events; a row's copy has a GPU end (ours_rows)
        self.launch = cast(int, a if a is not None else b)
        self.dirs = []
        for s, d in dirs:
            src = self._buffer(s, 7)
            dst = self._buffer(d, 0)
            stream_dev = s if s is not None else d
            self.dirs.append((s, d, src, dst, torch.cuda.Stream(device=stream_dev)))
        self.main = self.dirs[0][4]
        self.bytes_per_copy = nbytes * len(dirs)
        for dev in {x for x in (a, b) if x is not None}:
            torch.cuda.synchronize(dev)  # the fills ran on the default streams

    def _buffer(self, dev: Optional[int], value: int) -> Any:
        torch = self.torch
        if dev is None:
            buf = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)
        else:
            buf = torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{dev}")
        buf.fill_(value)
        return buf

    def batch(self, n: int) -> float:
        """Seconds per copy of one batch of ``n`` copies per direction."""
        torch, rt = self.torch, self.cp.cuda.runtime
        torch.cuda.synchronize(self.launch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.main):
            _spin(torch, self.launch, 50e-6 + n * len(self.dirs) * ENQUEUE_S)
            start.record(self.main)
        ends = []
        for s, d, src, dst, stream in self.dirs:
            if stream is not self.main:
                stream.wait_event(start)
            with torch.cuda.stream(stream):
                for _ in range(n):
                    if s is not None and d is not None:
                        rt.memcpyPeerAsync(dst.data_ptr(), d, src.data_ptr(), s, self.nbytes, stream.cuda_stream)
                    else:
                        rt.memcpyAsync(dst.data_ptr(), src.data_ptr(), self.nbytes, rt.memcpyDefault,
                                       stream.cuda_stream)
            if stream is not self.main:
                ev = torch.cuda.Event()
                ev.record(stream)
                ends.append(ev)
        for ev in ends:
            self.main.wait_event(ev)
        end.record(self.main)
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / n

    def gbps(self, iters: int) -> float:
        for _ in range(3):
            self.batch(1)  # warm-up
        est = sorted(self.batch(1) for _ in range(3))[1]
        n = max(1, min(200, math.ceil(BATCH_S / max(est, 1e-9))))
        times = sorted(self.batch(n) for _ in range(iters))
        for _, _, src, dst, _ in self.dirs:
            if not self.torch.equal(src[-4096:].cpu(), dst[-4096:].cpu()):
                raise RuntimeError("raw copy left the destination wrong")
        return self.bytes_per_copy / times[len(times) // 2] / 1e9


def ours_rows(path: Path, sizes: Optional[set[int]]) -> list[dict[str, Any]]:
    from ..report.saved import load_report

    rows = load_report(path)["rows"]
    out = [r for r in rows
           if r["op"] in ("copy", "copy_bidir", "h2d", "d2h")
           and any(str(d).startswith("cuda") for d in r["devices"])
           and (sizes is None or r["size_bytes"] in sizes)]
    return sorted(out, key=lambda r: (r["op"], tuple(r["devices"]), r["size_bytes"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours-json", required=True, help="JSON report of pytest suites/test_copies.py")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes to compare (default: every size)")
    ap.add_argument("--target-from", default="64KiB", help="smallest size the target applies to")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args(argv)
    sizes = {parse_size(s, "--sizes") for s in args.sizes.split(",")} if args.sizes else None
    target_from = parse_size(args.target_from, "--target-from")
    rows = ours_rows(Path(args.ours_json), sizes)
    if not rows:
        print(f"no GPU copy rows to compare in {args.ours_json}", file=sys.stderr)
        return 2
    try:
        import cupy as cp
        import torch
    except ImportError as e:
        print(f"cupy and torch are needed for the raw copies: {e}", file=sys.stderr)
        return 2
    n = cp.cuda.runtime.getDeviceCount()
    worst, compared = math.inf, 0
    print(f"{'op':<11} {'devices':<18} {'size_bytes':>11} {'ours GB/s':>10} {'raw GB/s':>10} {'ratio':>7}  target")
    for r in rows:
        devs = cast("tuple[str, str]", tuple(str(d) for d in r["devices"]))  # a copy's two ends
        if any(d is not None and d >= n for d in map(_device, devs)):
            continue
        raw = RawCopies(cp, torch, r["op"], devs, r["size_bytes"]).gbps(args.iters)
        ratio = r["gbps"] / raw
        checked = r["size_bytes"] >= target_from
        if checked:
            worst = min(worst, ratio)
        compared += 1
        mark = ("PASS" if ratio >= TARGET else "FAIL") if checked else "-"
        sep = "<->" if r["op"] == "copy_bidir" else "->"
        print(f"{r['op']:<11} {sep.join(devs):<18} {r['size_bytes']:>11} {r['gbps']:>10.1f} {raw:>10.1f} "
              f"{ratio:>7.3f}  {mark}")
    if not compared:
        return 2
    if worst == math.inf:
        print(f"no size from {target_from} bytes up: nothing checked against the target")
        return 2
    ok = worst >= TARGET
    print(f"{compared} compared; worst ratio from {target_from} bytes up {worst:.3f} (target >= {TARGET}): "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Write baselines/mi300x.json: a published (floor-only) baseline for 8 x AMD Instinct MI300X.

    python baselines/make_published.py              # writes baselines/mi300x.json next to this script
    python baselines/make_published.py -o OUT.json  # writes elsewhere (the tests compare the two)

The floors come only from published figures (see SOURCE_DETAIL); nothing here was measured.  They are a
placeholder until a measured baseline is recorded on real MI300X with ``--gpu-baseline-save``.

Every case is floor-only (``runs`` empty, ``floor_gbps`` set), and the top-level ``runs`` list is empty:
the schema requires the key but allows an empty array, and a published file has no recorded run (and so
no environment fingerprint to diff against).  The output is deterministic (no dates, sorted cases), so
re-running this script reproduces the shipped file byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from pytest_gpucomm.gate import BaselineError, case_key, new_document, write_document
from pytest_gpucomm.vocab import DEFAULT_MAX_RUNS

NAME = "mi300x"
N_GPUS = 8

COPY_TEST = "suites/test_copies.py::test_peer_copy"
COLLECTIVE_TEST = "suites/test_collectives.py::test_collective"

MiB = 1024**2
GiB = 1024**3

# Published figures (GB/s = 1e9 B/s).
PEER_COPY_HEALTH_GBPS = 44.0  # field health check: MI300X peer copy >= 44 GB/s per pair (rocm-bandwidth-test)
PEER_COPY_TORCH_GBPS = 40.0  # PyTorch copy_ reaches about 40 GB/s from ~8 MB messages
ALL_REDUCE_BUSBW_GBPS = 314.0  # field health check: RCCL all_reduce busbw >= 314 GB/s on 8 GPUs

# (size id as the suites spell it, bytes, floor): one-way peer copy, every ordered pair of the 8 GPUs.
# 64 MiB and up: the health-check figure (the copy is nearly flat above 32 MB); 16 MiB: the copy_ figure.
COPY_FLOORS = [
    ("16MiB", 16 * MiB, PEER_COPY_TORCH_GBPS),
    ("64MiB", 64 * MiB, PEER_COPY_HEALTH_GBPS),
    ("256MiB", 256 * MiB, PEER_COPY_HEALTH_GBPS),
    ("1GiB", 1 * GiB, PEER_COPY_HEALTH_GBPS),
]
# (dtype, size id, bytes, op, form, floor): busbw of the collective over all 8 GPUs.
COLLECTIVE_FLOORS = [
    ("float32", "1GiB", 1 * GiB, "all_reduce", "inplace", ALL_REDUCE_BUSBW_GBPS),
]

SOURCE_DETAIL = (
    "Published figures for 8 x AMD Instinct MI300X (fully connected Infinity Fabric, 50 GB/s per link), "
    "from the pytest-gpucomm design notes; not measured. Peer copy: PyTorch copy_ reaches about 40 GB/s "
    "from ~8 MB messages; MPI needs ~16.8 MB (16 MiB) for >80% and ~33.6 MB (32 MiB) for >90% of the "
    "50 GB/s peak; nearly flat above 32 MB. Field health checks: MI300X peer copy >= 44 GB/s per pair "
    "(rocm-bandwidth-test); RCCL all_reduce busbw >= 314 GB/s on 8 GPUs. Floors used: one-way peer copy, "
    "every ordered pair of 8 GPUs, 44 GB/s at 64 MiB, 256 MiB and 1 GiB and 40 GB/s at 16 MiB; all_reduce "
    "float32 in place at 1 GiB on 8 GPUs, 314 GB/s busbw. These floors are a placeholder: replace them "
    "with a measured baseline by running the suites on real MI300X with --gpu-baseline-save "
    "(3 or more runs)."
)


def _case(test_id: str, op: str, size_bytes: int, dtype: Optional[str], world_size: int, devices: list[str],
          floor: float) -> tuple[str, dict[str, Any]]:
    key = case_key(test_id, op, size_bytes, dtype, world_size)
    entry = {
        "test_id": test_id,
        "op": op,
        "size_bytes": size_bytes,
        "world_size": world_size,
        "dtype": dtype,
        "devices": devices,
        "runs": [],
        "floor_gbps": floor,
    }
    return key, entry


def build_document() -> dict[str, Any]:
    """The baseline document (a plain dict in the file's layout)."""
    cases: dict[str, dict[str, Any]] = {}
    for size_id, size_bytes, floor in COPY_FLOORS:
        for src in range(N_GPUS):
            for dst in range(N_GPUS):
                if src == dst:
                    continue
                key, entry = _case(f"{COPY_TEST}[{size_id}-{src}->{dst}]", "copy", size_bytes, None, 1,
                                   [f"cuda:{src}", f"cuda:{dst}"], floor)
                cases[key] = entry
    for dtype, size_id, size_bytes, op, form, floor in COLLECTIVE_FLOORS:
        key, entry = _case(f"{COLLECTIVE_TEST}[{dtype}-{size_id}-{op}-{form}]", op, size_bytes, dtype, N_GPUS,
                           [f"rank{r}" for r in range(N_GPUS)], floor)
        cases[key] = entry
    # runs kept per case: the plugin's default --gpu-baseline-runs, what a later --gpu-baseline-save keeps
    doc = new_document(NAME, DEFAULT_MAX_RUNS)
    doc.update(source="published", source_detail=SOURCE_DETAIL, cases=dict(sorted(cases.items())))
    return doc


def write(path: Path) -> int:
    """Write the document to ``path`` atomically, validated first; returns the number of cases.

    ``write_document`` checks the text as ``load_baseline`` would before it replaces anything, so an
    invalid document never replaces an existing file and a crash never leaves a half-written one.
    """
    doc = build_document()
    write_document(Path(path), doc)
    return len(doc["cases"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).resolve().parent / f"{NAME}.json",
                        help="where to write (default: mi300x.json next to this script)")
    args = parser.parse_args(argv)
    try:
        n = write(args.output)
    except BaselineError as e:
        print(f"make_published: {e}", file=sys.stderr)
        return 1
    print(f"wrote {n} floor-only cases to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

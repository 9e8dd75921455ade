"""Write baselines/mi300x.json: a published (floor-only) baseline for 8 x AMD Instinct MI300X.

    python benchmarks/make_published.py              # writes baselines/mi300x.json of this checkout
    python benchmarks/make_published.py -o OUT.json  # writes elsewhere (the tests compare the two)

A maintainer's script beside the other tools of the baselines (``merge_baselines.py``), not in ``baselines/``:
that folder is package data of the wheel (``pytest_gpucomm.baselines``), and holds only the baseline files.

The floors come only from published figures (SOURCES, written into the file's ``source_detail``); nothing
here was measured.  They are a placeholder until a measured baseline is recorded on real MI300X with
``--gpu-baseline-save``.  The cases are those of one 8-GPU node as the suites name them: peer copies one way
(every ordered pair) and both ways (every unordered pair, ``test_peer_copy_both_ways[256MiB-0<->1]``), and
all_reduce over the 8 ranks (``world_size`` 8, devices ``rank0``..``rank7``), at the sizes a figure is
published for.  A case exists only where a figure exists (NOT_COVERED says what has none, and why): a
floor made up to fill the grid would fail good hardware or pass bad.  Each case names its figure in
``floor_source`` (a key of SOURCES), a field the schema leaves open and a later save keeps.

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
BOTH_WAYS_TEST = "suites/test_copies.py::test_peer_copy_both_ways"
COLLECTIVE_TEST = "suites/test_collectives.py::test_collective"

MiB = 1024**2
GiB = 1024**3

# Published figures (GB/s = 1e9 B/s), each with the id its cases cite in "floor_source" (see SOURCES).
PEER_COPY_HEALTH_GBPS = 44.0  # rbt-health: MI300X peer copy >= 44 GB/s per pair (rocm-bandwidth-test)
PEER_COPY_TORCH_GBPS = 40.0  # torch-copy: PyTorch copy_ reaches about 40 GB/s from ~8 MB messages
ALL_REDUCE_BUSBW_GBPS = 314.0  # rccl-health: RCCL all_reduce busbw >= 314 GB/s on 8 GPUs
TB_BIDIR_PER_DIRECTION_GBPS = 43.9  # transferbench-bidir: each direction of a pair copying both ways at once
# the both-ways test counts the bytes of both directions over the span of both: twice the per-direction figure
BOTH_WAYS_GBPS = round(2 * TB_BIDIR_PER_DIRECTION_GBPS, 1)

CVS_HEALTH_URL = "https://rocm.docs.amd.com/projects/cvs/en/latest/reference/configuration-files/health.html"
SINGLE_NODE_URL = ("https://rocm.docs.amd.com/projects/gpu-cluster-networking/en/latest/how-to/"
                   "single-node-config.html")

#: source id -> what it says and where it is published; every floor cites one of them
SOURCES = {
    "torch-copy": (
        "memcpy-peer analysis on 8 x MI300X (fully connected Infinity Fabric, 50 GB/s per link, 7 links per "
        "GPU; pytest-gpucomm design notes, 'Published MI300X figures'): PyTorch copy_ reaches about 40 GB/s "
        "from ~8 MB messages; MPI needs ~16.8 MB (16 MiB) for >80% and ~33.6 MB (32 MiB) for >90% of the "
        "50 GB/s peak; nearly flat above 32 MB. Used: 40 GB/s one way at 16 MiB."),
    "rbt-health": (
        "field health check (design notes): MI300X peer copy >= 44 GB/s per pair (rocm-bandwidth-test). Used: "
        "44 GB/s one way at 64 MiB, 256 MiB and 1 GiB, where the copy is nearly flat (torch-copy)."),
    "transferbench-bidir": (
        f"AMD Cluster Validation Suite, MI300 health configuration ({CVS_HEALTH_URL}): TransferBench p2p with "
        f"268435456 bytes (256 MiB) per direction, avg_gpu_to_gpu_p2p_bidir_bw {TB_BIDIR_PER_DIRECTION_GBPS:g} "
        "GB/s. TransferBench's 'Averages (During BiDir)' averages the one-direction rows of its bidirectional "
        f"table (-> and <-, not their <-> sums; see its p2p output in {SINGLE_NODE_URL}), so the figure is per "
        "direction; the both-ways test counts both directions, hence "
        f"2 x {TB_BIDIR_PER_DIRECTION_GBPS:g} = {BOTH_WAYS_GBPS:g} GB/s, applied to every pair (the source "
        "gates the pairs' average) at 256 MiB and 1 GiB (flat above 32 MB, torch-copy)."),
    "rccl-health": (
        "field health check (design notes): RCCL all_reduce busbw >= 314 GB/s on 8 GPUs. Used: float32 in "
        "place at 1 GiB, the suites' largest size."),
}

NOT_COVERED = (
    "No floor where no figure is published: host<->device copies (the ROCm Validation Suite's MI300X PEBB "
    "configuration, rvs/conf/MI300X/pebb_single.conf of https://github.com/ROCm/ROCmValidationSuite, measures "
    "them without a threshold, and the health configuration above gates GPU-to-GPU copies only); peer copies "
    "below 16 MiB; the collectives other than all_reduce, and all_reduce below 1 GiB. Peak link figures are "
    "not floors. The all-peers copy patterns have no entry yet: the health configuration's TransferBench a2a "
    "threshold (gpu_to_gpu_a2a_rtotal 320 GB/s received per GPU, 256 MiB per transfer) fits 'every pair at "
    "once' only once that pattern's figure is defined.")

# (size id as the suites spell it, bytes, floor, source): one-way peer copy, every ordered pair of the 8 GPUs.
COPY_FLOORS = [
    ("16MiB", 16 * MiB, PEER_COPY_TORCH_GBPS, "torch-copy"),
    ("64MiB", 64 * MiB, PEER_COPY_HEALTH_GBPS, "rbt-health"),
    ("256MiB", 256 * MiB, PEER_COPY_HEALTH_GBPS, "rbt-health"),
    ("1GiB", 1 * GiB, PEER_COPY_HEALTH_GBPS, "rbt-health"),
]
# (size id, bytes per direction, floor, source): both ways at once, every unordered pair of the 8 GPUs.
BOTH_WAYS_FLOORS = [
    ("256MiB", 256 * MiB, BOTH_WAYS_GBPS, "transferbench-bidir"),
    ("1GiB", 1 * GiB, BOTH_WAYS_GBPS, "transferbench-bidir"),
]
# (dtype, size id, bytes, op, form, floor, source): busbw of the collective over all 8 GPUs.
COLLECTIVE_FLOORS = [
    ("float32", "1GiB", 1 * GiB, "all_reduce", "inplace", ALL_REDUCE_BUSBW_GBPS, "rccl-health"),
]

SOURCE_DETAIL = (
    "Published figures for 8 x AMD Instinct MI300X (fully connected Infinity Fabric, 50 GB/s per link, 7 links "
    "per GPU); not measured. Each case's floor_source names its figure: "
    + " ".join(f"[{key}] {text}" for key, text in SOURCES.items())
    + " " + NOT_COVERED
    + " These floors are a placeholder: replace them with a measured baseline by running the suites on real "
    "MI300X with --gpu-baseline-save (3 or more runs)."
)


def _case(test_id: str, op: str, size_bytes: int, dtype: Optional[str], world_size: int, devices: list[str],
          floor: float, source: str) -> tuple[str, dict[str, Any]]:
    if source not in SOURCES:
        raise ValueError(f"floor {floor:g} GB/s of {test_id}: unknown source {source!r} (known: {sorted(SOURCES)})")
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
        # a field the schema leaves open (kept by later saves): which published figure the floor is
        "floor_source": source,
    }
    return key, entry


def build_document() -> dict[str, Any]:
    """The baseline document (a plain dict in the file's layout)."""
    cases: dict[str, dict[str, Any]] = {}
    pairs = [(a, b) for a in range(N_GPUS) for b in range(N_GPUS) if a != b]
    for size_id, size_bytes, floor, source in COPY_FLOORS:
        for src, dst in pairs:
            key, entry = _case(f"{COPY_TEST}[{size_id}-{src}->{dst}]", "copy", size_bytes, None, 1,
                               [f"cuda:{src}", f"cuda:{dst}"], floor, source)
            cases[key] = entry
    for size_id, size_bytes, floor, source in BOTH_WAYS_FLOORS:
        for a, b in pairs:
            if a < b:  # the suites' gpu_link: each unordered pair once, ids "a<->b"
                key, entry = _case(f"{BOTH_WAYS_TEST}[{size_id}-{a}<->{b}]", "copy_bidir", size_bytes, None, 1,
                                   [f"cuda:{a}", f"cuda:{b}"], floor, source)
                cases[key] = entry
    for dtype, size_id, size_bytes, op, form, floor, source in COLLECTIVE_FLOORS:
        key, entry = _case(f"{COLLECTIVE_TEST}[{dtype}-{size_id}-{op}-{form}]", op, size_bytes, dtype, N_GPUS,
                           [f"rank{r}" for r in range(N_GPUS)], floor, source)
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
    parser.add_argument("-o", "--output", type=Path,
                        default=Path(__file__).resolve().parent.parent / "baselines" / f"{NAME}.json",
                        help="where to write (default: baselines/mi300x.json of this checkout)")
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

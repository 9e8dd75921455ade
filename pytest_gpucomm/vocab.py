"""One vocabulary for the whole plugin: the version, the verdict statuses, the defaults, the dtypes, the marker
and fixture names, and the key that names a case.  Every other module takes these from here, so a default or a
name is defined once (the package root re-exports the version).

Standard library only: the worker processes, the plugin's import and the gate all read it.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Optional

__all__ = [
    "__version__",
    "case_key",
    "TAIL_TIME_FACTOR",
    "Status",
    "DTYPES",
    "DTYPE_ALIASES",
    "MARKER_NAMES",
    "FIXTURE_NAMES",
    "DEFAULT_MIN_TIME_S",
    "DEFAULT_MAX_SAMPLES",
    "RANK_WARMUP_MIN_S",
    "RANK_START_TIMEOUT_S",
    "DEFAULT_BASELINE_DIR",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_GPU_MAX_SIZE",
    "DEFAULT_CPU_MAX_SIZE",
    "DEFAULT_TOLERANCE",
    "DEFAULT_ALPHA",
    "DEFAULT_MAX_RUNS",
    "DEFAULT_MAX_REMEASURES",
    "DEFAULT_FOLDS",
    "MAX_FOLDS",
    "DEFAULT_CAUSE_CASES",
    "MAX_CAUSE_CASES",
    "DEFAULT_TAIL_TOLERANCE",
    "MAX_TAIL_TOLERANCE",
    "TORCH",
    "NCCL_TESTS",
    "ENGINE_CHOICES",
    "engines_of",
    "DEFAULT_CAUSE_BUDGET",
    "NODE_MODES",
    "DEFAULT_DTYPE",
    "CPU_MAX_WORLD",
    "CPU_LOGICAL_DEVICES",
    "CPU_DEVICES_ENV",
    "MIN_CPU_DEVICES",
    "MAX_CPU_DEVICES",
    "PAIR_CHOICES",
    "AUTO_ALL_PAIRS_MAX_DEVICES",
    "MAX_FRESH_REMEASURES",
    "DEFAULT_REMEASURE_AFTER_S",
    "MAX_REMEASURE_AFTER_S",
    "MAX_MIN_TIME_S",
    "MAX_TIMEOUT_S",
    "MAX_BASELINE_RUNS",
    "MAX_SWEEP_SIZES",
    "DEFAULT_ENGINE_ID_PARTS",
    "default_engine_id",
]

__version__ = "0.1.0"


#: the id parts that name a default engine of a test run on several (``--gpucomm-engine=both``: ``-torch``;
#: ``--gpucomm-copy-engine=both``: ``-ce``): the case is the one the default engines' id names, so a baseline
#: recorded without the options gates it
DEFAULT_ENGINE_ID_PARTS = ("torch", "ce")


def default_engine_id(test_id: str) -> str:
    """``test_id`` without its last id parts naming a default engine (``t[16MiB-torch]`` -> ``t[16MiB]``,
    ``t[1MiB-ce-torch]`` -> ``t[1MiB]``, ``t[torch]`` -> ``t``): the key of a case measured by the default
    engines is the same whatever other engines the session ran beside them."""
    stripped = True
    while stripped:
        stripped = False
        for part in DEFAULT_ENGINE_ID_PARTS:
            if test_id.endswith(f"[{part}]"):
                return test_id[:-len(part) - 2]
            if test_id.endswith(f"-{part}]"):
                test_id, stripped = test_id[:-len(part) - 2] + "]", True
    return test_id


def case_key(test_id: str, op: str, size_bytes: int, dtype: Optional[str], world_size: int,
             layout: str = "") -> str:
    """The key of a case in a baseline: ``<test_id>|<op>|<size_bytes>B|<dtype or ->|ws<world_size>``, and
    ``|<layout>`` for a job across nodes (launched mode), ``<nodes>x<ranks per node>`` (e.g. ``2x8``).

    Every part is kept verbatim, so the key is stable across runs and readable in the file; e.g.
    ``tests/test_comm.py::test_all_reduce[16MiB]|all_reduce|16777216B|float32|ws2``.  A job on one host
    has no layout part: its keys are those of the rank pool.  The gate keys its baseline files by it, and the
    analysis finds a measurement's case in one by it.
    """
    if layout and not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", layout):
        raise ValueError(f"layout must be '<nodes>x<ranks per node>' (e.g. '2x8'), got {layout!r}")
    test_id = default_engine_id(test_id)
    if isinstance(size_bytes, bool) or int(size_bytes) != size_bytes or size_bytes < 0:
        raise ValueError(f"size_bytes must be a whole number of bytes, got {size_bytes!r}")
    if isinstance(world_size, bool) or int(world_size) != world_size or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    return f"{test_id}|{op}|{int(size_bytes)}B|{dtype or '-'}|ws{int(world_size)}" + (f"|{layout}" if layout else "")


class Status(str, Enum):
    """What became of one measurement: the row's status in the table, the JSON report and JUnit.

    The values are the words users see; ``Status.OK == "ok"`` holds, and JSON writes the value.
    """

    MEASURED = "measured"  # no threshold, no baseline: just a figure
    OK = "ok"  # every threshold met / consistent with the baseline
    FAILED = "FAIL"  # a @bandwidth / @latency threshold was missed
    REGRESSION = "REGRESSION"  # slower than the baseline beyond the tolerance, confirmed
    TAIL = "TAIL"  # the single ops' tail heavier than the baseline's beyond the tail tolerance, confirmed
    IMPROVED = "improved"  # faster than the baseline beyond the tolerance
    NOT_GATED = "not gated"  # with this baseline the case cannot catch a drop of twice the tolerance
    NOT_GATED_STRICT = "NOT GATED"  # the same, and --gpu-baseline-strict
    NEW = "new"  # no baseline entry for the case
    NEW_STRICT = "NEW"  # no baseline entry, and --gpu-baseline-strict
    FLOOR_OK = "floor-ok"  # a published case: at or above its floor
    FLOOR = "FLOOR"  # a published case: below its floor

    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:  # formatted as its value, a str (str.__format__)
        return str.__format__(self, format_spec)

    @property
    def failed(self) -> bool:
        """Whether this status fails the test (outside a recording run, for the gate's statuses)."""
        return self in _FAILING


_FAILING = frozenset({Status.FAILED, Status.REGRESSION, Status.TAIL, Status.NEW_STRICT, Status.NOT_GATED_STRICT,
                      Status.FLOOR})

#: element types of the collectives: name -> bytes per element
DTYPES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_ALIASES: dict[str, str] = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
                                 "half": "float16"}
DEFAULT_DTYPE = "float32"

#: the markers the plugin registers and reads, and the fixtures it provides
MARKER_NAMES: tuple[str, ...] = ("bandwidth", "latency", "sizes", "gpus", "world", "rank_timeout", "engines")
FIXTURE_NAMES: frozenset[str] = frozenset({"gpus", "gpu", "gpu_pair", "gpu_link", "gpu_hub", "comm",
                                           "process_group", "gpucomm_state", "gpucomm_engine"})

# -- defaults (options, gate, timing) -----------------------------------------------------------------
DEFAULT_MIN_TIME_S = 0.1  # measuring time per case, warm-up excluded
DEFAULT_MAX_SAMPLES = 1000  # timed samples per case at most (ops.timing; the rank tasks' default too)
#: the warm-up of a rank task (a collective, a training pattern, the node pairs): at least this long of steady
#: work before the timed samples, on every rank (a copy's is ops.timing's own, shorter)
RANK_WARMUP_MIN_S = 0.02
DEFAULT_TIMEOUT_S = 300.0  # how long the ranks' work on one measurement may take
#: how long a rank pool's workers may take to start and join their process group (at least; a longer
#: --gpucomm-timeout raises it)
RANK_START_TIMEOUT_S = 120.0
#: the folder of baseline files, under the rootdir (pytest) or the working folder (the gpucomm command)
DEFAULT_BASELINE_DIR = "baselines"
DEFAULT_GPU_MAX_SIZE = 1 << 30  # 1 GiB: the largest size of the @sizes sweeps on GPU
DEFAULT_CPU_MAX_SIZE = 16 << 20  # 16 MiB keeps CPU runs (and CI) quick
DEFAULT_TOLERANCE = 0.05  # a slowdown below this fraction is never a regression
DEFAULT_ALPHA = 0.01  # suite-level significance, Bonferroni-corrected
DEFAULT_MAX_RUNS = 24  # runs kept per case in a baseline file: several sessions (gate.decision)
#: the tail verdict's tolerance: the share of single ops above the baseline's p99 (scaled to today's median)
#: allowed is the baseline's own share (about 1 %) x (1 + this); the rule and its simulations are gate.tails'
#: (its DEFAULT_TAIL_TOLERANCE, which must equal this: a test checks it; here so that the options' help needs
#: no numpy)
DEFAULT_TAIL_TOLERANCE = 0.5
#: the single-op phase's time per case, without --gpucomm-tail-time: this many x --gpucomm-min-time (0.3 s by
#: default gave one H200 7,000-10,000 single ops of a small collective; the p99.9 level needs 5,000)
TAIL_TIME_FACTOR = 3
#: the largest tail tolerance accepted (a hundredfold share of slow ops)
MAX_TAIL_TOLERANCE = 99.0
# re-measures of a flagged case, in a new process state: more gate fewer cases (calibration --table)
DEFAULT_MAX_REMEASURES = 1
#: the runs a case of a folded class (gate.levels.FOLDED_CLASSES: collectives up to 1 MiB) is measured in
#: before its verdict, each in a process group of its own, pooled (--gpucomm-folds; 1: no folds).  On the
#: 19 runs of 2 x H200 these cases' residuals spread 97 % within a session, so pooling k groups divides
#: their variance by about k: an op band of small collectives moves from 0.83 % to 0.64 % sd at k = 2, which
#: gates every such band at 10 % (leave-one-session-out on baselines/h200.json: band judgements gated 76 % ->
#: 87 %, the rest host<->device bands); k = 3 gated no more of the 560, k = 4 four more, each costing a group.
#: Their class offset (issue 45): a 10 % drop of every collective up to 1 MiB failed 62.5 % of the 16 held-out
#: suites at k = 2, 75.0 % at k = 3 and 100 % at k = 4 (0 false suites at each), so k = 4
DEFAULT_FOLDS = 4
#: the most folds accepted (each a process group kept for the session)
MAX_FOLDS = 8
#: the cases of a session whose REGRESSION the cause test explains (--gpucomm-cause), and its ceiling
DEFAULT_CAUSE_CASES = 4
MAX_CAUSE_CASES = 1000

#: In CPU mode the suites see this many logical "devices" (host buffers), so that pair tests and
#: two-rank collectives have something real to measure.
CPU_LOGICAL_DEVICES = 2
#: ... unless this environment variable says how many (MIN_CPU_DEVICES to MAX_CPU_DEVICES): with 8, the CPU
#: variants collect the tests of an 8-GPU node (56 ordered pairs, 8-rank gloo worlds), so that CI and the
#: plugin's own tests exercise the large-node paths without the hardware.  64 bounds it: the all-pairs
#: pattern holds 2 x n x (n - 1) host buffers, and 64 x 63 copies at once already need 4,032 threads.
CPU_DEVICES_ENV = "GPUCOMM_CPU_DEVICES"
MIN_CPU_DEVICES = 2
MAX_CPU_DEVICES = 64

#: --gpucomm-pairs: which ordered device pairs the pair tests (gpu_pair, gpu_link) run over: every one,
#: each device's ring neighbours (i -> i+1 mod n and back), or device 0's (0 -> j and j -> 0)
PAIR_CHOICES: tuple[str, ...] = ("all", "neighbours", "from0")
#: without --gpucomm-pairs: every pair up to this many devices, the ring neighbours above.  The pair tests
#: grow as n x (n - 1); on 8 devices every pair makes the copy suite alone longer than the 5 minutes the
#: default suites may take (1170 copy cases x 0.33 s, about 6.4 minutes; the neighbours' 570 with the
#: collectives about 3.9: benchmarks/suite_time_vs_gpus.py), while up to 4 devices every pair (12) costs
#: about what 8 devices' neighbours (16) do.
AUTO_ALL_PAIRS_MAX_DEVICES = 4
#: gloo worlds on CPU may be larger than the logical device count; this bounds them.
CPU_MAX_WORLD = 8
# -- limits: values past these are usage errors, not overflows deep in the timing engine ----------------
MAX_MIN_TIME_S = 3600.0  # --gpucomm-min-time: an hour per case
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # --gpucomm-timeout, @rank_timeout: a week
MAX_BASELINE_RUNS = 1000  # --gpu-baseline-runs
MAX_SWEEP_SIZES = 1000  # sizes one @sizes marker may make

#: The gate's re-measures that run in a fresh process state, per session, copies and collectives together:
#: a collective's in a new process group, a copy's in a new process.  Each costs a process start; past
#: this many, a re-measure runs in the current state (``Remeasure.fresh`` is False and says so).
MAX_FRESH_REMEASURES = 24
#: --gpu-remeasure-after: a flagged case is measured again no sooner than this many seconds after the
#: session's first flagged run, so that a slow state of the host that lasts a minute or two is not a
#: regression (a real one lasts the session).  One H200's small host->device copies ran 10-16 % slow in
#: every process for about two minutes of a fresh boot (docs/gate.md): its false REGRESSION was flagged and
#: measured again in the same minute; the state had ended about 96 s after the flagged run.  Each session
#: waits at most once: the cases flagged later are measured again at once.
DEFAULT_REMEASURE_AFTER_S = 120.0
MAX_REMEASURE_AFTER_S = 3600.0  # --gpu-remeasure-after: at most an hour


#: the engines a case is measured on (--gpucomm-engine): torch's own, or NVIDIA's programs
#: (:mod:`pytest_gpucomm.compare.tool_engine` runs them); "both" runs each case on torch, then on nccl-tests.  Here,
#: not beside the programs, so that reading the option imports none of them
TORCH, NCCL_TESTS = "torch", "nccl-tests"
ENGINE_CHOICES = (TORCH, NCCL_TESTS, "both")


def engines_of(choice: str) -> tuple[str, ...]:
    """The engines a --gpucomm-engine value runs each case on, in order."""
    if choice not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {choice!r}; known: {', '.join(ENGINE_CHOICES)}")
    return (TORCH, NCCL_TESTS) if choice == "both" else (choice,)


#: re-measures per case that the cause test may spend (gate.cause; --gpucomm-cause's help says it)
DEFAULT_CAUSE_BUDGET = 4
#: --gpu-baseline-nodes: each node judged against its own runs, or against every node's (gate.verdicts)
NODE_MODES = ("own", "pooled")

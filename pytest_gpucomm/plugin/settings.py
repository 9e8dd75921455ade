"""Options and ini keys of the ``gpucomm`` group, resolved command line > environment > ini.

Each value is parsed by a small typed function of :mod:`.option_values` that raises ``pytest.UsageError``
naming the bad value and where it came from ("invalid --gpucomm-min-time 'abc' (from the command line)").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

import pytest

from .. import checks
from ..checks import CheckError, Judging, Origin
from ..units import describe_size
from ..vocab import (
    TAIL_TIME_FACTOR,
    DEFAULT_ALPHA,
    DEFAULT_CAUSE_BUDGET,
    DEFAULT_CAUSE_CASES,
    DEFAULT_CPU_MAX_SIZE,
    DEFAULT_DTYPE,
    DEFAULT_FOLDS,
    DEFAULT_GPU_MAX_SIZE,
    DEFAULT_MAX_RUNS,
    DEFAULT_MIN_TIME_S,
    DEFAULT_REMEASURE_AFTER_S,
    DEFAULT_TAIL_TOLERANCE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    MAX_MIN_TIME_S,
    MAX_REMEASURE_AFTER_S,
    AUTO_ALL_PAIRS_MAX_DEVICES,
    engines_of,
)
from .option_values import (
    check_cpu_devices,
    checked,
    env_flag,
    parse_baseline_nodes,
    parse_copy_engine,
    parse_device,
    parse_dtypes,
    parse_engine,
    parse_env_names,
    parse_launch,
    parse_pairs,
    parse_plots_format,
    parse_prior,
    parse_seconds,
    parse_size_option,
)

if TYPE_CHECKING:
    from ..ops.timing import TimingSettings

__all__ = ["Settings", "add_options", "read_settings", "read_launch_options", "origin", "given", "Lock", "lock_of"]

T = TypeVar("T")

# (option, dest, ini key, env var, help, metavar)
_OPTIONS = [
    ("--gpu-baseline", "gpucomm_baseline", "gpucomm_baseline", "GPUCOMM_BASELINE",
     "Compare every measurement with this baseline: NAME (NAME.json in the baseline folder, else the one shipped "
     "with pytest-gpucomm), a PATH to a .json file, or 'auto' (the baseline named for the detected hardware, e.g. "
     "h200, mi300x; a shipped one only if it was recorded on this kind of machine). Default: no comparison.",
     "NAME|PATH|auto"),
    ("--gpu-baseline-dir", "gpucomm_baseline_dir", "gpucomm_baseline_dir", "GPUCOMM_BASELINE_DIR",
     "Where baseline NAMEs are looked up first, before the baselines shipped with pytest-gpucomm (and created by "
     "--gpu-baseline-save). Default: baselines/ under the rootdir (./baselines where the rootdir is inside the "
     "installed package, as with --pyargs).", "DIR"),
    ("--gpu-baseline-runs", "gpucomm_baseline_runs", "gpucomm_baseline_runs", "GPUCOMM_BASELINE_RUNS",
     f"Runs kept per case when saving (the oldest beyond this are dropped). Default: {DEFAULT_MAX_RUNS}.", "K"),
    ("--gpu-baseline-prior", "gpucomm_baseline_prior", "gpucomm_baseline_prior", "GPUCOMM_BASELINE_PRIOR",
     "The spread prior that cases recorded in one session only take their spread between sessions from, where no "
     "baseline file of this hardware has runs in several sessions: a PATH (write one from your own machines' "
     "baselines with python -m pytest_gpucomm.gate.prior FILE... -o PATH), or 'none' (those cases are not gated). "
     "Default: the prior shipped with pytest-gpucomm, fitted on the shipped baselines.", "PATH|none"),
    ("--gpu-baseline-nodes", "gpucomm_baseline_nodes", "gpucomm_baseline_nodes", "GPUCOMM_BASELINE_NODES",
     "A job across nodes: judge each node's own measurements (its copies, its intra-node groups) against that "
     "node's runs in the baseline ('own'; a node with none of its own against every node's runs, said in the "
     "header), or against the runs of every node pooled ('pooled', for identical nodes). Either way the levels are "
     "judged per node and each verdict names its node. Default: own.", "own|pooled"),
    ("--gpu-min-judged", "gpucomm_min_judged", "gpucomm_min_judged", "GPUCOMM_MIN_JUDGED",
     "Fail the session (exit status 1) when fewer than this share of its cases measured against a baseline could "
     "be judged (gated, or failing): a gate that judged nothing does not pass. The CI templates use 0.5. "
     "Default: 0 (the summary's first and last lines say how many were judged; the run does not fail on it).",
     "FRACTION"),
    ("--gpu-tolerance", "gpucomm_tolerance", "gpucomm_tolerance", "GPUCOMM_TOLERANCE",
     f"A slowdown smaller than this fraction is never a regression (a test's @bandwidth(tolerance=...) "
     f"overrides it). Default: {DEFAULT_TOLERANCE}.", "FRACTION"),
    ("--gpu-tail-tolerance", "gpucomm_tail_tolerance", "gpucomm_tail_tolerance", "GPUCOMM_TAIL_TOLERANCE",
     f"The tail verdict (TAIL): the share of single ops slower than the baseline's p99, scaled to today's median, "
     f"may be (1 + this) x the baseline's own share (about 0.01) before it is tested as heavier (a test's "
     f"@bandwidth(tail_tolerance=...) overrides it). Default: {DEFAULT_TAIL_TOLERANCE:g}.", "TOLERANCE"),
    ("--gpu-alpha", "gpucomm_alpha", "gpucomm_alpha", "GPUCOMM_ALPHA",
     f"The session's false-alarm level: Bonferroni-corrected on the bounds that decide, split over the cases' "
     f"own verdicts (0.1) and the levels at the end: class offsets (0.4), op bands (0.25), case residuals (0.25); "
     f"in a job across nodes the levels' share split over the nodes by their share of the cases. "
     f"Default: {DEFAULT_ALPHA}.",
     "ALPHA"),
    ("--gpu-remeasure-after", "gpucomm_remeasure_after", "gpucomm_remeasure_after", "GPUCOMM_REMEASURE_AFTER",
     f"With a baseline, a case whose first run is below the tolerance is measured again no sooner than this many "
     f"seconds after the session's first such run, so that a slow state of the host lasting a minute or two does not "
     f"fail it; the session waits once at most; 0: at once. Default: {DEFAULT_REMEASURE_AFTER_S:g}.", "SECONDS"),
    ("--gpucomm-folds", "gpucomm_folds", "gpucomm_folds", "GPUCOMM_FOLDS",
     f"With a baseline, each collective up to 1 MiB is measured in K process groups (kept for the session) and "
     f"judged on the K runs pooled; 1: once, as every other case. Not in launched jobs. Default: {DEFAULT_FOLDS}.",
     "K"),
    ("--gpucomm-cause", "gpucomm_cause", "gpucomm_cause", "GPUCOMM_CAUSE",
     f"With a baseline: for the first N cases of the session that fail as REGRESSION while the recorded environment "
     f"differs from the baseline's, measure the case again in a fresh process (group) with the differing "
     f"variables set back, one at a time and then all at once (at most {DEFAULT_CAUSE_BUDGET} re-measures a case), "
     f"and name the one whose re-measure is shown faster than the slowed run and not below the tolerance; 0: "
     f"never. Default: {DEFAULT_CAUSE_CASES}.", "N"),
    ("--gpucomm-env", "gpucomm_env", "gpucomm_env", "GPUCOMM_ENV",
     "More environment variables to record with every run (and to compare with the baseline's, and to set back "
     "in the cause test), beside the communication libraries', the GPU runtimes' and the thread counts': names "
     "or shell patterns, comma-separated (MY_FABRIC_*). A name that looks like a secret (TOKEN, SECRET, "
     "PASSWORD, ...KEY) is never recorded. Default: none.", "NAME[,NAME]"),
    ("--gpucomm-device", "gpucomm_device", "gpucomm_device", "GPUCOMM_DEVICE",
     "Where to measure: 'auto' (GPUs when torch sees one, else the CPU variants), 'gpu' (error without one) "
     "or 'cpu' (host memory copies, gloo). Default: auto.", "auto|gpu|cpu"),
    ("--gpucomm-min-time", "gpucomm_min_time", "gpucomm_min_time", "GPUCOMM_MIN_TIME",
     f"Minimum measuring time per case in seconds, warm-up excluded. Default: {DEFAULT_MIN_TIME_S}. "
     "Use 1 for the one-second-per-size runs of the published benchmarks.", "SECONDS"),
    ("--gpucomm-tail-time", "gpucomm_tail_time", "gpucomm_tail_time", "GPUCOMM_TAIL_TIME",
     "Time budget per collective case in seconds for its single ops, each timed on its own (the tail figures and "
     "the TAIL verdict; at least 20 and at most 10,000 ops); 0 skips them. Default: 3 x --gpucomm-min-time.",
     "SECONDS"),
    ("--gpucomm-max-size", "gpucomm_max_size", "gpucomm_max_size", "GPUCOMM_MAX_SIZE",
     "Largest message size of the @sizes sweeps; larger sizes are collected and skipped, saying why. "
     f"Default: {describe_size(DEFAULT_GPU_MAX_SIZE)} on GPU, {describe_size(DEFAULT_CPU_MAX_SIZE)} on CPU.", "SIZE"),
    ("--gpucomm-json", "gpucomm_json", "gpucomm_json", "GPUCOMM_JSON",
     "Write every measurement (summary rows and raw samples) to this JSON file. Default: none.", "PATH"),
    ("--gpucomm-plots", "gpucomm_plots", "gpucomm_plots", "GPUCOMM_PLOTS",
     "Draw the plots of the run into DIR at its end (created if missing): per sweep the bandwidth curve against "
     "the baseline's band, the copies' device-pair matrices, the small messages' latency distribution. Needs "
     "matplotlib: pip install 'pytest-gpucomm[plots]'. Default: no plots.", "DIR"),
    ("--gpucomm-plots-format", "gpucomm_plots_format", "gpucomm_plots_format", "GPUCOMM_PLOTS_FORMAT",
     "The plots' file format: png or svg. Default: png.", "png|svg"),
    ("--gpucomm-dtype", "gpucomm_dtype", "gpucomm_dtype", "GPUCOMM_DTYPE",
     "Element types of the collective suite, comma-separated: float32, bfloat16, float16. Default: float32.",
     "DTYPE[,DTYPE]"),
    ("--gpucomm-benchmark-json", "gpucomm_benchmark_json", "gpucomm_benchmark_json", "GPUCOMM_BENCHMARK_JSON",
     "Also write the measurements in pytest-benchmark's JSON format (for 'pytest-benchmark compare'). "
     "Default: none.", "PATH"),
    ("--gpucomm-timeout", "gpucomm_timeout", "gpucomm_timeout", "GPUCOMM_TIMEOUT",
     f"Seconds a collective may take on the ranks before the test fails as hung. Default: {DEFAULT_TIMEOUT_S:g}.",
     "SECONDS"),
    ("--gpucomm-pairs", "gpucomm_pairs", "gpucomm_pairs", "GPUCOMM_PAIRS",
     "Which ordered device pairs the pair tests (gpu_pair, gpu_link) run over: 'all' (every ordered pair: n x "
     "(n - 1)), 'neighbours' (each device's ring neighbours, i -> i+1 mod n and back: 2n), 'from0' (device 0 with "
     "each other device, 0 -> j and j -> 0: 2(n - 1)). The all-peers patterns (gpu_hub, copy_all_pairs) are not "
     f"affected. Default (or 'auto'): all up to {AUTO_ALL_PAIRS_MAX_DEVICES} devices, neighbours above.",
     "all|neighbours|from0|auto"),
    ("--gpucomm-engine", "gpucomm_engine", "gpucomm_engine", "GPUCOMM_ENGINE",
     "What runs the cases of the tests that take comm: 'torch' (ours), 'nccl-tests' (nccl-tests' binaries, -g <world>, "
     "and nvbandwidth; ids gain '-nccl-tests') or 'both' (each case twice, ids ending '-torch' and '-nccl-tests'; "
     "a failing case says whether the other engine held). Default: torch.", "torch|nccl-tests|both"),
    ("--gpucomm-nccl-tests", "gpucomm_nccl_tests", "gpucomm_nccl_tests", "GPUCOMM_NCCL_TESTS",
     "The folder of the nccl-tests binaries for --gpucomm-engine. Default: found on PATH.", "DIR"),
    ("--gpucomm-nvbandwidth", "gpucomm_nvbandwidth", "gpucomm_nvbandwidth", "GPUCOMM_NVBANDWIDTH",
     "The nvbandwidth program for the copy cases of --gpucomm-engine. Default: found on PATH.", "PATH"),
    ("--gpucomm-copy-engine", "gpucomm_copy_engine", "gpucomm_copy_engine", "GPUCOMM_COPY_ENGINE",
     "What makes the copy suite's copies: 'ce' (the copy engines, as nvbandwidth's *_memcpy_ce), 'sm' (a Triton copy "
     "kernel on the GPU's cores, as its *_memcpy_sm; ops copy_sm, h2d_sm, ...; on CPU an element-wise kernel) or "
     "'both' (ids ending -ce and -sm). Copy-engine copies are made by GPUCOMM_COPY_CALL. Default: ce.", "ce|sm|both"),
    ("--gpucomm-launch", "gpucomm_launch", "gpucomm_launch", "GPUCOMM_LAUNCH",
     "How the ranks of a process group are started: 'auto' (as one rank of the job when pytest was started once "
     "per rank by torchrun, srun or mpirun, found from their environment variables; else 'pool'), 'pool' (a pool "
     "of worker processes on this host), or 'torchrun', 'slurm', 'mpi' (that launcher's variables, which must "
     "be set). Default: auto.", "auto|pool|torchrun|slurm|mpi"),
    ("--gpucomm-rank-log", "gpucomm_rank_log", "gpucomm_rank_log", "GPUCOMM_RANK_LOG",
     "Launched mode: each rank other than global rank 0 writes everything it prints (pytest's output and the "
     "C-level output of NCCL/gloo) to DIR/rank-<R>.log instead of its standard output and error (DIR is created), "
     "or with 'console' to its own standard output and error. Global rank 0 prints as usual and names the folder in "
     "its header. Default: a folder of the job under pytest's temporary root, "
     "/tmp/pytest-of-<user>/gpucomm-<launcher>-<job>/.", "DIR|console"),
]


@dataclass(frozen=True, kw_only=True)
class Settings(Judging):
    """The session's settings: the values the gate judges with (``Judging``: tolerance, alpha, tail tolerance,
    strict, folds, runs kept), then the rest of the options."""

    baseline: Optional[str]
    device: str
    min_time_s: float
    max_size: Optional[int]  # None: the default for the device kind
    json_path: Optional[str]
    timeout_s: float
    dtypes: tuple[str, ...] = (DEFAULT_DTYPE,)
    baseline_dir: Optional[str] = None
    baseline_save: bool = False
    baseline_save_partial: bool = False
    benchmark_json: Optional[str] = None
    allow_xdist: bool = False
    lock: Optional["Lock"] = None  # --gpucomm-lock: the options read from the command line only
    launch: str = "auto"
    rank_log: Optional[str] = None
    tail_time_s: Optional[float] = None  # None: min_time_s
    plots_dir: Optional[str] = None
    plots_format: str = "png"
    pairs: Optional[str] = None  # --gpucomm-pairs; None: the default for the device count (parametrize.pair_choice)
    cause_cases: int = DEFAULT_CAUSE_CASES
    env_names: tuple[str, ...] = ()  # --gpucomm-env: more variables recorded (names or patterns)
    prior: Optional[str] = None  # --gpu-baseline-prior: a path, "none", or None (the shipped prior)
    min_judged: float = 0.0  # --gpu-min-judged
    baseline_nodes: str = "own"  # --gpu-baseline-nodes: "own" or "pooled"
    engine: str = "torch"  # --gpucomm-engine: "torch", "nccl-tests" or "both"
    nccl_tests_dir: Optional[str] = None  # --gpucomm-nccl-tests; None: PATH
    nvbandwidth: Optional[str] = None  # --gpucomm-nvbandwidth; None: PATH
    copy_engine: str = "ce"  # --gpucomm-copy-engine: "ce", "sm" or "both"
    remeasure_after_s: float = DEFAULT_REMEASURE_AFTER_S  # --gpu-remeasure-after

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines each case runs on, in order: ("torch",), ("nccl-tests",) or both."""
        return engines_of(self.engine)

    def to_dict(self) -> dict[str, object]:
        """The settings that shaped the figures, for the JSON report."""
        return {"locked": self.lock is not None, "device": self.device, "min_time_s": self.min_time_s,
                "max_size": self.max_size, "baseline": self.baseline, "timeout_s": self.timeout_s,
                "tolerance": self.tolerance,
                "alpha": self.alpha, "strict": self.strict, "dtypes": list(self.dtypes),
                "tail_tolerance": self.tail_tolerance, "folds": self.folds, "cause_cases": self.cause_cases,
                "env_names": list(self.env_names), "prior": self.prior, "min_judged": self.min_judged,
                "baseline_nodes": self.baseline_nodes, "engine": self.engine,
                "copy_engine": self.copy_engine, "remeasure_after_s": self.remeasure_after_s,
                "tail_time_s": TAIL_TIME_FACTOR * self.min_time_s if self.tail_time_s is None else self.tail_time_s}

    def timing(self) -> "TimingSettings":
        """The timing engine's settings of every measurement of the session."""
        from ..ops.timing import TimingSettings

        return TimingSettings(min_time_s=self.min_time_s)

    def describe(self) -> str:
        """The header's settings line (the largest size follows the hardware: ``parametrize.max_size_lines``)."""
        parts = [
            f"device={self.device}",
            f"min-time={self.min_time_s:g}s",
            *([f"tail-time={self.tail_time_s:g}s"] if self.tail_time_s is not None else []),
            f"timeout={self.timeout_s:g}s",
            f"dtype={','.join(self.dtypes)}",
            f"baseline={self.baseline or 'none'}{' (saving)' if self.baseline_save else ''}",
            *([f"pairs={self.pairs}"] if self.pairs is not None else []),
            *([f"engine={self.engine}"] if self.engine != "torch" else []),
            *([f"copy-engine={self.copy_engine}"] if self.copy_engine != "ce" else []),
        ]
        if self.baseline:
            parts.append(f"tolerance={self.tolerance:g}, tail-tolerance={self.tail_tolerance:g}, alpha={self.alpha:g}, "
                         f"folds={self.folds}")
        if self.json_path:
            parts.append(f"json={self.json_path}")
        if self.plots_dir:
            parts.append(f"plots={self.plots_dir} ({self.plots_format})")
        line = "gpucomm settings: " + ", ".join(parts)
        return line if self.lock is None else line + "\n" + self.lock.describe()


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpucomm", "GPU communication benchmarks (pytest-gpucomm): command line > environment > "
                                       "ini; an empty value is an error, not unset")
    for opt, dest, ini, env, help_, metavar in _OPTIONS:
        group.addoption(opt, dest=dest, default=None, metavar=metavar, help=help_ + f" Env: {env}; ini: {ini}.")
        parser.addini(ini, help=help_, default=None)
    group.addoption("--gpu-baseline-save", dest="gpucomm_baseline_save", action="store_true", default=False,
                    help="Add this run's samples to the baseline named by --gpu-baseline (created if missing), "
                         "keeping the cases not run this time. Default: off.")
    group.addoption("--gpu-baseline-save-partial", dest="gpucomm_baseline_save_partial", action="store_true",
                    default=False,
                    help="With --gpu-baseline-save: save the cases of a run that did not finish (Ctrl-C, SIGTERM, "
                         "-x, --maxfail, pytest.exit) too. Default: off (an unfinished recording run saves nothing).")
    group.addoption("--gpu-baseline-strict", dest="gpucomm_baseline_strict", action="store_true", default=False,
                    help="A measured case with no baseline entry fails (status NEW) instead of passing as new, and "
                         "a case the baseline cannot gate fails (NOT GATED) instead of passing as not gated. "
                         "Default: off.")
    group.addoption("--gpucomm-lock", dest="gpucomm_lock", action="store_true", default=False,
                    help="A locked gate (CI): every gpucomm option is read from the command line alone, never from "
                         "addopts, PYTEST_ADDOPTS, the gpucomm_* ini keys (pytest.ini, pyproject.toml, tox.ini, "
                         "setup.cfg) or the GPUCOMM_* environment variables, so the repository under test cannot "
                         "loosen its tolerance, alpha, baseline or strictness; the header says what was ignored. "
                         "Env: GPUCOMM_LOCK=1. Default: off.")
    group.addoption("--gpucomm-allow-xdist", dest="gpucomm_allow_xdist", action="store_true", default=False,
                    help="Measure GPUs in pytest-xdist workers (-n) too; only right when each worker sees GPUs of its "
                         "own (CUDA_VISIBLE_DEVICES per worker), else they measure each other's traffic. "
                         f"Env: GPUCOMM_ALLOW_XDIST=1 ({checks.FLAG_WORDS}). Default: off (GPU measurements under "
                         "-n fail with the reason).")


def _raw(config: pytest.Config, dest: str, ini: str, env: str) -> tuple[Optional[str], str]:
    lock = lock_of(config)
    if lock is not None:  # locked: the command line, or the default
        value = lock.given.get(dest)
        return (None, "the default (locked)") if value is None else (str(value), "the command line")
    v = config.getoption(dest)
    if v is not None:
        return str(v), "the command line"
    if env in os.environ:
        return os.environ[env], f"the {env} environment variable"
    iv = config.getini(ini)
    if iv is not None:  # the key is in the ini file, empty too: an empty value is an error, not "unset"
        return str(iv), f"the ini key {ini} in {config.inipath}" if config.inipath else f"the ini key {ini}"
    return None, "the default"


def origin(config: pytest.Config, opt: str) -> str:
    """Where the value of ``opt`` came from ("the command line", "the GPUCOMM_... environment variable", ...)."""
    for o, dest, ini, env, _, _ in _OPTIONS:
        if o == opt:
            return _raw(config, dest, ini, env)[1]
    raise KeyError(opt)  # pragma: no cover


def given(config: pytest.Config, opt: str) -> tuple[Optional[str], str]:
    """The value of ``opt`` as given (None where not given), and where it came from."""
    for o, dest, ini, env, _, _ in _OPTIONS:
        if o == opt:
            return _raw(config, dest, ini, env)
    raise KeyError(opt)  # pragma: no cover


def _get(config: pytest.Config, opt: str, parse: Callable[[str, str, str], T], default: T) -> T:
    for o, dest, ini, env, _, _ in _OPTIONS:
        if o == opt:
            raw, origin = _raw(config, dest, ini, env)
            if raw is None:
                return default
            try:
                checks.not_empty(Origin.option(opt, raw, origin))  # empty is an error, never "off" (checks)
                return parse(raw, opt, origin)
            except CheckError as e:  # a value out of its range (checks): a usage error at the start
                raise pytest.UsageError(str(e)) from None
    raise KeyError(opt)  # pragma: no cover


def read_settings(config: pytest.Config) -> Settings:
    check_cpu_devices()
    lock = lock_of(config)
    flag = (lambda dest: bool(config.getoption(dest))) if lock is None else (lambda dest: bool(lock.given.get(dest)))
    return Settings(
        lock=lock,
        baseline=_get(config, "--gpu-baseline", lambda v, n, o: v.strip(), None),
        device=_get(config, "--gpucomm-device", parse_device, "auto"),
        min_time_s=_get(config, "--gpucomm-min-time", lambda v, n, o: parse_seconds(v, n, o, maximum=MAX_MIN_TIME_S),
                        DEFAULT_MIN_TIME_S),
        max_size=_get(config, "--gpucomm-max-size", parse_size_option, None),
        json_path=_get(config, "--gpucomm-json", lambda v, n, o: v, None),
        timeout_s=_get(config, "--gpucomm-timeout", lambda v, n, o: parse_seconds(v, n, o, allow_zero=False),
                       DEFAULT_TIMEOUT_S),
        dtypes=_get(config, "--gpucomm-dtype", parse_dtypes, (DEFAULT_DTYPE,)),
        baseline_dir=_get(config, "--gpu-baseline-dir", lambda v, n, o: v, None),
        max_runs=_get(config, "--gpu-baseline-runs", checked(checks.baseline_runs), DEFAULT_MAX_RUNS),
        tolerance=_get(config, "--gpu-tolerance", checked(checks.tolerance), DEFAULT_TOLERANCE),
        alpha=_get(config, "--gpu-alpha", checked(checks.alpha), DEFAULT_ALPHA),
        baseline_save=flag("gpucomm_baseline_save"),
        strict=flag("gpucomm_baseline_strict"),
        baseline_save_partial=flag("gpucomm_baseline_save_partial"),
        benchmark_json=_get(config, "--gpucomm-benchmark-json", lambda v, n, o: v, None),
        allow_xdist=flag("gpucomm_allow_xdist") or (lock is None and env_flag("GPUCOMM_ALLOW_XDIST")),
        launch=_get(config, "--gpucomm-launch", parse_launch, "auto"),
        rank_log=_get(config, "--gpucomm-rank-log", lambda v, n, o: v, None),
        tail_tolerance=_get(config, "--gpu-tail-tolerance", checked(checks.tail_tolerance), DEFAULT_TAIL_TOLERANCE),
        plots_dir=_get(config, "--gpucomm-plots", lambda v, n, o: v, None),
        plots_format=_get(config, "--gpucomm-plots-format", parse_plots_format, "png"),
        tail_time_s=_get(config, "--gpucomm-tail-time", lambda v, n, o: parse_seconds(v, n, o, maximum=MAX_MIN_TIME_S),
                         None),
        pairs=_get(config, "--gpucomm-pairs", parse_pairs, None),
        folds=_get(config, "--gpucomm-folds", checked(checks.folds), DEFAULT_FOLDS),
        cause_cases=_get(config, "--gpucomm-cause", checked(checks.cause_cases), DEFAULT_CAUSE_CASES),
        env_names=_get(config, "--gpucomm-env", parse_env_names, ()),
        prior=_get(config, "--gpu-baseline-prior", parse_prior, None),
        min_judged=_get(config, "--gpu-min-judged", checked(checks.min_judged), 0.0),
        baseline_nodes=_get(config, "--gpu-baseline-nodes", parse_baseline_nodes, "own"),
        engine=_get(config, "--gpucomm-engine", parse_engine, "torch"),
        nccl_tests_dir=_get(config, "--gpucomm-nccl-tests", lambda v, n, o: v.strip(), None),
        nvbandwidth=_get(config, "--gpucomm-nvbandwidth", lambda v, n, o: v.strip(), None),
        copy_engine=_get(config, "--gpucomm-copy-engine", parse_copy_engine, "ce"),
        remeasure_after_s=_get(config, "--gpu-remeasure-after", lambda v, n, o: parse_seconds(
            v, n, o, maximum=MAX_REMEASURE_AFTER_S), DEFAULT_REMEASURE_AFTER_S),
    )


def read_launch_options(config: pytest.Config) -> tuple[str, Optional[str]]:
    """--gpucomm-launch and --gpucomm-rank-log alone, read before the session's settings (at
    ``pytest_cmdline_main``, where a launched rank is set up)."""
    return (_get(config, "--gpucomm-launch", parse_launch, "auto"),
            _get(config, "--gpucomm-rank-log", lambda v, n, o: v, None))


# -- the locked gate (--gpucomm-lock, GPUCOMM_LOCK=1) -------------------------------------------------------
# pytest folds addopts (the ini file's) and PYTEST_ADDOPTS into the options it parses, so config.getoption cannot
# tell a value typed on the command line from one the repository's configuration added: a locked run parses the
# invocation's own arguments (config.invocation_params.args) again, for the gpucomm options alone.

_FLAGS = [("--gpu-baseline-save", "gpucomm_baseline_save"),
          ("--gpu-baseline-save-partial", "gpucomm_baseline_save_partial"),
          ("--gpu-baseline-strict", "gpucomm_baseline_strict"), ("--gpucomm-allow-xdist", "gpucomm_allow_xdist"),
          ("--gpucomm-lock", "gpucomm_lock")]


@dataclass(frozen=True, eq=False)
class Lock:
    """A locked run: where the lock came from, the gpucomm options given on the command line itself (dest ->
    value; a flag's value is True), and what the lock set aside (each "what (where)")."""

    source: str
    given: dict[str, object]
    ignored: tuple[str, ...]

    def describe(self) -> str:
        """The header's lock line."""
        ignored = "; ignored: " + ", ".join(self.ignored) if self.ignored else "; nothing was set elsewhere"
        return (f"gpucomm locked ({self.source}): every gpucomm option from the command line or its default, "
                f"none from addopts, PYTEST_ADDOPTS, ini keys or GPUCOMM_* variables{ignored}")


def _command_line(args: "list[str] | tuple[str, ...]") -> dict[str, object]:
    """The gpucomm options among ``args`` (the invocation's own arguments, without addopts), dest -> value."""
    import argparse

    # as pytest's own parser: no abbreviations, @FILE reads arguments from FILE
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, fromfile_prefix_chars="@")
    for opt, dest, *_ in _OPTIONS:
        parser.add_argument(opt, dest=dest, default=None)
    for opt, dest in _FLAGS:
        parser.add_argument(opt, dest=dest, action="store_true", default=None)
    try:
        known, _ = parser.parse_known_args(list(args))
    except SystemExit:  # pytest has parsed the same arguments already: not expected
        raise pytest.UsageError(f"--gpucomm-lock: cannot read the gpucomm options of {' '.join(args)!r}") from None
    return {k: v for k, v in vars(known).items() if v is not None}


def lock_of(config: pytest.Config) -> Optional[Lock]:
    """The run's lock (read once, kept in the config's stash), or None."""
    if _LOCK_KEY not in config.stash:
        config.stash[_LOCK_KEY] = read_lock(config)
    return config.stash[_LOCK_KEY]


def read_lock(config: pytest.Config) -> Optional[Lock]:
    """The run's lock, or None where neither the command line nor GPUCOMM_LOCK asks for one (--gpucomm-lock from
    addopts locks too: a lock only tightens)."""
    import shlex

    given = _command_line(config.invocation_params.args)
    if given.get("gpucomm_lock"):
        source = "--gpucomm-lock on the command line"
    elif env_flag("GPUCOMM_LOCK"):
        source = "the GPUCOMM_LOCK environment variable"
    elif config.getoption("gpucomm_lock"):
        source = "--gpucomm-lock from addopts or PYTEST_ADDOPTS"
    else:
        return None
    where = f" in {config.inipath}" if config.inipath else ""
    from_env = _command_line(shlex.split(os.environ.get("PYTEST_ADDOPTS", "")))
    ignored = []
    for opt, dest, ini, env, _, _ in _OPTIONS:
        value = config.getoption(dest)
        if value is not None and dest not in given:
            via = "PYTEST_ADDOPTS" if dest in from_env else f"addopts{where}"
            ignored.append(f"{opt}={value} ({via})")
        if config.getini(ini) is not None:
            ignored.append(f"{ini} = {config.getini(ini)} (the ini key{where})")
        if env in os.environ:
            ignored.append(f"{env}={os.environ[env]} (the environment)")
    for opt, dest in _FLAGS:
        if config.getoption(dest) and dest not in given and dest != "gpucomm_lock":
            ignored.append(f"{opt} ({'PYTEST_ADDOPTS' if dest in from_env else f'addopts{where}'})")
    if os.environ.get("GPUCOMM_ALLOW_XDIST"):
        ignored.append(f"GPUCOMM_ALLOW_XDIST={os.environ['GPUCOMM_ALLOW_XDIST']} (the environment)")
    return Lock(source, given, tuple(ignored))


_LOCK_KEY = pytest.StashKey[Optional[Lock]]()

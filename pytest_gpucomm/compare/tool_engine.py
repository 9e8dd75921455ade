"""nccl-tests and nvbandwidth run as an engine of the pytest session (``--gpucomm-engine``, issue 48 item 2).

The collective cases run the nccl-tests binary of their op (``all_reduce_perf``, ...: :data:`.nccl_output.
NCCL_TESTS_BINARIES`) in one process over the world's GPUs (``-g <world>``), the host<->device and peer copies
run nvbandwidth's copy-engine tests.  Each binary runs as few times as it can: nccl-tests once per op, world
and element type over every size the session collected (``-b``/``-e``/``-f`` where the sizes are one
geometric step, else once per size), with per-iteration CUDA-event times (``-I 1``) written as JSON (``-J``);
nvbandwidth once per buffer size (``-b`` MiB) for every copy test at once (``-j``).  A run is kept for the
session; a re-measure of the gate is a new process of one size.  What a run wrote is read by the reader of
their files (``pytest_gpucomm.foreign.read_foreign``, issue 48 item 1): :func:`read_output` is that one call,
given what their JSON does not hold (nccl-tests' version from its output, nvbandwidth's buffer size).

The exact command line, its wall time and how many cases it measured are in each measurement's ``info``
(``command``, ``tool_seconds``, ``tool_cases``; the reader's ``source`` and ``source_version`` name the
tool).  A program that is not there is :class:`ToolMissing` (the case is skipped: which program, where it was
looked for); one that exits non-zero, reports a wrong result (nccl-tests' ``#wrong``) or runs past the
session's timeout is :class:`ToolFailed` (the case fails with its output's last lines; a program past its
time is ended with its process group).

No pytest: the plugin (``plugin/engines.py``) turns these errors into skips and failures.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from ..measurement import Measurement
from ..units import format_size
from ..vocab import ENGINE_CHOICES, NCCL_TESTS, TORCH, engines_of
from .nccl_output import NCCL_TESTS_BINARIES, parse_nccl_tests_output, parse_nccl_tests_summary

if TYPE_CHECKING:
    from ..foreign import ForeignRun

__all__ = ["TORCH", "NCCL_TESTS", "ENGINE_CHOICES", "engines_of", "NVBANDWIDTH", "NVBANDWIDTH_TESTS",
           "NCCL_TESTS_DTYPES", "NCCL_TESTS_ITERS", "NCCL_TESTS_WARMUP", "ToolMissing", "ToolFailed", "ToolRun",
           "find_program", "run_program", "sweep_ranges", "read_output", "NcclTests", "Nvbandwidth", "last_lines",
           "cost_lines", "ENGINE_SUFFIXES", "engine_of_test", "twin_test_id", "counterpart_words"]

#: the id part each engine adds with --gpucomm-engine=both (only nccl-tests' with --gpucomm-engine=nccl-tests)
ENGINE_SUFFIXES = {TORCH: "-torch]", NCCL_TESTS: "-nccl-tests]"}
NVBANDWIDTH = "nvbandwidth"
#: our copy op -> nvbandwidth's copy-engine test of it (the bidirectional copies are not mapped: nvbandwidth's
#: figure of a bidirectional test is not known here to count the bytes of both directions, as ours does)
NVBANDWIDTH_TESTS = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce",
                     "copy": "device_to_device_memcpy_write_ce", "h2d_sm": "host_to_device_memcpy_sm",
                     "d2h_sm": "device_to_host_memcpy_sm", "copy_sm": "device_to_device_memcpy_write_sm"}
#: nvbandwidth's copy within one GPU (a copy-engine copy): our ``copy`` from a GPU to itself
LOCAL_COPY_TEST = "device_local_copy"
#: our element type -> nccl-tests' -d
NCCL_TESTS_DTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}
#: nccl-tests' timed iterations (-n) and warm-up iterations (-w) per size: its per-iteration samples
NCCL_TESTS_ITERS, NCCL_TESTS_WARMUP = 20, 5
#: a program past its time gets SIGTERM, then SIGKILL this many seconds later
KILL_GRACE_S = 5.0
#: lines of a failed program's output quoted in the failure
TAIL_LINES = 12
_BYTE_OP = {op: binary for binary, op in NCCL_TESTS_BINARIES.items()}


class ToolMissing(Exception):
    """A program (or a case) the engine cannot run here; the message says which and where it looked."""


class ToolFailed(Exception):
    """A program that failed: exited non-zero, reported wrong results, ran past its time or wrote no output
    the case can be read from; the message's first line says which and how, the rest its last lines."""


def last_lines(text: str, n: int = TAIL_LINES, width: int = 116) -> str:
    """The last ``n`` non-empty lines of ``text``, each cut to ``width`` characters, indented."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()][-n:]
    cut = [line if len(line) <= width else line[:width - 3] + "..." for line in lines]
    return "\n".join(f"    {line}" for line in cut) if cut else "    (no output)"


def find_program(name: str, given: Optional[str], option: str, folder: bool) -> Path:
    """The program ``name``: in the folder ``given`` (``folder``), or the path ``given``, else on PATH;
    ToolMissing naming where it looked (``option`` is the setting that points at it)."""
    if given is not None:
        path = Path(given) / name if folder else Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path.absolute()
        what = "not an executable file" if path.exists() else "not found"
        raise ToolMissing(f"{name}: {path} is {what} ({option})")
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} not found on PATH; give {option}={'DIR' if folder else 'PATH'}")
    return Path(found).absolute()


@dataclass(frozen=True)
class ToolRun:
    """One run of a program: its command line, wall time, exit status and what it printed (``text``: stdout and
    stderr together; ``stdout``: its standard output alone where it was kept apart, else the same as ``text``)."""

    command: tuple[str, ...]
    seconds: float
    returncode: int
    text: str
    stdout: Optional[str] = None

    @property
    def output(self) -> str:
        """What the program wrote to its standard output (all it printed where the streams were not kept apart)."""
        return self.text if self.stdout is None else self.stdout

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)


def run_program(command: Sequence[str], timeout_s: float, env: Optional[Mapping[str, str]] = None, *,
                stdout_apart: bool = False) -> ToolRun:
    """Run ``command`` in a process group of its own, stdout and stderr together (``stdout_apart``: kept apart,
    for a program whose standard output is a document, its stderr after it in ``text``); past ``timeout_s`` the
    group is ended (SIGTERM, then SIGKILL) and ToolFailed says so with the output's last lines.  Interrupted
    (Ctrl-C, SIGTERM), the group is ended before the interruption goes on."""
    start = time.monotonic()
    p = subprocess.Popen(list(command), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE if stdout_apart else subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=dict(env) if env is not None else None, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except BaseException as e:  # Ctrl-C or SIGTERM (a KeyboardInterrupt) must not leave it running either
        out, err = _end_group(p)
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        text = (out + (err or b"")).decode(errors="replace")
        raise ToolFailed(f"{Path(command[0]).name} did not finish within the session's --gpucomm-timeout of "
                         f"{timeout_s:g} s and was ended\n  command: {shlex.join(command)}\n  its last lines:\n"
                         f"{last_lines(text)}") from None
    stdout = out.decode(errors="replace")
    return ToolRun(tuple(command), time.monotonic() - start, p.returncode,
                   stdout + (err or b"").decode(errors="replace"), stdout if stdout_apart else None)


def _end_group(p: "subprocess.Popen[bytes]") -> tuple[bytes, bytes]:
    """End the process group of ``p`` (SIGTERM, then SIGKILL after KILL_GRACE_S); what it printed (stdout,
    stderr)."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            out, err = p.communicate(timeout=wait)
            return out or b"", err or b""
        except subprocess.TimeoutExpired:
            continue
    out, err = p.communicate()
    return out or b"", err or b""


def sweep_ranges(sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """nccl-tests ``(-b, -e, -f)`` runs that measure exactly ``sizes``: one run where they are one geometric
    step (a whole factor of 2 or more), else one run per size."""
    s = sorted(set(int(x) for x in sizes))
    if len(s) == 1:
        return [(s[0], s[0], 2)]
    f = s[1] // s[0] if s[0] > 0 else 0
    if f >= 2 and all(b == a * f for a, b in zip(s, s[1:])):
        return [(s[0], s[-1], f)]
    return [(x, x, 2) for x in s]


def read_output(path: Path, *, nvbandwidth_size: Optional[int] = None, version: Optional[str] = None
                ) -> "ForeignRun":
    """Their output file read as a run of ours (:func:`pytest_gpucomm.foreign.read_foreign`, the one call to
    it): nvbandwidth's buffer size and nccl-tests' version, which their JSON does not hold, from the run."""
    from ..foreign import read_foreign

    return read_foreign(path, nvbandwidth_size=nvbandwidth_size, version=version)


def _device_indices(devices: Sequence[str]) -> list[int]:
    """The device indices a measurement names ("cuda:1" -> 1; a host side, with no index, left out)."""
    out = []
    for d in devices:
        tail = str(d).rsplit(":", 1)[-1]
        if tail.isdigit():
            out.append(int(tail))
    return out


def _stamped(m: Measurement, run: ToolRun, cases: int) -> Measurement:
    """``m`` with the run that measured it in its info (the reader's ``source`` and ``source_version`` name the
    tool)."""
    m.info["command"], m.info["tool_seconds"], m.info["tool_cases"] = run.command_line, round(run.seconds, 3), cases
    return m


@dataclass
class _Outcome:
    """A run kept for the session: what was read, or why it failed."""

    run: Optional[ToolRun]
    foreign: Any = None
    error: Optional[str] = None


@dataclass
class NcclTests:
    """The nccl-tests binaries of one session: ``measure`` one case, one binary run per op, world and type.

    ``directory``: --gpucomm-nccl-tests (None: PATH); ``sizes``: every size the session collected (one sweep
    covers them); ``workdir``: where their JSON goes; ``env``: the programs' environment."""

    directory: Optional[str]
    timeout_s: float
    workdir: Path
    sizes: set[int] = field(default_factory=set)
    env: Optional[Mapping[str, str]] = None
    reader: Callable[..., Any] = read_output
    runs: list[ToolRun] = field(default_factory=list)
    _kept: dict[tuple[str, int, str, int, int, int], _Outcome] = field(default_factory=dict)

    def program(self, op: str) -> Path:
        """The binary of ``op``; ToolMissing where nccl-tests has none or it is not found."""
        if op not in _BYTE_OP:
            raise ToolMissing(f"nccl-tests has no binary for {op}")
        return find_program(_BYTE_OP[op], self.directory, "--gpucomm-nccl-tests", folder=True)

    def command(self, op: str, world: int, dtype: str, lo: int, hi: int, factor: int, out: Path) -> list[str]:
        """The command line of one sweep."""
        return [str(self.program(op)), "-b", str(lo), "-e", str(hi), "-f", str(factor), "-g", str(world),
                "-d", NCCL_TESTS_DTYPES[dtype], "-n", str(NCCL_TESTS_ITERS), "-w", str(NCCL_TESTS_WARMUP),
                "-c", "1", "-I", "1", "-J", str(out)]

    def measure(self, op: str, world: int, dtype: str, in_place: bool, size: int, fresh: bool = False
                ) -> Measurement:
        """The case (op, world, dtype, placement, size) from the session's sweep of it (run now if it has not
        run yet), or with ``fresh`` from a new run of this size alone."""
        if dtype not in NCCL_TESTS_DTYPES:
            raise ToolMissing(f"nccl-tests is not run for {dtype} here (known: {', '.join(NCCL_TESTS_DTYPES)})")
        self.program(op)  # missing: ToolMissing before anything runs
        if fresh:
            outcome = self._run(op, world, dtype, (size, size, 2), keep=False)
        else:
            ranges = sweep_ranges(sorted(self.sizes | {size}))
            rng = next((r for r in ranges if r[0] <= size <= r[1]), (size, size, 2))
            outcome = self._run(op, world, dtype, rng, keep=True)
        return self._case(outcome, op, world, dtype, in_place, size)

    def _run(self, op: str, world: int, dtype: str, rng: tuple[int, int, int], keep: bool) -> _Outcome:
        key = (op, world, dtype, *rng)
        if keep and key in self._kept:
            return self._kept[key]
        out = self.workdir / f"{_BYTE_OP[op]}-g{world}-{dtype}-{rng[0]}-{rng[1]}-{len(self.runs)}.json"
        cmd = self.command(op, world, dtype, *rng, out)
        try:
            run = run_program(cmd, self.timeout_s, self.env)
        except ToolFailed as e:
            outcome = _Outcome(None, error=str(e))
        else:
            self.runs.append(run)
            outcome = self._read(run, out)
        if keep:
            self._kept[key] = outcome
        return outcome

    def _read(self, run: ToolRun, out: Path) -> _Outcome:
        name = Path(run.command[0]).name
        if run.returncode != 0:
            return _Outcome(run, error=f"{name} exited with status {run.returncode}\n  command: {run.command_line}\n"
                                       f"  its last lines:\n{last_lines(run.text)}")
        version = parse_nccl_tests_summary(run.text).get("nccl_tests_version")  # "# nccl-tests version 2.19.6"
        try:
            return _Outcome(run, foreign=self.reader(out, version=version))
        except (OSError, ValueError) as e:  # ForeignError is a ValueError naming the file and field
            return _Outcome(run, error=f"{name} wrote no output to read: {e}\n  command: {run.command_line}\n"
                                       f"  its last lines:\n{last_lines(run.text)}")

    def _case(self, outcome: _Outcome, op: str, world: int, dtype: str, in_place: bool, size: int) -> Measurement:
        if outcome.run is None:
            raise ToolFailed(outcome.error or "nccl-tests did not run")
        run, name = outcome.run, Path(outcome.run.command[0]).name
        form = "in place" if in_place else "out of place"
        rows = [r for r in parse_nccl_tests_output(run.text, op) if r["in_place"] == in_place]
        row = _nearest(rows, size, lambda r: int(r["size_bytes"]))
        if row is not None and row["wrong"]:  # before the exit status: nccl-tests exits 7 on wrong values
            raise ToolFailed(f"{name} reported {row['wrong']} wrong values at {format_size(int(row['size_bytes']))} "
                             f"{form} (#wrong)\n  command: {run.command_line}\n  its last lines:\n"
                             f"{last_lines(run.text)}")
        if outcome.error is not None:
            raise ToolFailed(outcome.error)
        cases = [c.measurement for c in outcome.foreign.cases
                 if c.measurement.op == op and bool(c.measurement.info.get("in_place")) == in_place]
        m = _nearest(cases, size, lambda c: int(c.size_bytes))
        if m is None:
            raise ToolFailed(f"{name} measured no {op} {form} of {format_size(size)}\n  command: {run.command_line}"
                             f"\n  its last lines:\n{last_lines(run.text)}")
        m = Measurement(m.op, m.size_bytes, list(m.samples_s), m.devices, m.bytes_per_iter, m.busbw_factor,
                        m.world_size, m.dtype, m.kind, dict(m.info))
        if m.size_bytes != size:
            m.info["requested_bytes"] = size
        return _stamped(m, run, len(outcome.foreign.cases))


def _nearest(items: Sequence[Any], size: int, size_of: Callable[[Any], int]) -> Any:
    """The item of ``size``, else the largest below it and above half of it (whole elements per rank round a
    size down), else None."""
    exact = [x for x in items if size_of(x) == size]
    if exact:
        return exact[0]
    below = [x for x in items if size / 2 < size_of(x) < size]
    return max(below, key=size_of) if below else None


@dataclass
class Nvbandwidth:
    """nvbandwidth for one session: ``measure`` one copy, one run per buffer size for every copy test."""

    program_path: Optional[str]
    timeout_s: float
    workdir: Path
    env: Optional[Mapping[str, str]] = None
    reader: Callable[..., Any] = read_output
    runs: list[ToolRun] = field(default_factory=list)
    _kept: dict[int, _Outcome] = field(default_factory=dict)

    def program(self) -> Path:
        return find_program(NVBANDWIDTH, self.program_path, "--gpucomm-nvbandwidth", folder=False)

    def command(self, mib: int) -> list[str]:
        """The command line of one buffer size: every mapped copy test at once."""
        return [str(self.program()), "-j", "-b", str(mib), "-t", *NVBANDWIDTH_TESTS.values(), LOCAL_COPY_TEST]

    def measure(self, op: str, devices: Sequence[str], size: int, fresh: bool = False) -> Measurement:
        """The copy ``op`` between ``devices`` (a GPU for h2d/d2h, source and destination for a peer copy) of
        ``size`` bytes, a whole number of MiB."""
        if op not in NVBANDWIDTH_TESTS:
            raise ToolMissing(f"nvbandwidth has no copy-engine test mapped to {op} "
                              f"(mapped: {', '.join(NVBANDWIDTH_TESTS)})")
        mib, rest = divmod(size, 1 << 20)
        if rest or mib < 1:
            raise ToolMissing(f"nvbandwidth copies whole MiB buffers (-b MiB); {format_size(size)} is not one")
        self.program()
        outcome = self._kept.get(mib) if not fresh else None
        if outcome is None:
            outcome = self._run(mib)
            if not fresh:
                self._kept[mib] = outcome
        return self._case(outcome, op, devices, size)

    def _run(self, mib: int) -> _Outcome:
        cmd = self.command(mib)
        try:
            run = run_program(cmd, self.timeout_s, self.env, stdout_apart=True)  # -j: the JSON on stdout
        except ToolFailed as e:
            return _Outcome(None, error=str(e))
        self.runs.append(run)
        if run.returncode != 0:
            return _Outcome(run, error=f"nvbandwidth exited with status {run.returncode}\n  command: "
                                       f"{run.command_line}\n  its last lines:\n{last_lines(run.text)}")
        out = self.workdir / f"nvbandwidth-b{mib}-{len(self.runs)}.json"
        out.write_text(run.output[run.output.find("{"):] if "{" in run.output else run.output)  # -j's JSON
        try:
            return _Outcome(run, foreign=self.reader(out, nvbandwidth_size=mib << 20))
        except (OSError, ValueError) as e:
            return _Outcome(run, error=f"nvbandwidth wrote no output to read: {e}\n  command: {run.command_line}\n"
                                       f"  its last lines:\n{last_lines(run.text)}")

    def _case(self, outcome: _Outcome, op: str, devices: Sequence[str], size: int) -> Measurement:
        if outcome.error is not None or outcome.run is None:
            raise ToolFailed(outcome.error or "nvbandwidth did not run")
        run = outcome.run
        want = _device_indices(devices)
        for c in outcome.foreign.cases:
            m = c.measurement
            if m.op == op and _device_indices(m.devices) == want:  # the run was of this size: its figure's
                samples = [size / (g * 1e9) for g in m.samples_gbps]  # times at the size asked
                m = Measurement(op, size, samples, tuple(devices), size, 1.0, 1, None, "copy", dict(m.info))
                return _stamped(m, run, len(outcome.foreign.cases))
        seen = outcome.foreign.env.get("count")
        if isinstance(seen, int) and any(i >= seen for i in want):  # not N/A: a GPU it does not see at all
            raise ToolFailed(f"nvbandwidth sees {seen} GPU(s), not {', '.join(map(str, devices))}: no figure of "
                             f"{op} {format_size(size)} (command: {run.command_line})")
        # an entry nvbandwidth left N/A (no peer access between the two, or a copy within one GPU by kernel,
        # which it has no test of) is a case it cannot measure: skipped with the reason, not failed
        raise ToolMissing(f"nvbandwidth gave no figure of {op} {format_size(size)} between "
                          f"{', '.join(map(str, devices))} (N/A in {NVBANDWIDTH_TESTS[op]}; command: "
                          f"{run.command_line})")


def cost_lines(runs: Sequence[ToolRun]) -> list[str]:
    """Each run's command line and wall time, for -v output."""
    return [f"gpucomm engine: {r.command_line} ({r.seconds:.1f} s, exit {r.returncode})" for r in runs]


def engine_of_test(nodeid: str) -> Optional[str]:
    """The engine named at the end of a test id (``[...-nccl-tests]``), or None (the default engine's ids)."""
    for engine, suffix in ENGINE_SUFFIXES.items():
        if nodeid.endswith(suffix):
            return engine
    return None


def twin_test_id(nodeid: str) -> Optional[str]:
    """The id of the same case on the other engine of ``both`` (``[...-torch]`` <-> ``[...-nccl-tests]``), or None
    where the id names no engine."""
    engine = engine_of_test(nodeid)
    if engine is None:
        return None
    other = NCCL_TESTS if engine == TORCH else TORCH
    return nodeid[:-len(ENGINE_SUFFIXES[engine])] + ENGINE_SUFFIXES[other]


def counterpart_words(engine: str, m: Measurement, twin: Measurement, ratio: float, tolerance: float) -> str:
    """With both engines, the line under a REGRESSION of ``m`` (measured by ``engine``) that says how its twin (the
    same case on the other engine) stands against its own baseline, ``ratio``: where the slowdown is."""
    other = NCCL_TESTS if engine == TORCH else TORCH
    tool = str(twin.info.get("source") or other) if other != TORCH else TORCH
    mine = str(m.info.get("source") or engine) if engine != TORCH else TORCH
    path = "collective path" if m.kind == "collective" else "copy path"
    if ratio >= 1 - tolerance:
        whose = mine + ("'" if mine.endswith("s") else "'s")
        where = f"{whose} {path}" if engine == TORCH else f"{whose} own run, not what both engines share"
        return f"{tool} holds {ratio:.2f}x: the slowdown is in {where}"
    return (f"{tool} dropped too ({ratio:.2f}x): the slowdown is in what both engines share (the library, the "
            "driver, the hardware)")

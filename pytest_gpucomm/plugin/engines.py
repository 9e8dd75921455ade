"""The engines of the session (``--gpucomm-engine=torch|nccl-tests|both``, issue 48 item 2).

A test that takes the ``comm`` fixture takes ``gpucomm_engine`` through it: with the default engine it is
"torch" and nothing is parametrized (the test ids stay as they were, so baselines still match); with
``nccl-tests`` every such test runs once on it, its id ending ``-nccl-tests``; with ``both`` twice, ``-torch``
then ``-nccl-tests`` (the torch case first: its counterpart's figure is then known, or one sweep away, when
either fails; a ``-torch`` case is keyed as the default engine's, ``vocab.default_engine_id``).
``@pytest.mark.engines("torch")`` keeps a test off an engine (it is skipped there, saying so).

On the nccl-tests engine the ``comm`` fixture is a :class:`~.tool_comm.ToolComm`: ``comm.collective`` (and
``comm.all_reduce``, ...) runs the op's nccl-tests binary and ``comm.host_to_device``, ``comm.device_to_host``
and ``comm.copy`` run nvbandwidth (:mod:`pytest_gpucomm.compare.tool_engine`); every other measurement has
no counterpart there and is skipped with that reason, as is every case where a program is missing or the
session measures the CPU variants (nothing of theirs runs without a GPU; ``GPUCOMM_ENGINE_STANDIN=1`` runs
the stand-in binaries of the tests there).  The ``process_group`` of such a case starts no ranks.

When a case fails as REGRESSION with both engines, :meth:`Engines.counterpart_line` says how the other
engine's figure of the same case stands against its own baseline: "nccl-tests holds 1.00x: the slowdown is
in torch's collective path", and the converse.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pytest

from .. import checks
from ..checks import CheckError
from ..vocab import NCCL_TESTS, TORCH

if TYPE_CHECKING:
    from ..compare.tool_engine import NcclTests, Nvbandwidth, ToolRun
    from ..gate import Gate
    from ..measurement import Measurement, Record
    from .devices import Devices
    from .settings import Settings

__all__ = ["Engines", "EngineSettings", "ToolWorld", "STANDIN_ENV", "read_engines_mark"]

#: a yes/no variable: the programs found are the tests' stand-ins, which run on the CPU variants too
STANDIN_ENV = "GPUCOMM_ENGINE_STANDIN"
def read_engines_mark(item: pytest.Item) -> Optional[tuple[str, ...]]:
    """The engines of the test's ``@engines(...)`` marker (None without one); a bad one is a usage error
    naming the test and the value."""
    mark = item.get_closest_marker("engines")
    if mark is None:
        return None
    if mark.kwargs or not mark.args:
        raise pytest.UsageError(f"{item.nodeid}: @engines(...) takes engine names only ({TORCH}, {NCCL_TESTS}), "
                                f"got args={mark.args!r} kwargs={mark.kwargs!r}")
    bad = [a for a in mark.args if a not in (TORCH, NCCL_TESTS)]
    if bad:
        raise pytest.UsageError(f"{item.nodeid}: @engines: unknown engine {bad[0]!r}; known: {TORCH}, {NCCL_TESTS}")
    return tuple(mark.args)


class ToolWorld:
    """The ``process_group`` of a case on another engine: its world size, and no ranks (the binary is one
    process over the world's GPUs)."""

    kind = "world"
    restartable = False

    def __init__(self, world_size: int, engine: str) -> None:
        self.world_size = world_size
        self.engine = engine

    def run(self, task: str, kwargs: dict[str, object], timeout_s: float, label: str) -> list[Any]:
        raise pytest.UsageError(f"{label}: process_group.run() runs on torch's ranks; this case's engine is "
                                f"{self.engine}, which starts none (@pytest.mark.engines('torch') keeps the test "
                                "on torch)")

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class EngineSettings:
    """What :class:`Engines` reads of the session's settings (:meth:`of` them)."""

    engines: tuple[str, ...]  # --gpucomm-engine's, in order (Settings.engines): ("torch",), ("nccl-tests",) or both
    device: str  # --gpucomm-device, named where the other engines have nothing to run
    locked: bool  # --gpucomm-lock: no GPUCOMM_* variable is read (GPUCOMM_ENGINE_STANDIN)
    nccl_tests_dir: Optional[str]  # --gpucomm-nccl-tests; None: PATH
    nvbandwidth: Optional[str]  # --gpucomm-nvbandwidth; None: PATH
    timeout_s: float  # a program run's
    tolerance: float  # the gate's, which the other engine's figure is said against

    @classmethod
    def of(cls, settings: "Settings") -> "EngineSettings":
        return cls(engines=settings.engines, device=settings.device, locked=settings.lock is not None,
                   nccl_tests_dir=settings.nccl_tests_dir, nvbandwidth=settings.nvbandwidth,
                   timeout_s=settings.timeout_s, tolerance=settings.tolerance)


class Engines:
    """The session's engines: which run, the sizes the sweeps cover, the programs' runs and their cost."""

    def __init__(self, settings: EngineSettings, devices: "Devices", launched: bool,
                 width: Callable[[], int] = lambda: 120) -> None:
        self.settings = settings
        self.width = width  # a failure's lines are wrapped to it (the terminal's: finish.terminal_width)
        self.devices = devices
        self.launched = launched
        self.sizes: set[int] = set()  # every size collected (the nccl-tests sweeps cover them)
        self._workdir: Optional[Path] = None
        self._nccl_tests: Optional["NcclTests"] = None
        self._nvbandwidth: Optional["Nvbandwidth"] = None

    @property
    def engines(self) -> tuple[str, ...]:
        return self.settings.engines

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        """One test per engine where the session has another than torch (ids: see the module's doc)."""
        if self.engines != (TORCH,) and "gpucomm_engine" in metafunc.fixturenames:
            metafunc.parametrize("gpucomm_engine", list(self.engines), ids=list(self.engines), indirect=True)

    def unavailable(self, engine: str, item: pytest.Item) -> Optional[str]:
        """Why ``item`` cannot run on ``engine`` here (None: it can)."""
        marked = read_engines_mark(item)
        if marked is not None and engine not in marked:
            return f"@engines({', '.join(marked)}) keeps this test off the {engine} engine"
        if engine == TORCH:
            return None
        if self.launched:
            return (f"the {engine} engine runs one process over this host's GPUs; not in a launched job "
                    "(torchrun, srun, mpirun)")
        if self.devices.info.kind != "gpu" and not self._standin():
            return (f"the {engine} engine runs NVIDIA's nccl-tests and nvbandwidth on GPUs; this session measures "
                    f"the CPU variants (--gpucomm-device={self.settings.device}): nothing of theirs to run")
        return None

    def _standin(self) -> bool:
        if self.settings.locked:  # a locked gate reads no GPUCOMM_* variable
            return False
        try:
            return checks.env_flag(STANDIN_ENV, False)
        except CheckError as e:
            raise pytest.UsageError(str(e)) from None

    # -- the programs ----------------------------------------------------------------------------------
    def _dir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gpucomm-engine-"))
        return self._workdir

    def _env(self) -> dict[str, str]:
        """The programs' environment: ours, with the NCCL library of torch's wheel first where it is installed
        (what the binaries were built against, as ``compare.nccl_tests`` runs them)."""
        import os

        from ..compare.nccl_tests import find_wheel_nccl_lib

        env = dict(os.environ)
        lib = find_wheel_nccl_lib()
        if lib:
            env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        return env

    @property
    def nccl_tests(self) -> "NcclTests":
        if self._nccl_tests is None:
            from ..compare.tool_engine import NcclTests

            self._nccl_tests = NcclTests(self.settings.nccl_tests_dir, self.settings.timeout_s, self._dir(),
                                         self.sizes, self._env())
        return self._nccl_tests

    @property
    def nvbandwidth(self) -> "Nvbandwidth":
        if self._nvbandwidth is None:
            from ..compare.tool_engine import Nvbandwidth

            self._nvbandwidth = Nvbandwidth(self.settings.nvbandwidth, self.settings.timeout_s, self._dir(),
                                            self._env())
        return self._nvbandwidth

    def collective(self, nodeid: str, op: str, world: int, dtype: str, in_place: bool, size: int,
                   fresh: bool = False) -> "Measurement":
        """The case on nccl-tests; skipped where it cannot run, failed where the binary failed."""
        return self._measured(nodeid, lambda: self.nccl_tests.measure(op, world, dtype, in_place, size, fresh),
                              self.width())

    def copy(self, nodeid: str, op: str, devices: Sequence[str], size: int, fresh: bool = False) -> "Measurement":
        """The copy on nvbandwidth; skipped where it cannot run, failed where the program failed."""
        return self._measured(nodeid, lambda: self.nvbandwidth.measure(op, devices, size, fresh), self.width())

    @staticmethod
    def _measured(nodeid: str, measure: Callable[[], "Measurement"], width: int) -> "Measurement":
        from ..compare.tool_engine import ToolFailed, ToolMissing

        skip: Optional[str] = None
        failure = ""
        try:
            return measure()
        except ToolMissing as e:
            skip = str(e)
        except ToolFailed as e:
            failure = str(e)
        if skip is not None:  # outside the except blocks: no chained traceback
            pytest.skip(skip)
        from ..text import fit

        pytest.fail("\n".join(fit([f"{nodeid}: {failure}"], width)), pytrace=False)

    def runs(self) -> list["ToolRun"]:
        """Every program run of the session, in order."""
        return [*(self._nccl_tests.runs if self._nccl_tests else []),
                *(self._nvbandwidth.runs if self._nvbandwidth else [])]

    def lines(self) -> list[str]:
        """The summary's lines: each program run (its exact command line) and the cost of all of them."""
        runs = self.runs()
        if not runs:
            return []
        from ..compare.tool_engine import cost_lines

        total = sum(r.seconds for r in runs)
        return [*cost_lines(runs), f"gpucomm engine: {len(runs)} program run(s) took {total:.1f} s in all"]

    def close(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- both engines: where the slowdown is ---------------------------------------------------------------
    def counterpart_line(self, record: "Record", records: Sequence["Record"], gate: "Gate") -> Optional[str]:
        """For a REGRESSION of ``record`` with both engines: how the other engine's figure of the same case
        stands against its own baseline (None where it is not known: no counterpart, or no baseline of it)."""
        if self.engines != (TORCH, NCCL_TESTS):
            return None
        from ..compare.tool_engine import counterpart_words, engine_of_test, twin_test_id

        engine, twin_id = engine_of_test(record.nodeid), twin_test_id(record.nodeid)
        if engine is None or twin_id is None:
            return None
        other = NCCL_TESTS if engine == TORCH else TORCH
        twin = self._twin(record.measurement, twin_id, other, records)
        if twin is None:
            return None
        ratio = gate.baseline_ratio(twin_id, twin)
        if ratio is None:
            return None
        return counterpart_words(engine, record.measurement, twin, ratio, self.settings.tolerance)

    def _twin(self, m: "Measurement", twin_id: str, other: str, records: Sequence["Record"]
              ) -> Optional["Measurement"]:
        """The other engine's measurement of the case of ``m``: torch's from the records (its case ran first),
        the other tool's from its run of the session (run now if it has not yet)."""
        if other == TORCH:
            same = [r.measurement for r in records if r.nodeid == twin_id and r.measurement.op == m.op
                    and r.measurement.size_bytes == m.size_bytes]
            return same[-1] if same else None
        from ..compare.tool_engine import ToolFailed, ToolMissing

        size = int(m.info.get("requested_bytes") or m.size_bytes)
        try:
            if m.kind == "collective":
                return self.nccl_tests.measure(m.op, m.world_size, str(m.dtype), bool(m.info.get("in_place")), size)
            return self.nvbandwidth.measure(m.op, m.devices, size)
        except (ToolMissing, ToolFailed):
            return None

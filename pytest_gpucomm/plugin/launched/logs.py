"""Where the ranks of a launched job write: only global rank 0 writes the session's output to the console;
every other rank sends everything it prints -- pytest's output, and what C libraries (NCCL, gloo) write to
file descriptors 1 and 2 -- to its rank log, ``rank-<R>.log``, from the start of the session:

* ``--gpucomm-rank-log=DIR`` (``GPUCOMM_RANK_LOG``, ini ``gpucomm_rank_log``): in DIR, created (a folder
  that cannot be made is a usage error naming it);
* not given: in the job's folder under pytest's temporary root, the same path on every host
  (:func:`default_folder`: ``/tmp/pytest-of-<user>/gpucomm-<launcher>-<job>/``, the job being Slurm's job and
  step, torchrun's run id, or else the rendezvous port); a rank that cannot make it prints to its console;
* ``--gpucomm-rank-log=console``: every rank prints to its own console, as one pytest does.

Rank 0's header says where the others' logs are (:func:`header_lines`); the failures of every rank reach
rank 0's output through the agreement on each test's outcome (:mod:`.agreement`).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from typing import Optional

import pytest

from ...env.launch import Launch

__all__ = ["CONSOLE", "start_logs", "default_folder", "header_lines", "redirect_output", "rank_log"]

#: the value of --gpucomm-rank-log that keeps every rank's output on its console
CONSOLE = "console"
#: the folder of the rank logs of this session ("" where every rank prints to its console)
_FOLDER = pytest.StashKey[str]()
_EXPLICIT = pytest.StashKey[bool]()


def default_folder(launch: Launch) -> str:
    """The job's folder of rank logs without --gpucomm-rank-log: under pytest's temporary root
    (``PYTEST_DEBUG_TEMPROOT`` or the system's), named for the job, alike on every rank."""
    root = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    env = os.environ
    slurm = env.get("SLURM_JOB_ID", "") and ".".join(v for v in (env["SLURM_JOB_ID"], env.get("SLURM_STEP_ID")) if v)
    job = {"slurm": slurm,
           "torchrun": env.get("TORCHELASTIC_RUN_ID", "") if env.get("TORCHELASTIC_RUN_ID") != "none" else "",
           "mpi": env.get("PMIX_NAMESPACE", "")}.get(launch.launcher, "") or str(launch.master_port)
    job = re.sub(r"[^\w.-]", "_", job)
    return os.path.join(root, f"pytest-of-{_user()}", f"gpucomm-{launch.launcher}-{job}")


def _user() -> str:
    """The user's name as pytest's temporary root spells it."""
    try:
        import getpass

        return re.sub(r"[\W]", "_", getpass.getuser())
    except (ImportError, OSError, KeyError):
        return "unknown"


def _make_private(folder: str) -> None:
    """Make the default folder: its parent (``pytest-of-<user>``) private to this user, as pytest keeps it;
    OSError where it is someone else's."""
    parent = os.path.dirname(folder)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    if os.stat(parent).st_uid != os.getuid():
        raise OSError(f"{parent} belongs to another user")
    os.makedirs(folder, exist_ok=True)


def start_logs(config: pytest.Config, launch: Launch, value: Optional[str], where: str, first: bool) -> None:
    """Send this rank's output to its rank log, before anything is printed (``value``: --gpucomm-rank-log,
    given ``where``; ``first``: the first pytest session of this process -- a nested one, as pytester's
    in-process runs, keeps its output unless a folder is given).  Rank 0 checks that a given folder can be
    made."""
    if value is not None and value.strip().lower() == CONSOLE:
        config.stash[_FOLDER] = ""
        return
    explicit = bool(value)
    if not explicit and not first:
        return
    folder = value if value else default_folder(launch)
    config.stash[_FOLDER], config.stash[_EXPLICIT] = folder, explicit
    if launch.is_first:
        if explicit:
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as e:
                raise pytest.UsageError(f"invalid --gpucomm-rank-log {folder!r} (from {where}): cannot "
                                        f"create the folder: {e.strerror or e}") from None
        return
    if not explicit:
        try:
            _make_private(folder)
        except OSError:  # no log here: this rank prints to its console
            config.stash[_FOLDER] = ""
            return
    redirect_output(config, folder, launch.rank, where)


def header_lines(config: pytest.Config, launch: Launch) -> list[str]:
    """Rank 0's header: where the other ranks' output goes."""
    folder = config.stash.get(_FOLDER, "")
    if not folder or launch.world_size < 2:
        return []
    ranks = "rank 1 writes its" if launch.world_size == 2 else f"ranks 1-{launch.world_size - 1} write their"
    where = "" if launch.n_nodes == 1 else ", on each rank's host"
    how = "" if config.stash.get(_EXPLICIT, False) else f" (--gpucomm-rank-log=DIR to choose, ={CONSOLE} to print)"
    return [f"gpucomm rank logs: {ranks} output to {os.path.join(folder, 'rank-<R>.log')}{where}{how}"]


def rank_log(config: pytest.Config, launch: Launch) -> str:
    """The path of this rank's log, or "" where it prints to its console (rank 0, or ``console``)."""
    folder = config.stash.get(_FOLDER, "")
    return os.path.join(folder, f"rank-{launch.rank}.log") if folder and not launch.is_first else ""


def redirect_output(config: pytest.Config, directory: str, rank: int, origin: str) -> str:
    """Send everything this process prints from now on -- pytest's output, and what C libraries (NCCL, gloo)
    write to file descriptors 1 and 2 -- to ``directory/rank-<rank>.log`` (created, truncated); return its
    path.  pytest's output capture keeps its own copies of descriptors 1 and 2 and puts them back after each
    test; they are redirected too.  Raises pytest.UsageError naming the option and the path when the folder
    or the file cannot be made."""
    path = os.path.join(directory, f"rank-{rank}.log")
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        raise pytest.UsageError(f"invalid --gpucomm-rank-log {directory!r} (from {origin}): rank {rank} cannot "
                                f"write its log {path}: {e.strerror or e}") from None
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    capman = config.pluginmanager.getplugin("capturemanager")
    capturing = getattr(capman, "_global_capturing", None)
    saved = [getattr(getattr(capturing, name, None), "targetfd_save", None) for name in ("out", "err")]
    for target in (1, 2, *(s for s in saved if isinstance(s, int))):
        os.dup2(fd, target)
    os.close(fd)
    return path

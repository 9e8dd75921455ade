"""Which launcher started this process, and where it puts this rank: pure functions of the environment.

When pytest is started once per rank -- by ``torchrun``, ``srun`` or ``mpirun`` -- the launcher says so in
environment variables.  :func:`detect` reads them into a :class:`Launch`; :func:`resolve` applies
``--gpucomm-launch`` (``auto`` finds the launcher, ``pool`` ignores it, a launcher's name insists on it).

Read, in this order of precedence (a launcher started inside another one's allocation wins over it):

* **torchrun**: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``, and ``GROUP_RANK`` (the node) where set;
* **Open MPI**: ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``;
* **MPICH / Intel MPI** (Hydra): ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``;
* **srun**: ``SLURM_PROCID``, ``SLURM_NTASKS`` (``SLURM_STEP_NUM_TASKS`` first), ``SLURM_LOCALID``,
  ``SLURM_NTASKS_PER_NODE`` or ``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_NODEID``, and the node list
  ``SLURM_STEP_NODELIST`` / ``SLURM_JOB_NODELIST`` (Slurm's compressed syntax, :func:`expand_hostlist`).

``--gpucomm-launch=auto`` takes Slurm's variables for srun's only in a job step (``SLURM_STEP_ID`` or
``SLURM_STEPID`` set, as srun sets them): in an ``sbatch`` script without ``srun``, ``SLURM_PROCID`` and
``SLURM_NTASKS`` are set too, but pytest is one process, not rank 0 of ``SLURM_NTASKS``.
``--gpucomm-launch=slurm`` reads them without that check.

The rendezvous address is ``MASTER_ADDR``; without it: the first host of Slurm's node list, or the
loopback address when every MPI rank is on one node.  ``MASTER_PORT`` defaults to 29500 (MPI) or to a port
derived from ``SLURM_JOB_ID`` (srun, so that two jobs sharing a node do not collide).

A missing, non-integer or inconsistent value is a :class:`LaunchError` naming the variable and its value.
Imports nothing beyond the standard library.
"""

from __future__ import annotations

import re
import socket
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Optional

__all__ = [
    "LAUNCHERS",
    "LAUNCH_CHOICES",
    "Launch",
    "LaunchError",
    "detect",
    "resolve",
    "expand_hostlist",
    "expand_tasks_per_node",
]

#: the launchers :func:`detect` knows, in order of precedence
LAUNCHERS = ("torchrun", "mpi", "slurm")
#: the values of --gpucomm-launch
LAUNCH_CHOICES = ("auto", "pool") + LAUNCHERS

DEFAULT_MASTER_PORT = 29500
#: srun without MASTER_PORT: SLURM_JOB_ID mod this, plus SLURM_PORT_BASE
SLURM_PORT_SPAN = 10000
SLURM_PORT_BASE = 20000
_LOOPBACK = "127.0.0.1"


class LaunchError(ValueError):
    """A launcher's environment that cannot be used: the message names the variable and its value."""


@dataclass(frozen=True)
class Launch:
    """This process's place in a launched job.

    Attributes:
        launcher: ``"torchrun"``, ``"slurm"`` or ``"mpi"``.
        rank, world_size: the global rank and the number of ranks.
        local_rank, local_world_size: the rank on this node (it selects the GPU) and the ranks of this node.
        node_rank, n_nodes: this node's index and the number of nodes.
        master_addr, master_port: where the rendezvous is served (by global rank 0).
        host: this host's name.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    n_nodes: int
    master_addr: str
    master_port: int
    host: str

    @property
    def is_first(self) -> bool:
        """True on global rank 0, the rank that speaks for the job."""
        return self.rank == 0

    @property
    def loopback(self) -> bool:
        """Whether the rendezvous is on this host's loopback address (every rank on one host)."""
        return self.master_addr in ("localhost", "::1") or self.master_addr.startswith("127.")

    def describe(self) -> str:
        return (f"{self.launcher} rank {self.rank} of {self.world_size} (local rank {self.local_rank} of "
                f"{self.local_world_size}, node {self.node_rank} of {self.n_nodes}) on {self.host}, "
                f"rendezvous {self.master_addr}:{self.master_port}")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# -- Slurm's compressed lists ---------------------------------------------------------------------------

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str, what: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in {what} {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {what} {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in {what} {text!r}")
    parts.append(text[start:])
    return parts


def _expand_bracket(body: str, text: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]``, keeping the zero padding of the lower bound."""
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise ValueError(f"bad range {item!r} in host list {text!r}")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"range {item!r} runs backwards in host list {text!r}")
        width = len(lo)
        out.extend(str(k).zfill(width) for k in range(int(lo), int(hi) + 1))
    return out


def _expand_host(pattern: str, text: str) -> list[str]:
    """One host pattern, with any number of bracket groups: ``rack[1-2]-n[01-02]`` is the product."""
    m = re.search(r"\[([^\]]*)\]", pattern)
    if m is None:
        if not pattern.strip():
            raise ValueError(f"empty host name in host list {text!r}")
        return [pattern.strip()]
    head, tail = pattern[:m.start()], pattern[m.end():]
    rests = _expand_host(tail, text) if tail else [""]
    return [head + v + rest for v in _expand_bracket(m.group(1), text) for rest in rests]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, expanded in order: ``"node[01-03,07]"`` -> node01, node02, node03,
    node07; ``"a1,b[2-3]"`` -> a1, b2, b3.  Raises ValueError on a malformed list."""
    if not text or not text.strip():
        raise ValueError("empty host list")
    hosts: list[str] = []
    for part in _split_top(text.strip(), "host list"):
        hosts.extend(_expand_host(part, text))
    return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's tasks-per-node list, expanded per node: ``"2(x3),1"`` -> [2, 2, 2, 1].  Raises ValueError."""
    out: list[int] = []
    for part in text.split(","):
        m = re.match(r"^\s*(\d+)(?:\(x(\d+)\))?\s*$", part)
        if not m:
            raise ValueError(f"bad tasks-per-node entry {part!r} in {text!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


# -- reading the environment ----------------------------------------------------------------------------

class _Env:
    """Typed reads of launcher variables, each failure naming the variable and its value."""

    def __init__(self, environ: Mapping[str, str], launcher: str) -> None:
        self.environ = environ
        self.launcher = launcher

    def has(self, name: str) -> bool:
        return name in self.environ

    def text(self, *names: str) -> Optional[str]:
        for name in names:
            v = self.environ.get(name, "").strip()
            if v:
                return v
        return None

    def integer(self, *names: str, required: bool = True, minimum: int = 0) -> Optional[int]:
        """The first of ``names`` that is set, as an int >= ``minimum``."""
        for name in names:
            if name in self.environ:
                raw = self.environ[name]
                try:
                    value = int(raw.strip())
                except ValueError:
                    raise LaunchError(f"{self.launcher}: {name}={raw!r} is not a whole number") from None
                if value < minimum:
                    raise LaunchError(f"{self.launcher}: {name}={raw!r} must be at least {minimum}")
                return value
        if required:
            raise LaunchError(f"{self.launcher}: {' or '.join(names)} is not set")
        return None

    def port(self, name: str, default: Optional[int]) -> int:
        value = self.integer(name, required=default is None, minimum=1)
        if value is None:
            assert default is not None
            return default
        if value > 65535:
            raise LaunchError(f"{self.launcher}: {name}={self.environ[name]!r} is not a TCP port (1-65535)")
        return value


def _check(launcher: str, rank: int, world: int, local_rank: int, local_world: int, node_rank: int,
           n_nodes: int, names: tuple[str, str, str, str]) -> None:
    """The consistency every launcher's figures must have; ``names`` are the variables of rank, world,
    local rank and local world size, for the message."""
    r, w, lr, lw = names
    if rank >= world:
        raise LaunchError(f"{launcher}: {r}={rank} is not below {w}={world}")
    if local_rank >= local_world:
        raise LaunchError(f"{launcher}: {lr}={local_rank} is not below {lw}={local_world}")
    if local_world > world:
        raise LaunchError(f"{launcher}: {lw}={local_world} is above {w}={world}")
    if not 0 <= node_rank < n_nodes:
        raise LaunchError(f"{launcher}: node {node_rank} is not below the number of nodes {n_nodes} "
                          f"({w}={world}, {lw}={local_world})")


def _torchrun(env: _Env, host: str) -> Launch:
    rank = env.integer("RANK")
    world = env.integer("WORLD_SIZE", minimum=1)
    local_rank = env.integer("LOCAL_RANK")
    local_world = env.integer("LOCAL_WORLD_SIZE", minimum=1)
    assert rank is not None and world is not None and local_rank is not None and local_world is not None
    addr = env.text("MASTER_ADDR")
    if addr is None:
        raise LaunchError("torchrun: MASTER_ADDR is not set (torchrun sets it; started by hand, set it to the "
                          "host of rank 0)")
    port = env.port("MASTER_PORT", None)
    n_nodes = -(-world // local_world)
    node = env.integer("GROUP_RANK", required=False)
    node_rank = node if node is not None else rank // local_world
    _check("torchrun", rank, world, local_rank, local_world, node_rank, n_nodes,
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    return Launch("torchrun", rank, world, local_rank, local_world, node_rank, n_nodes, addr, port, host)


def _mpi(env: _Env, host: str) -> Launch:
    if env.has("OMPI_COMM_WORLD_RANK") or env.has("OMPI_COMM_WORLD_SIZE"):
        names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE")
    else:
        names = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
    rank = env.integer(names[0])
    world = env.integer(names[1], minimum=1)
    local_rank = env.integer(names[2])
    local_world = env.integer(names[3], minimum=1)
    assert rank is not None and world is not None and local_rank is not None and local_world is not None
    n_nodes = -(-world // local_world)
    node_rank = rank // local_world  # mpirun's default mapping: by slot, a node's ranks in a block
    _check("mpi", rank, world, local_rank, local_world, node_rank, n_nodes, names)
    addr = env.text("MASTER_ADDR")
    if addr is None:
        if local_world != world:
            raise LaunchError(
                f"mpi: MASTER_ADDR is not set and the {world} ranks span {n_nodes} nodes ({names[3]}="
                f"{local_world}): export the host of rank 0 as MASTER_ADDR (mpirun -x MASTER_ADDR=HOST)")
        addr = _LOOPBACK  # every rank on this node
    return Launch("mpi", rank, world, local_rank, local_world, node_rank, n_nodes, addr,
                  env.port("MASTER_PORT", DEFAULT_MASTER_PORT), host)


def _slurm(env: _Env, host: str) -> Launch:
    rank = env.integer("SLURM_PROCID")
    world = env.integer("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", minimum=1)
    local_rank = env.integer("SLURM_LOCALID")
    assert rank is not None and world is not None and local_rank is not None
    nodelist_var = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
                         if env.text(v)), None)
    hosts: list[str] = []
    if nodelist_var is not None:
        try:
            hosts = expand_hostlist(env.environ[nodelist_var])
        except ValueError as e:
            raise LaunchError(f"slurm: {nodelist_var}={env.environ[nodelist_var]!r}: {e}") from None
    n_nodes = env.integer("SLURM_STEP_NUM_NODES", "SLURM_NNODES", required=False, minimum=1) or len(hosts) or None
    node = env.integer("SLURM_NODEID", required=False)
    per_node_var = "SLURM_NTASKS_PER_NODE"
    local_world = env.integer(per_node_var, required=False, minimum=1)
    if local_world is None:
        per_node_var = next((v for v in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if env.text(v)), "")
        if not per_node_var:
            raise LaunchError("slurm: none of SLURM_NTASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE, "
                              "SLURM_TASKS_PER_NODE is set: how many tasks run on this node is unknown")
        try:
            counts = expand_tasks_per_node(env.environ[per_node_var])
        except ValueError as e:
            raise LaunchError(f"slurm: {per_node_var}={env.environ[per_node_var]!r}: {e}") from None
        index = node if node is not None else 0
        if index >= len(counts):
            raise LaunchError(f"slurm: SLURM_NODEID={index} but {per_node_var}={env.environ[per_node_var]!r} "
                              f"names {len(counts)} nodes")
        local_world = counts[index]
        if n_nodes is None:
            n_nodes = len(counts)
    if n_nodes is None:
        n_nodes = -(-world // local_world)
    node_rank = node if node is not None else rank // local_world
    _check("slurm", rank, world, local_rank, local_world, node_rank, n_nodes,
           ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", per_node_var))
    if nodelist_var is not None and len(hosts) != n_nodes:
        raise LaunchError(f"slurm: {nodelist_var}={env.environ[nodelist_var]!r} names {len(hosts)} hosts, "
                          f"but the step has {n_nodes} nodes")
    addr = env.text("MASTER_ADDR")
    if addr is None:
        if not hosts:
            raise LaunchError("slurm: neither MASTER_ADDR nor SLURM_STEP_NODELIST / SLURM_JOB_NODELIST is set: "
                              "the rendezvous host (that of rank 0) is unknown")
        addr = hosts[0]
    job = env.integer("SLURM_JOB_ID", required=False)
    default_port = SLURM_PORT_BASE + job % SLURM_PORT_SPAN if job is not None else DEFAULT_MASTER_PORT
    return Launch("slurm", rank, world, local_rank, local_world, node_rank, n_nodes, addr,
                  env.port("MASTER_PORT", default_port), host)


_READERS: dict[str, Callable[[_Env, str], Launch]] = {"torchrun": _torchrun, "mpi": _mpi, "slurm": _slurm}

#: the variables whose presence says which launcher started the process
_MARKERS = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    "mpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"),
}
#: set by srun for the tasks of a job step (Slurm's env_array_for_step), not in an sbatch or salloc shell,
#: where SLURM_PROCID=0 and SLURM_NTASKS describe the allocation, not this process
SLURM_STEP_MARKERS = ("SLURM_STEP_ID", "SLURM_STEPID")


def _slurm_step(environ: Mapping[str, str]) -> bool:
    return any(environ.get(m, "").strip() for m in SLURM_STEP_MARKERS)


def _found(launcher: str, environ: Mapping[str, str]) -> bool:
    marks = _MARKERS[launcher]
    if launcher == "mpi":
        if any(m in environ for m in marks[:2]):
            return True
        pmi = any(m in environ for m in marks[2:])
        # PMI_RANK/PMI_SIZE without Hydra's MPI_LOCALRANKID inside an srun step: srun's PMI plugin set them
        by_srun = "MPI_LOCALRANKID" not in environ and _slurm_step(environ)
        return pmi and not by_srun
    if launcher == "slurm":  # a task of an srun step, not the batch script of sbatch (see SLURM_STEP_MARKERS)
        return "SLURM_PROCID" in environ and any(m in environ for m in marks[1:]) and _slurm_step(environ)
    return all(m in environ for m in marks)


def detect(environ: Mapping[str, str], host: Optional[str] = None) -> Optional[Launch]:
    """The launcher that started this process, or None when no launcher's variables are set.  Raises
    :class:`LaunchError` when the variables of the launcher found are missing, malformed or inconsistent."""
    for launcher in LAUNCHERS:
        if _found(launcher, environ):
            return _READERS[launcher](_Env(environ, launcher), host or socket.gethostname())
    return None


def resolve(choice: str, environ: Mapping[str, str], host: Optional[str] = None) -> Optional[Launch]:
    """``--gpucomm-launch``: None for the rank pool (``pool``, or ``auto`` without a launcher), else this
    rank's :class:`Launch`.  A named launcher must have its variables set."""
    if choice == "pool":
        return None
    if choice == "auto":
        return detect(environ, host)
    if choice not in _READERS:
        raise LaunchError(f"unknown launcher {choice!r}; known: {', '.join(LAUNCH_CHOICES)}")
    return _READERS[choice](_Env(environ, choice), host or socket.gethostname())

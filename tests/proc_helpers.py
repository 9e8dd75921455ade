"""Helpers shared by the tests that check for leftover processes and listening sockets."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Iterable, Iterator


def _decode_address(hex_addr: str) -> str:
    """An address of /proc/net/tcp{,6} (hex, 32-bit words in host byte order) as text."""
    raw = bytes.fromhex(hex_addr)
    # each 4-byte word is stored little-endian on the usual (little-endian) hosts
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _listening() -> list[tuple[str, int, int]]:
    """(address, port, socket inode) of every TCP socket in LISTEN state."""
    out: list[tuple[str, int, int]] = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":
                addr, port = fields[1].rsplit(":", 1)
                out.append((_decode_address(addr), int(port, 16), int(fields[9])))
    return out


def listening_ports() -> set[int]:
    """Local TCP ports in LISTEN state, from /proc/net/tcp{,6}."""
    return {port for _, port, _ in _listening()}


def listening_sockets(pids: Iterable[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of ``pids`` holds open."""
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:["):-1]))
    return {(addr, port) for addr, port, inode in _listening() if inode in inodes}


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first); None if no process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot; tells a reused pid apart)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def process_running(pid: int, start_time: int | None) -> bool:
    """True while the process ``pid`` started at ``start_time`` exists and is not a zombie.

    A zombie counts as gone unless it is this process's child: it is dead, merely not
    reaped yet by its parent (a killed rank's children are reparented to init or a
    subreaper, which reaps them in its own time). A process with the same pid and another
    start time is a different process.
    """
    fields = _stat_fields(pid)
    if fields is None or (start_time is not None and int(fields[19]) != start_time):
        return False
    if fields[0] in ("Z", "X", "x"):
        return int(fields[1]) == os.getpid()  # a zombie of ours is a child we failed to reap
    return True


def gloo_pool(world: int, zygote: Any = None) -> Iterator[Any]:
    """A started pool of ``world`` gloo ranks on CPU for a module-scoped fixture (``yield from``), its workers forked
    from ``zygote`` (a ranks.spawn.Zygote made with conftest.POOL_ENV), else from a zygote of its own, as the plugin's
    pools are: one import of torch instead of one a rank (about 1.5 CPU-s each on the 2-core CI machine).  Skips off
    Linux, where the pool's worker processes are not supported."""
    import sys

    import pytest
    from conftest import POOL_ENV

    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    from pytest_gpucomm.ranks import RankPool
    from pytest_gpucomm.ranks.spawn import Zygote

    own = zygote is None
    z = Zygote(POOL_ENV, "gloo", start_timeout_s=60) if own else zygote
    try:
        forks = z.forks
        pool = RankPool(world, backend="gloo", device="cpu", env=POOL_ENV, zygote=z)
        try:
            pool.start()
            assert z.failed is None and z.forks == forks + world, z  # forked, not started as processes of their own
            yield pool
        finally:
            pool.close()
    finally:
        if own:
            z.close()


WORKER_MODULE = "pytest_gpucomm.ranks.worker"
ZYGOTE_MODULE = "pytest_gpucomm.ranks.zygote"


def _argv_and_stat(pid: int) -> tuple[list[str], list[str]] | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    fields = _stat_fields(pid)
    return (argv, fields) if fields else None


def rank_processes(controller: int | None = None, zombies: bool = False) -> dict[int, list[str]]:
    """Rank workers (pid -> argv) and zygotes of ``controller`` (any controller where None): a worker started as
    ``python -m pytest_gpucomm.ranks.worker --parent-pid <controller>``, a zygote
    (``python -m pytest_gpucomm.ranks.zygote --parent-pid <controller>``) and every process a zygote forked (its
    command line is the zygote's).  Zombies only when ``zombies``: an unreaped child is a leak too."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        got = _argv_and_stat(int(entry))
        if got is None:
            continue
        argv, fields = got
        if (WORKER_MODULE not in argv and ZYGOTE_MODULE not in argv) or (fields[0] == "Z" and not zombies):
            continue
        try:
            parent = int(argv[argv.index("--parent-pid") + 1])
        except (ValueError, IndexError):
            continue
        if controller is None or parent == controller:
            out[int(entry)] = argv
    return out


def rank_workers(controller: int | None = None) -> dict[int, list[str]]:
    """The rank workers of :func:`rank_processes`, zygotes left out (a zygote's parent is the controller itself;
    a fork's parent is the zygote)."""
    procs = rank_processes(controller)
    out = {}
    for pid, argv in procs.items():
        fields = _stat_fields(pid)
        if ZYGOTE_MODULE in argv and fields is not None and int(fields[1]) not in procs:
            continue  # a zygote: its parent is no zygote
        out[pid] = argv
    return out

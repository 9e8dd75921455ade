"""Rank worker process: joins a torch.distributed process group and runs tasks.

Started by :func:`pytest_gpucomm.ranks.spawn.start_ranks` (for a
:class:`~pytest_gpucomm.ranks.pool.RankPool`) as::

    python -m pytest_gpucomm.ranks.worker --rank R --world-size N ...

with the control-channel authkey (hex) written to its stdin (never on the
command line). It imports only the stdlib, torch and the stdlib-only
:mod:`pytest_gpucomm.ranks.context`, :mod:`pytest_gpucomm.ranks.protocol` and
:mod:`pytest_gpucomm.ranks.reaper` (it is the subreaper of what its tasks start, and ends it before it exits).

Protocol over the control connection (``multiprocessing.connection``): the pickled
dataclasses of :mod:`pytest_gpucomm.ranks.protocol`.

worker -> controller
    ``Hello(rank, pid)`` right after connecting,
    ``Ready(rank)`` once the process group is initialised,
    ``InitError(rank, traceback)`` when that failed (then the worker exits),
    ``TaskOk(task_id, result)`` / ``TaskError(task_id, traceback)`` per task,
    ``Bye(rank)`` on shutdown.
controller -> worker
    ``Task(task_id, "module:function", kwargs, sys_path)``,
    ``Shutdown()``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import faulthandler
import importlib
import os
import signal
import sys
import traceback
from multiprocessing.connection import Client, Connection
from types import ModuleType
from typing import Callable, NoReturn, Optional, TextIO

from pytest_gpucomm.ranks.context import RankContext, load_task
from pytest_gpucomm.ranks.reaper import become_subreaper, end_descendants
from pytest_gpucomm.ranks.protocol import (
    Bye,
    Hello,
    InitError,
    Ready,
    Shutdown,
    Task,
    TaskError,
    TaskOk,
)
from pytest_gpucomm.vocab import RANK_START_TIMEOUT_S

_PR_SET_PDEATHSIG = 1

# Kept at module level so the faulthandler file object stays alive.
_stack_file: Optional[TextIO] = None


def set_parent_death_signal(parent_pid: int) -> None:
    """Ask Linux to SIGKILL us when the controller dies; exit if it already has."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except OSError:  # pragma: no cover - exotic libc
        return
    # The controller may have died before prctl took effect.
    if parent_pid and os.getppid() != parent_pid:
        os._exit(1)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pytest_gpucomm.ranks.worker")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--device", required=True, help="'cpu' or 'cuda'")
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--rendezvous-port", type=int, required=True)
    p.add_argument("--rendezvous-fd", type=int, default=None,
                   help="rank 0: inherited listening socket for the rendezvous store")
    p.add_argument("--stack-file", required=True)
    p.add_argument("--init-timeout", type=float, default=RANK_START_TIMEOUT_S)
    p.add_argument("--parent-pid", type=int, default=0)
    return p.parse_args(argv)


def _serve_store(dist: ModuleType, args: argparse.Namespace, timeout: datetime.timedelta) -> object:
    """Rank 0: the rendezvous TCPStore server, on the inherited loopback socket."""
    if args.rendezvous_fd is not None:
        try:
            return dist.TCPStore(
                "127.0.0.1", args.rendezvous_port, args.world_size, True, timeout,
                wait_for_workers=False, master_listen_fd=args.rendezvous_fd,
            )
        except TypeError:  # older torch without master_listen_fd: bind the port ourselves
            os.close(args.rendezvous_fd)
    return dist.TCPStore(
        "127.0.0.1", args.rendezvous_port, args.world_size, True, timeout,
        wait_for_workers=False,
    )


def _merge_sys_path(controller_path: list[str] | None) -> None:
    """Make the controller's current sys.path entries visible here (pytester dirs)."""
    if not controller_path:
        return
    missing = [p for p in controller_path if p not in sys.path]
    if not missing:
        return
    sys.path[:] = list(controller_path) + [p for p in sys.path if p not in controller_path]
    importlib.invalidate_caches()


def _watch_process(args: argparse.Namespace) -> None:
    """Die with the controller, keep what the tasks start as this process's descendants, leave SIGINT to the
    controller, and write the stacks on a crash (to stderr) and on SIGUSR1
    (to the stack file, where the controller asks a hung rank for them)."""
    global _stack_file
    set_parent_death_signal(args.parent_pid)
    become_subreaper()  # what the tasks start stays in this process's tree, whatever its session (.reaper)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller owns cleanup
    faulthandler.enable(file=sys.stderr, all_threads=True)  # segfaults -> log
    _stack_file = open(args.stack_file, "a", encoding="utf-8")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)


def _init_group(args: argparse.Namespace) -> ModuleType:
    """Join the process group; returns ``torch.distributed``."""
    import torch
    import torch.distributed as dist

    if args.device == "cuda":
        torch.cuda.set_device(args.local_rank)
    timeout = datetime.timedelta(seconds=args.init_timeout)
    # The rendezvous store: rank 0 serves it on the loopback socket the
    # controller bound and handed over (so it listens on 127.0.0.1 only and
    # there is no free-port race); the other ranks connect to it. This is
    # what init_method="tcp://127.0.0.1:<port>" does, minus its bind to
    # every interface.
    if args.rank == 0:
        store = _serve_store(dist, args, timeout)
    else:
        store = dist.TCPStore(
            "127.0.0.1", args.rendezvous_port, args.world_size, False, timeout
        )
    dist.init_process_group(
        backend=args.backend,
        store=store,
        rank=args.rank,
        world_size=args.world_size,
        timeout=timeout,
    )
    del store  # the process group keeps its own reference
    return dist


def _shut_down(conn: Connection, rank: int, dist: ModuleType) -> NoReturn:
    """End what the tasks left running, leave the process group, say goodbye and exit at once."""
    code = 0
    end_descendants()  # before Bye: once the controller has it, nothing of this rank runs but this process
    try:
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report, still leave
        traceback.print_exc()
        code = 1
    try:
        conn.send(Bye(rank=rank))
        conn.close()
    except OSError:
        pass
    # Skip interpreter finalisation (slow with torch loaded, and native
    # threads of comm libraries may not like it); flush what we wrote.
    sys.stdout.flush()
    sys.stderr.flush()
    if _stack_file is not None:
        _stack_file.close()
    os._exit(code)


def _run_task(msg: Task, ctx: RankContext, cache: dict[str, Callable[..., object]]) -> TaskOk | TaskError:
    """Run one task on this rank: its result, or the traceback of what it raised."""
    try:
        _merge_sys_path(msg.sys_path)
        fn = cache.get(msg.spec)
        if fn is None:
            fn = cache[msg.spec] = load_task(msg.spec)
        return TaskOk(task_id=msg.task_id, result=fn(ctx, **(msg.kwargs or {})))
    except BaseException:  # noqa: BLE001 - report everything, incl. SystemExit
        return TaskError(task_id=msg.task_id, traceback=traceback.format_exc())


def _serve(conn: Connection, rank: int, ctx: RankContext, dist: ModuleType) -> NoReturn:
    """The task loop: run each task the controller sends, until it says to shut down or goes away."""
    cache: dict[str, Callable[..., object]] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            # Controller went away without saying goodbye: leave at once, a
            # process-group teardown could block on peers.
            end_descendants()
            os._exit(1)
        if isinstance(msg, Shutdown):
            _shut_down(conn, rank, dist)
        if not isinstance(msg, Task):
            conn.send(TaskError(task_id=None,
                                traceback=f"rank {rank}: unknown message {msg!r}"))
            continue
        reply = _run_task(msg, ctx, cache)
        try:
            conn.send(reply)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            end_descendants()
            os._exit(1)
        except Exception:  # result could not be pickled
            conn.send(TaskError(
                task_id=msg.task_id,
                traceback="the task's return value could not be sent to the controller:\n"
                + traceback.format_exc(),
            ))


def main(argv: list[str] | None = None, authkey: bytes | None = None) -> int:
    """Run the worker loop; returns the process exit status.  ``authkey``: the control channel's key, given by
    the zygote that forked this worker (:mod:`.zygote`); else read from stdin."""
    args = _parse_args(argv)
    _watch_process(args)

    if authkey is None:
        authkey = bytes.fromhex(sys.stdin.readline().strip())
    conn = Client(("127.0.0.1", args.control_port), authkey=authkey)
    conn.send(Hello(rank=args.rank, pid=os.getpid()))

    device = "cpu" if args.device == "cpu" else f"{args.device}:{args.local_rank}"
    try:
        dist = _init_group(args)
    except BaseException:
        tb = traceback.format_exc()
        print(f"rank {args.rank}: process group initialisation failed:\n{tb}",
              file=sys.stderr, flush=True)
        conn.send(InitError(rank=args.rank, traceback=tb))
        conn.close()
        return 1
    conn.send(Ready(rank=args.rank))

    ctx = RankContext(
        rank=args.rank,
        world_size=args.world_size,
        local_rank=args.local_rank,
        backend=args.backend,
        device=device,
    )
    _serve(conn, args.rank, ctx, dist)


if __name__ == "__main__":
    sys.exit(main())

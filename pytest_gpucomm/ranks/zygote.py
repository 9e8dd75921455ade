"""The zygote: one process that has imported torch once and forks the rank workers of a session's pools.

Importing torch costs a rank worker about 1.7 s of CPU, more than everything else a pool's start does; a pool of
4 ranks, a pool restarted after a hang and each of the gate's fresh re-measures (a one-rank pool) pay it again.
:class:`~pytest_gpucomm.ranks.spawn.Zygote` starts this module once (``python -m pytest_gpucomm.ranks.zygote``,
with the workers' environment), and each worker is then a ``fork()`` of it that runs
:func:`pytest_gpucomm.ranks.worker.main` with the argv, authkey and rendezvous socket the controller sends.

What a worker had from ``subprocess.Popen`` it keeps: it leads its own session (so its process group is killed
with it), its stdout and stderr go to its ``rank<N>.log``, it dies with its parent (this process, which dies
with the controller: ``PR_SET_PDEATHSIG`` both), and it stays a zombie until the controller has killed its group
and asks for it to be reaped (``("reap", pid)``), so its pid cannot be reused meanwhile.  The zygote never
initialises CUDA (only the forks do) and runs one thread of Python; it forks from that thread.

Protocol, over a Unix socket (``multiprocessing.connection`` framing), one request and one reply at a time:

``("spawn", argv, env, log_path, authkey, has_fd)``, then the rendezvous socket by ``SCM_RIGHTS`` when ``has_fd``
    -> ``("pid", pid)`` or ``("error", text)``
``("reap", pid)`` -> ``("status", returncode)`` (``Popen.returncode``'s convention; None: not a child)

The zygote says ``("ready", None)`` once its imports are done, or ``("ready", traceback)`` when they failed, and
exits when the controller closes the socket.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

#: modules every worker needs, imported here once (none of them initialises CUDA)
PRELOAD = ("torch", "torch.distributed", "pytest_gpucomm.ops.collectives", "pytest_gpucomm.ops.copies")


def _option(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with the value of ``name`` replaced (or the option added)."""
    out = list(argv)
    if name in out:
        out[out.index(name) + 1] = value
    else:
        out += [name, value]
    return out


def _child(conn: Connection, sock: socket.socket, argv: list[str], env: dict[str, str], log_path: str,
           authkey: bytes) -> None:
    """In the fork: become the worker; never returns."""
    code = 1
    try:
        os.setsid()
        conn.close()  # the controller's end must see EOF when the zygote goes, not when a worker does
        sock.close()
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)  # the zygote's but for the variables a fork sets (spawn._PER_FORK)
        path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = path + [p for p in sys.path if p not in path]
        from pytest_gpucomm.ranks import worker

        code = worker.main(argv, authkey=authkey)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the log is where a worker's failure is read
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _spawn(conn: Connection, sock: socket.socket, request: tuple[Any, ...]) -> tuple[str, Any]:
    _, argv, env, log_path, authkey, has_fd = request
    fd = None
    if has_fd:
        _, fds, _, _ = socket.recv_fds(sock, 1, 1)
        if not fds:
            return ("error", "the rendezvous socket did not arrive")
        fd = fds[0]
        argv = _option(argv, "--rendezvous-fd", str(fd))
    argv = _option(argv, "--parent-pid", str(os.getpid()))
    try:
        pid = os.fork()
    except OSError as e:
        if fd is not None:
            os.close(fd)
        return ("error", f"fork failed: {e}")
    if pid == 0:
        _child(conn, sock, argv, env, log_path, authkey)
    if fd is not None:
        os.close(fd)  # the fork has its own copy
    return ("pid", pid)


def _reap(pid: int) -> tuple[str, object]:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return ("status", None)
    return ("status", os.waitstatus_to_exitcode(status))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_gpucomm.ranks.zygote")
    p.add_argument("--fd", type=int, required=True, help="this end of the controller's Unix socket")
    p.add_argument("--parent-pid", type=int, default=0)
    args = p.parse_args(argv)
    from pytest_gpucomm.ranks.worker import set_parent_death_signal

    set_parent_death_signal(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller owns cleanup
    sock = socket.socket(fileno=args.fd)
    conn = Connection(os.dup(args.fd))
    try:
        import importlib

        for name in PRELOAD:
            importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - reported to the controller, which spawns without the zygote
        conn.send(("ready", traceback.format_exc()))
        return 1
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break  # the controller closed its end (or died): the forks die with this process
        if request[0] == "spawn":
            reply = _spawn(conn, sock, request)
        elif request[0] == "reap":
            reply = _reap(int(request[1]))
        else:
            reply = ("error", f"unknown request {request[0]!r}")
        try:
            conn.send(reply)
        except OSError:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # without the interpreter's finalisation: 0.6 s with torch loaded, for nothing


if __name__ == "__main__":
    sys.exit(main())

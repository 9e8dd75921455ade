"""The ranks of the launched-mode tests' jobs as forks of one zygote that has imported torch once.

Each rank of a job that tests/test_launched.py's ``run_all`` starts (srun's or mpirun's variables set by hand) is a
``python -m pytest`` of its own; as a fresh interpreter it spent about 2 of its 2.5 CPU-s importing torch, numpy,
scipy, jsonschema and pytest: forked, about 0.6 CPU-s, and the slow tier took some 180 CPU-s less on the 2-core
machine (500 -> 320).  This module starts (once per xdist worker, at the first job that can use it) a zygote:
``python tests/launch_zygote.py <fd>``, a process of its own (not a fork of the worker, which runs threads) with the
environment that the job's first rank shares with the worker, that imports those modules once and then forks a
rank per request.  What a rank had from ``subprocess.Popen`` it
keeps: its own session (``setsid``: the jobs' leak check and kill go by its process group), exactly the environment
it is given (``os.environ`` replaced), its working folder, its stdout and stderr on the caller's pipe, ``sys.argv``,
``sys.orig_argv`` and ``sys.path`` as ``python -m pytest`` sets them there, and an interpreter's end: pytest runs
as ``-m`` runs it and the rank leaves through the interpreter's own exit (threads joined, atexit hooks run, streams
flushed), with the exit code it would have had.

What a fork cannot give stays with ``subprocess.Popen`` (:func:`forkable` says no): any other command (torchrun,
``-c`` scripts), a variable read at the interpreter's or a preloaded library's start (``PYTHON*``, locale, thread
pools' sizes) that differs from the zygote's, a ``sitecustomize`` on the rank's path, and a test that asks for a
fresh interpreter (``run_all(..., fork=False)``: one reads its ranks' environment in ``/proc/<pid>/environ``,
which a fork keeps from the zygote).  Where the zygote cannot start or is not single-threaded after its imports,
every rank is a process of its own again, as before.

The zygote imports nothing of pytest_gpucomm and neither the plugins that the ranks' pytest loads by
``PYTEST_PLUGINS`` (pytest would warn that it cannot rewrite their asserts) nor anything that touches CUDA: the
ranks import those themselves, with their own environment.

Protocol, over a Unix ``SOCK_SEQPACKET`` socket pair (one pickled message a packet):

``("spawn", cmd, env, cwd)`` with the rank's stdout (and stdin) by ``SCM_RIGHTS`` -> ``("pid", pid)`` or
``("error", text)``; ``("kill", pid, signal)``: signal the rank's process group while the rank is unreaped.  The
zygote reaps each rank when it ends (a pidfd per rank tells it) and says ``("exit", pid, returncode)``
(``Popen.returncode``'s convention).  It says ``("ready", info)`` once its imports are done and exits when the
caller closes the socket (the worker's session ends: tests/conftest.py's ``pytest_sessionfinish``, else at exit).
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

#: the modules a rank imports that cost most, imported by the zygote once (none of them initialises CUDA)
PRELOAD = ("torch", "torch.distributed", "numpy", "numpy.random", "scipy.stats", "scipy.optimize", "scipy.special",
           "jsonschema", "execnet", "pytest")

#: variables read when an interpreter or a preloaded library starts (its stdio encoding, hash seed, warnings, the
#: thread pools of OpenMP, MKL and OpenBLAS, torch's own settings): a rank whose values differ from the zygote's
#: would start otherwise than a fresh process, so it is one
STARTUP_PREFIXES = ("PYTHON", "LC_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH_", "PYTORCH_", "NUMPY_",
                    "SCIPY_", "LD_")
STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ")

_PACKET = 1 << 20  # a packet's largest size (an environment, pickled, is a few KiB)


def _startup_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k != "PYTHONPATH" and (k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES)}


def _python_path(env: Mapping[str, str], cwd: str) -> list[str]:
    """The entries of ``sys.path`` that PYTHONPATH gives an interpreter started in ``cwd``, as it makes them
    (absolute; an empty entry is the working folder)."""
    raw = env.get("PYTHONPATH")
    return [os.path.normpath(os.path.join(cwd, p)) for p in raw.split(os.pathsep)] if raw else []


# -- the zygote -------------------------------------------------------------------------------------------------

def _preload() -> list[str]:
    """Import :data:`PRELOAD` and the plugins that every pytest run loads; what failed (a rank imports it then)."""
    failed = []
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{name}: {e!r}")
    try:
        from _pytest.config import default_plugins

        for name in default_plugins:  # pytest's own, which it never rewrites
            __import__(f"_pytest.{name}")
    except Exception as e:  # noqa: BLE001
        failed.append(f"pytest's plugins: {e!r}")
    return failed


def _serve(fd: int) -> tuple[Any, ...] | None:
    """The zygote's loop; returns only in a forked rank, with what the rank runs: (cmd, env, cwd, base sys.path)."""
    import selectors

    sock = socket.socket(fileno=fd)
    # sys.path without this script's folder and PYTHONPATH's entries: what a rank's PYTHONPATH is put before
    own = set(_python_path(os.environ, os.getcwd()))
    base = [p for p in sys.path[1:] if p not in own]
    failed = _preload()
    import gc

    gc.freeze()  # the imports' objects: never walked by a rank's collections, never copied by them either
    threads = len(os.listdir("/proc/self/task"))
    sock.send(pickle.dumps(("ready", {"threads": threads, "failed": failed, "pid": os.getpid()})))
    if threads > 1:
        return None  # a fork would copy one thread of several; the caller starts processes of their own
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    ranks: dict[int, int] = {}  # pid -> pidfd, until reaped
    while True:
        for key, _ in sel.select():
            if key.fileobj is not sock:  # a rank ended: reap it, say how
                pid = key.data
                sel.unregister(key.fileobj)
                os.close(ranks.pop(pid))
                _, status = os.waitpid(pid, 0)
                sock.send(pickle.dumps(("exit", pid, os.waitstatus_to_exitcode(status))))
                continue
            data, fds, _, _ = socket.recv_fds(sock, _PACKET, 2)
            if not data:  # the caller is gone
                return None
            request = pickle.loads(data)
            if request[0] == "kill":
                _, pid, signum = request
                if pid in ranks:  # unreaped: the pid (and its group's id) is still this rank's
                    try:
                        os.killpg(pid, signum)
                    except ProcessLookupError:  # not in its own session yet
                        os.kill(pid, signum)
                continue
            _, cmd, env, cwd = request
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as e:
                for f in fds:
                    os.close(f)
                sock.send(pickle.dumps(("error", repr(e))))
                continue
            if pid == 0:
                _become_rank(sock, sel, ranks, fds)
                return cmd, env, cwd, base
            for f in fds:
                os.close(f)
            pidfd = os.pidfd_open(pid)
            ranks[pid] = pidfd
            sel.register(pidfd, selectors.EVENT_READ, pid)
            sock.send(pickle.dumps(("pid", pid)))


def _become_rank(sock: socket.socket, sel: Any, ranks: dict[int, int], fds: list[int]) -> None:
    """In the fork: its own session; the caller's pipe as stdout and stderr (stdin as the caller's); none of the
    zygote's descriptors (as ``Popen(close_fds=True)``)."""
    os.setsid()
    out = fds[0]
    inp = fds[1] if len(fds) > 1 else os.open(os.devnull, os.O_RDONLY)
    os.dup2(inp, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sel.close()
    sock.close()
    for pidfd in ranks.values():
        os.close(pidfd)
    ranks.clear()
    os.closerange(3, int(os.sysconf("SC_OPEN_MAX")))


def _run_rank(cmd: Sequence[str], env: Mapping[str, str], cwd: str, base: list[str]) -> None:
    """Run ``python -m pytest ...`` (``cmd``) in this fork as a fresh interpreter would; its exit (SystemExit) goes
    through the interpreter's own end."""
    import runpy
    import tempfile

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # as site.py leaves it (PYTHONPATH's entries and the rest, without repeats), then -m's working folder before
    sys.path[:] = [os.getcwd(), *dict.fromkeys([*_python_path(env, os.getcwd()), *base])]
    sys.argv = ["-m", *cmd[3:]]  # as -m has it until it finds the module (then the module's file)
    sys.orig_argv = list(cmd)
    tempfile.tempdir = None  # found again from this environment's TMPDIR, were it found already
    if "numpy.random" in sys.modules:  # its global generator: seeded afresh in each process (random does it at fork)
        sys.modules["numpy.random"].seed()
    runpy._run_module_as_main("pytest", alter_argv=True)  # type: ignore[attr-defined]  # what -m runs


def _zygote_main(fd: int) -> None:
    job = _serve(fd)
    if job is None:
        return
    _run_rank(*job)


# -- the caller's side --------------------------------------------------------------------------------------------

class ZygoteGone(RuntimeError):
    """The zygote ended (or never started): its ranks' exit codes cannot be known."""


class Zygote:
    """A zygote started with ``env`` (its startup variables decide which ranks it may fork) and its reader thread,
    which hands replies to the caller and records each rank's exit code."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.startup = _startup_vars(env)
        self.python_path = set(_python_path(env, "/"))  # the zygote's working folder is /
        # the rank's environment but for what names its job (a launcher's variables, a test's marks): those that
        # this process has too, PYTHONPATH and the startup variables
        own = {k: v for k, v in env.items() if os.environ.get(k) == v or k == "PYTHONPATH" or k in self.startup}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
                                         env=own, cwd="/", pass_fds=[theirs.fileno()],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        self.sock = ours
        self.gone = False
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self.replies: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.lock = threading.Lock()  # one request and its reply at a time
        self.reader = threading.Thread(target=self._read, name="launch-zygote-reader", daemon=True)
        self.reader.start()
        try:
            kind, info = self.replies.get(timeout=120)
        except queue.Empty:
            kind, info = "error", "no word from the zygote within 120 s"
        self.info = info
        if kind != "ready" or info.get("threads") != 1:
            self.stop()
            raise ZygoteGone(f"the zygote cannot fork ranks: {kind} {info}")

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_PACKET)
            except OSError:
                data = b""
            if not data:
                with self.changed:
                    self.gone = True
                    self.changed.notify_all()
                self.replies.put(("error", "the zygote ended"))
                return
            message = pickle.loads(data)
            if message[0] == "exit":
                with self.changed:
                    self.codes[message[1]] = message[2]
                    self.changed.notify_all()
            else:
                self.replies.put(message)

    def can_fork(self, env: Mapping[str, str], cwd: Path) -> bool:
        """Whether a rank with ``env`` starts in a fork as it would in a fresh interpreter: the same startup
        variables, and no ``sitecustomize``/``usercustomize`` in a folder that PYTHONPATH adds."""
        if self.gone or _startup_vars(env) != self.startup:
            return False
        extra = [p for p in _python_path(env, str(cwd)) if p not in self.python_path]
        return not any((Path(p) / f"{name}{suffix}").exists() for p in extra
                       for name in ("sitecustomize", "usercustomize") for suffix in (".py", "", ".pyc"))

    def spawn(self, cmd: Sequence[str], env: Mapping[str, str], cwd: Path) -> ForkedRank:
        read_fd, write_fd = os.pipe()
        try:
            fds = [write_fd]
            try:
                os.fstat(0)
                fds.append(0)
            except OSError:  # no stdin here: the rank gets /dev/null
                pass
            with self.lock:
                if self.gone:
                    raise ZygoteGone("the zygote ended")
                socket.send_fds(self.sock, [pickle.dumps(("spawn", list(cmd), dict(env), str(cwd)))], fds)
                try:
                    kind, value = self.replies.get(timeout=60)
                except queue.Empty:
                    kind, value = "error", "no reply from the zygote within 60 s"
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the rank's (and the zygote's, once forked) is the pipe's only write end
        if kind != "pid":
            os.close(read_fd)
            raise ZygoteGone(f"the zygote did not fork the rank: {value}")
        return ForkedRank(self, int(value), read_fd, list(cmd))

    def wait(self, pid: int, timeout: Optional[float]) -> Optional[int]:
        """The rank's exit code once the zygote has reaped it; None if ``timeout`` passed first."""
        with self.changed:
            self.changed.wait_for(lambda: pid in self.codes or self.gone, timeout)
            if pid in self.codes:
                return self.codes[pid]
            if self.gone:
                raise ZygoteGone(f"the zygote ended before rank {pid} did")
            return None

    def kill_group(self, pid: int, signum: int) -> None:
        with self.lock:
            if not self.gone:
                self.sock.send(pickle.dumps(("kill", pid, signum)))
                return
        try:  # no zygote to ask: its rank, orphaned, is still its group's leader
            os.killpg(pid, signum)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Close the socket (the zygote exits at its end) and reap the zygote."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedRank:
    """What ``run_all`` uses of a ``subprocess.Popen(..., stdout=PIPE, stderr=STDOUT, text=True)``, for a rank
    forked by the zygote: ``pid``, ``returncode``, ``poll``, ``wait``, ``communicate``, and :meth:`kill_group`
    for ``os.killpg`` (asked of the zygote, which alone knows that the pid is still the rank's)."""

    def __init__(self, zygote: Zygote, pid: int, out_fd: int, args: list[str]) -> None:
        self.zygote, self.pid, self.args = zygote, pid, args
        self.returncode: Optional[int] = None
        self.chunks: list[bytes] = []
        self.drain = threading.Thread(target=self._drain, args=(out_fd,), name=f"rank-{pid}-output", daemon=True)
        self.drain.start()

    def _drain(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as f:
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    return
                self.chunks.append(chunk)

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, timeout: Optional[float] = None) -> tuple[str, None]:
        """The rank's output once it has ended and its pipe is closed, decoded as ``Popen(text=True)`` does."""
        end = None if timeout is None else time.monotonic() + timeout
        self.drain.join(timeout)
        if self.drain.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout or 0, output=b"".join(self.chunks))
        self.wait(None if end is None else max(0.0, end - time.monotonic()))
        wrapper = io.TextIOWrapper(io.BytesIO())  # Popen's own choice of encoding and errors
        text = b"".join(self.chunks).decode(wrapper.encoding, wrapper.errors or "strict")
        return text.replace("\r\n", "\n").replace("\r", "\n"), None

    def kill_group(self, signum: int) -> None:
        if self.poll() is None:
            self.zygote.kill_group(self.pid, signum)


_zygote: Optional[Zygote] = None
_broken: Optional[str] = None  # why there is no zygote in this process: every rank a process of its own


def forkable(cmd: Sequence[str]) -> bool:
    """``python -m pytest ...`` with this interpreter: what a fork of the zygote can run."""
    return len(cmd) >= 3 and list(cmd[:3]) == [sys.executable, "-m", "pytest"] and sys.platform.startswith("linux") \
        and hasattr(os, "pidfd_open")


def spawn(cmd: Sequence[str], env: Mapping[str, str], cwd: Path) -> Optional[ForkedRank]:
    """The rank ``cmd`` forked by this process's zygote (started with ``env`` if there is none yet), or None where
    it must be a process of its own (:func:`forkable`, :meth:`Zygote.can_fork`, no zygote)."""
    global _zygote, _broken
    if _broken or not forkable(cmd):
        return None
    if _zygote is not None and _zygote.gone:
        _zygote.stop()
        _zygote = None
    if _zygote is None:
        try:
            _zygote = Zygote(env)
        except (OSError, ZygoteGone) as e:
            _broken = str(e)
            return None
        atexit.register(stop)  # once is enough: it ends whichever zygote there is then
    if not _zygote.can_fork(env, cwd):
        return None
    return _zygote.spawn(cmd, env, cwd)


def kill_group(proc: Any, signum: int) -> None:
    """``os.killpg(proc.pid, signum)`` for a process of its own; through the zygote for a forked rank."""
    if isinstance(proc, ForkedRank):
        proc.kill_group(signum)
    else:
        os.killpg(proc.pid, signum)


def stop() -> None:
    """End this process's zygote (tests/conftest.py calls it at the session's end; atexit, should it not)."""
    global _zygote
    if _zygote is not None:
        _zygote.stop()
        _zygote = None


if __name__ == "__main__":
    _zygote_main(int(sys.argv[1]))

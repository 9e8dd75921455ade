"""What the vendor readings (:mod:`.amd`, :mod:`.nvidia`) share: how a source that is missing or fails is
named, a run of library calls where one that fails becomes a note, and a command runner.  Nothing here
raises out of a reading: detection never stops on a management tool.  Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence, TypeVar

__all__ = ["COMMAND_TIMEOUT_S", "MAX_ERROR", "Calls", "Runner", "SourceFailed", "SourceUnavailable", "error_text",
           "run_command", "library_session", "first_answer"]

#: seconds one management command may take: ``amd-smi static`` on 8 GPUs takes a few
COMMAND_TIMEOUT_S = 30.0
#: longest error text kept in ``sources`` and ``notes``
MAX_ERROR = 200

#: a command runner: argv -> (exit status, stdout, stderr); raises FileNotFoundError when the command is missing
Runner = Callable[[Sequence[str]], tuple[int, str, str]]


class SourceUnavailable(Exception):
    """The source is not on this machine (package not installed, command not on PATH): skipped."""


class SourceFailed(Exception):
    """The source is there but could not start (init failed, no GPU, no output): named, and the next is tried."""


def error_text(e: BaseException) -> str:
    """``Type: message`` on one line (some libraries' messages span lines), at most MAX_ERROR long."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."


def run_command(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """Run ``argv``: (exit status, stdout, stderr).  FileNotFoundError when the command is not on PATH; a
    command that runs past ``timeout`` gives status 124 and says so on stderr."""
    if not shutil.which(argv[0]):
        raise FileNotFoundError(f"{argv[0]}: not found on PATH")
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(argv)}: timed out after {timeout:g} s"
    except OSError as e:
        return 126, "", f"{' '.join(argv)}: {e}"
    return out.returncode, out.stdout, out.stderr


_T = TypeVar("_T")


class Calls:
    """Calls one library function after another; a failing one leaves its field out and is noted, except the
    errors that ``quiet`` accepts (a feature the device does not have is no news)."""

    def __init__(self, quiet: Callable[[BaseException], bool] = lambda e: False) -> None:
        self.notes: list[str] = []
        self._quiet = quiet

    def __call__(self, what: str, fn: Callable[..., _T], *args: object) -> Optional[_T]:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - any library error is a note, never fatal
            if not self._quiet(e):
                self.notes.append(f"{what}: {error_text(e)}")
            return None


@contextmanager
def library_session(start: Callable[[], object], stop: Callable[[], object], names: tuple[str, str],
                    call: Calls) -> Iterator[None]:
    """A management library's session: ``start()`` (its failure is SourceFailed naming ``names[0]``), the body,
    and ``stop()`` always at the end, even after a failed start, as the vendors' examples do (its failure is a
    note naming ``names[1]``)."""
    try:
        try:
            start()
        except Exception as e:  # noqa: BLE001
            raise SourceFailed(f"{names[0]}: {error_text(e)}") from None
        yield
    finally:
        try:
            stop()
        except Exception as e:  # noqa: BLE001
            call.notes.append(f"{names[1]}: {error_text(e)}")


def first_answer(readers: Sequence[tuple[str, Callable[[], dict[str, object]]]]
                 ) -> tuple[Optional[str], dict[str, str], Optional[dict[str, object]]]:
    """(the name of the first reader that answered, what became of each, its reading): a reader that raises
    SourceUnavailable is "unavailable", SourceFailed or any other error "failed", both with the reason; the
    readers after the one used are "not tried".  Never raises."""
    sources = {name: "not tried" for name, _ in readers}
    for name, reader in readers:
        try:
            reading = reader()
        except SourceUnavailable as e:
            sources[name] = f"unavailable: {e}"
            continue
        except SourceFailed as e:
            sources[name] = f"failed: {e}"
            continue
        except Exception as e:  # noqa: BLE001 - a source's bug is named, never fatal to detection
            sources[name] = f"failed: {error_text(e)}"
            continue
        sources[name] = "used"
        return name, sources, reading
    return None, sources, None

"""Text that fits a terminal: the width the views render to, and lines wrapped to it.

Every view that prints (the session's summary, ``gpucomm show`` and ``compare``) takes the width as a
parameter; the session gives pytest's own (``COLUMNS``, or the terminal's), the ``gpucomm`` command its own
terminal's (:func:`command_width`), and both :data:`DEFAULT_WIDTH` where it is not known (the output is a
file or a pipe: a CI log, which is read in a browser about that wide).

A line is wrapped at spaces only (:func:`wrap`), and never between a number and its unit (``4 KiB``,
``1.20 GB/s``, ``250 us``): a figure, a path or a test id is never cut, so a single word longer than the width
stays whole on its line.  The continuation lines are indented under the line's
own indentation, four more spaces, so that they read as part of it.  Tables are not wrapped: they are laid
out to fit (``report.table`` for the results; :func:`fit_table` for the ``gpucomm`` command's other tables,
which leave out columns in a stated order and say which).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import Iterable, Optional, Sequence

__all__ = ["DEFAULT_WIDTH", "MIN_WIDTH", "CONTINUATION", "clamp_width", "known_width", "command_width", "wrap",
           "fit", "fit_table"]

#: the width where the terminal's is not known (output to a file or a pipe)
DEFAULT_WIDTH = 120
#: below this the views render as if this wide (a table of sizes and figures needs it)
MIN_WIDTH = 60
#: the extra indentation of a wrapped line's continuation
CONTINUATION = "    "
#: the space between a number and its unit, which a wrap keeps (a figure stays on one line)
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:[KMGT]i?B|B|GB/s|bytes|[mun]?s|ns|us|ms|x)\b)")
#: a character no text holds, standing for that space while the line is wrapped
_KEEP = "\x00"


def clamp_width(width: Optional[int]) -> int:
    """``width``, or :data:`DEFAULT_WIDTH` where None or not positive, at least :data:`MIN_WIDTH`."""
    if width is None or width <= 0:
        return DEFAULT_WIDTH
    return max(MIN_WIDTH, int(width))


def known_width() -> Optional[int]:
    """The width the environment says: ``COLUMNS`` where it is a whole number above 0, else the terminal's
    where standard output is one; None where neither is known."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.__stdout__
    try:
        if stream is not None and stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        pass
    return None


def command_width() -> int:
    """The ``gpucomm`` command's width: its terminal's (``shutil.get_terminal_size``: ``COLUMNS``, else the
    terminal of standard output), :data:`DEFAULT_WIDTH` when unknown."""
    return clamp_width(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def wrap(line: str, width: int, indent: Optional[str] = None) -> list[str]:
    """``line`` wrapped at spaces to ``width`` (see the module doc); ``indent``: the continuation's
    indentation (default: the line's own and :data:`CONTINUATION`).  A line that fits comes back as it is."""
    if len(line) <= width:
        return [line]
    own = line[:len(line) - len(line.lstrip(" "))]
    rest = own + CONTINUATION if indent is None else indent
    kept = _UNIT_SPACE.sub(_KEEP, line.lstrip(" "))
    out = textwrap.wrap(kept, width, initial_indent=own, subsequent_indent=rest, break_long_words=False,
                        break_on_hyphens=False)
    return [x.replace(_KEEP, " ") for x in out] or [line]


def fit(lines: Iterable[str], width: int) -> list[str]:
    """Each of ``lines`` (a line holding newlines is several) wrapped to ``width`` (:func:`wrap`)."""
    out: list[str] = []
    for line in lines:
        for part in str(line).split("\n"):
            out += wrap(part.rstrip(), width)
    return out


def fit_table(rows: Sequence[Sequence[object]], headers: Sequence[str], width: int,
              leave_out: Sequence[str] = ()) -> list[str]:
    """tabulate's ``simple`` table of ``rows`` under ``headers``, at most ``width`` wide where it can be: the
    columns named in ``leave_out`` are dropped until it fits -- first those with nothing in them (every cell
    empty or "-"), then the others in that order -- and a line below the table says which (a table still too
    wide with all of them gone is printed as it is: its cells are never cut)."""
    from tabulate import tabulate

    kept = list(range(len(headers)))
    dropped: list[str] = []

    def blank(name: str) -> bool:
        i = list(headers).index(name)
        return all(str(row[i]).strip() in ("", "-") for row in rows)

    leave_out = [n for n in leave_out if blank(n)] + [n for n in leave_out if not blank(n)]

    def render() -> list[str]:
        return tabulate([[row[i] for i in kept] for row in rows], headers=[headers[i] for i in kept],
                        tablefmt="simple", disable_numparse=True).splitlines()

    lines = render()
    for name in leave_out:
        if max(map(len, lines), default=0) <= width:
            break
        kept.remove(list(headers).index(name))
        dropped.append(name)
        lines = render()
    if dropped:
        lines += wrap(f"(left out at {width} columns: {', '.join(dropped)}; a wider terminal (COLUMNS) shows them)",
                      width)
    return lines

"""The JSON of a file's bytes, with one wording for what is wrong with it: a report, a baseline file, or
whatever else pytest-gpucomm reads back.

A user who opens a broken file wants the file and the place named, and a file that a crash, a full disk or
a copy cut off said to be cut short rather than "Expecting value" (json's words for the end of the text).
The caller reads the bytes (each reader has its own rules for what may be read: a size limit, no FIFO) and
names the error class its callers catch.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Callable, Iterable, Optional, Union

__all__ = ["JsonKey", "parse_json_bytes", "json_path", "first_non_finite"]

#: a step of a JSON path: an object's key or an array's index
JsonKey = Union[str, int]


def parse_json_bytes(raw: bytes, path: "str | os.PathLike[str]", what: str, error: Callable[[str], Exception],
                     too_deep: Optional[Callable[[], Exception]] = None) -> object:
    """The parsed JSON of ``raw``, the bytes of ``path``; ``error(message)`` is raised, the message naming
    ``path``, where the bytes are not UTF-8, hold nothing, end before the JSON does ("cut short
    (truncated)"), are not JSON (the line and column), or hold what Python's json cannot (a number of more
    digits than it converts, nesting deeper than its stack: ``too_deep()`` where given, for a reader with a
    nesting limit of its own).  ``what`` names the file's role ("report", "baseline file")."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not a UTF-8 text file (byte {e.start}): not a {what}") from None
    if not text.strip():
        raise error(f"{path}: the file is empty (truncated?): not a {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg.startswith("Unterminated string"):  # a string that runs to the end of the file
            raise error(f"{path}: the file is cut short (truncated): the string that starts at line {e.lineno} "
                        f"column {e.colno} never ends") from None
        if e.pos >= len(text.rstrip()):
            raise error(f"{path}: the file is cut short (truncated): the JSON ends unexpectedly at line {e.lineno} "
                        f"column {e.colno} ({e.msg})") from None
        raise error(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise (too_deep() if too_deep is not None
               else error(f"{path}: invalid JSON: nested deeper than Python's json can read")) from None
    except (ValueError, MemoryError) as e:  # e.g. an integer of more digits than Python converts
        raise error(f"{path}: invalid JSON: {e}") from None


def json_path(parts: Iterable[JsonKey]) -> str:
    """The JSON path of the keys and indexes ``parts``: ``$.rows[3].samples_s[0]``, ``$.cases["a|b"]``."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", p)
                                                    else f"[{json.dumps(p)}]")
    return out


def first_non_finite(doc: object, skip: Iterable[str] = ()) -> Optional[tuple[str, float]]:
    """The JSON path and value of a NaN or an infinity in ``doc`` (Python's json reads them, but they are not
    JSON), None where there is none; the values of object keys in ``skip`` are not looked at."""
    left_out = set(skip)
    stack: list[tuple[object, list[JsonKey]]] = [(doc, [])]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return json_path(where), value
        if isinstance(value, dict):
            stack.extend((v, [*where, k]) for k, v in value.items() if k not in left_out)
        elif isinstance(value, list):
            stack.extend((v, [*where, i]) for i, v in enumerate(value))
    return None

"""Byte sizes and bandwidth units.

The one convention, used everywhere in pytest-gpucomm:

* ``KB``, ``MB``, ``GB``, ``TB`` are decimal (SI): powers of 1000.
* ``KiB``, ``MiB``, ``GiB``, ``TiB`` are binary (IEC): powers of 1024.
* A bare letter ``K``, ``M``, ``G``, ``T`` is binary too, as in nccl-tests (``-b 16M`` is 16 MiB).
* A plain number (``"512"``, ``512``) or a ``B`` suffix is a count of bytes.
* Bandwidth is in GB/s with GB = 1e9 bytes, as nccl-tests, nvbandwidth and the vendors report it.

Unit names are case-insensitive ("16mb" == "16MB"); fractions are allowed where they give a whole number
of bytes ("1.5MB" = 1,500,000 bytes, "1.5KiB" = 1,536 bytes).  Tables and messages always show the exact
byte count next to the human form.
"""

from __future__ import annotations

import math
import re
from typing import Optional, Union

__all__ = ["describe_duration", "describe_us", "SizeError", "MAX_SIZE", "parse_size", "format_size", "describe_size",
           "is_exact_size_text", "size_token", "gbps", "GB", "plural"]

GB = 1e9
#: the largest size accepted anywhere: 1 TiB, more than any device's memory
MAX_SIZE = 1 << 40

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")

SizeLike = Union[str, int]


class SizeError(ValueError):
    """A size string that cannot be read; the message names the value and where it came from."""


def parse_size(value: SizeLike, where: str = "") -> int:
    """Return the number of bytes that ``value`` stands for.

    ``where`` names the origin of the value (a test id and marker keyword, an option) and is put into
    the error message, so a user knows which line to fix.
    """
    origin = f" (from {where})" if where else ""
    if isinstance(value, bool):
        raise SizeError(f"invalid size {value!r}{origin}: expected a byte count or a string like '16MB'")
    if isinstance(value, int):
        if value <= 0:
            raise SizeError(f"invalid size {value!r}{origin}: a size must be a positive number of bytes")
        return _at_most_max(value, value, origin)
    if isinstance(value, float):
        if not math.isfinite(value) or value <= 0 or value != int(value):
            raise SizeError(f"invalid size {value!r}{origin}: a size must be a positive whole number of bytes")
        return _at_most_max(value, int(value), origin)
    if not isinstance(value, str):
        raise SizeError(
            f"invalid size {value!r}{origin}: expected a byte count or a string like '16MB', "
            f"got {type(value).__name__}"
        )
    m = _SIZE_RE.match(value)
    if not m:
        raise SizeError(
            f"invalid size {value!r}{origin}: expected a number with an optional unit "
            f"(B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB or K, M, G, T = powers of 1024)"
        )
    number, unit = m.group(1), m.group(2).lower()
    if unit not in _UNITS:
        raise SizeError(
            f"invalid size {value!r}{origin}: unknown unit {m.group(2)!r} "
            f"(known: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G, T)"
        )
    amount = float(number) * _UNITS[unit]
    if not math.isfinite(amount) or amount <= 0:
        raise SizeError(f"invalid size {value!r}{origin}: a size must be a positive number of bytes")
    rounded = round(amount)
    if rounded < 1:
        raise SizeError(f"invalid size {value!r}{origin}: {amount:g} bytes is less than one byte")
    if abs(amount - rounded) > 1e-6 * max(1.0, amount):
        raise SizeError(f"invalid size {value!r}{origin}: {amount:g} is not a whole number of bytes")
    return _at_most_max(value, int(rounded), origin)


def _at_most_max(value: SizeLike, nbytes: int, origin: str) -> int:
    if nbytes > MAX_SIZE:
        raise SizeError(f"invalid size {value!r}{origin}: {nbytes:,} bytes is above the largest size, 1 TiB "
                        f"({MAX_SIZE:,} bytes)")
    return nbytes


def describe_duration(seconds: float, fixed: bool = False) -> str:
    """A duration for a human: 1.20 s, 20.1 ms, 153 us (three significant digits); ``fixed``: one decimal
    in ms and us (20.0 ms, 153.2 us), for figures set side by side."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms" if fixed else f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.1f} us" if fixed else f"{seconds * 1e6:.3g} us"


def describe_us(x: Optional[float]) -> str:
    """A time in microseconds, as the gate's messages give it: 8.12 us, 41.2 us, 1.24 ms, 1.50 s; "n/a" for None."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x >= 1e6:
        return f"{x / 1e6:.2f} s"
    if x >= 1e3:
        return f"{x / 1e3:.2f} ms"
    return f"{x:.2f} us" if x < 10 else f"{x:.1f} us"


def format_size(nbytes: int) -> str:
    """Short human form of a byte count: exact where possible (``16 MiB``, ``16 MB``, ``1.5 KiB``),
    binary preferred on a tie, else decimal to four significant digits (always shown with the exact
    byte count where it matters: :func:`describe_size`)."""
    return _format_size(nbytes)[0]


def _format_size(nbytes: int) -> tuple[str, bool]:
    """(:func:`format_size`'s text, whether it is exact)."""
    if nbytes < 1000:
        return f"{nbytes} B", True
    exact: list[str] = []
    approx = ""
    for units, base in ((("KiB", "MiB", "GiB", "TiB"), 1024), (("KB", "MB", "GB", "TB"), 1000)):
        for power, unit in enumerate(units, start=1):
            factor = base**power
            if nbytes < factor:
                break
            text = f"{nbytes / factor:.4g} {unit}"
            if "e" in text:
                continue
            if _is_exact(text, nbytes):
                exact.append(text)
            elif base == 1000:
                approx = text
    if exact:
        return min(exact, key=len), True  # stable: binary first on a tie
    return (approx, False) if approx else (f"{nbytes} B", True)


def _is_exact(text: str, nbytes: int) -> bool:
    """Whether the short form ``text`` reads back as exactly ``nbytes`` (a rounded one may not be whole)."""
    try:
        return parse_size(text.replace(" ", "")) == nbytes
    except SizeError:
        return False


def is_exact_size_text(nbytes: int) -> bool:
    """Whether :func:`format_size` gives an exact form of ``nbytes`` (else it is rounded)."""
    return _format_size(nbytes)[1]


def size_token(nbytes: int) -> str:
    """A size without spaces that reads back exactly: ``4KiB``, ``1.5MB``, ``512B``, or the byte count
    (``12345B``) where no short form is exact."""
    text, exact = _format_size(nbytes)
    return text.replace(" ", "") if exact else f"{nbytes}B"


def describe_size(nbytes: int) -> str:
    """``16 MiB (16,777,216 bytes)``: the form used in messages."""
    return f"{format_size(nbytes)} ({nbytes:,} bytes)"


def format_gbps(x: float) -> str:
    """A bandwidth figure with its significant digits at any scale: 329.4, 12.35, 0.0123 (three at the
    least; ``.2f`` printed a copy of 4 MB/s as ``0.00``)."""
    if x >= 100:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def format_ratio(x: float, places: int = 3) -> str:
    """A ratio with ``places`` decimals (``0.342``), and two significant digits where those would show none
    of them (``0.00012``, not ``0.000``)."""
    if x >= 10.0 ** (1 - places):
        return f"{x:.{places}f}"
    return f"{x:.2g}"


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1 GB = 1e9 bytes)."""
    if seconds <= 0:
        return math.inf
    return nbytes / seconds / GB


def plural(n: int, word: str) -> str:
    """``1 run``, ``3 runs``: a count and its noun."""
    return f"{n} {word}{'' if n == 1 else 's'}"

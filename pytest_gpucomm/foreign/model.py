"""What another tool's file is read into: :class:`ForeignRun` (one file) of :class:`ForeignCase` (one figure),
and the error every problem of such a file is (:class:`ForeignError`), with the checks of one field that the
readers share (each names the file and the field: ``all_reduce.json: results[3].out_of_place.time: ...``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NoReturn

from ..measurement import Measurement

__all__ = ["ForeignError", "ForeignCase", "ForeignRun", "Field"]


class ForeignError(ValueError):
    """A file of another tool that cannot be taken as evidence; the message names the file and the field."""


@dataclass(frozen=True)
class ForeignCase:
    """One figure of another tool: ``test_id`` is the tool's own (``nccl-tests::all_reduce_perf[float-sum-
    1KiB-out-of-place]``, ``nvbandwidth::host_to_device_memcpy_ce[512MiB-cuda:0]``), never one of ours."""

    test_id: str
    measurement: Measurement


@dataclass(frozen=True)
class ForeignRun:
    """One file of another tool, read: ``tool`` ("nccl-tests", "rccl-tests" or "nvbandwidth"), ``version``
    (the tool's: "v0.8"; nccl-tests' JSON holds only its format, "JSON format 3", unless the caller knew the
    version the binary printed), ``path`` as given, ``cases``, ``env`` (the run's fingerprint: never the file's
    whole environment), ``per_iteration`` (True: the samples are per-iteration times, ``-I 1``; False: one
    summary figure per case), ``date`` (the file's ``start_time``, else ""), and ``notes`` (what was left out
    of the file, and why)."""

    tool: str
    version: str
    path: str
    cases: tuple[ForeignCase, ...]
    env: Mapping[str, Any]
    per_iteration: bool
    date: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def source(self) -> str:
        """The tool and its version in words: ``nvbandwidth v0.8``."""
        return f"{self.tool} {self.version}"


@dataclass(frozen=True)
class Field:
    """The file and a field's path in it, for the messages: ``Field("a.json").at("results", 3).at("time")``."""

    file: str
    path: str = ""

    def at(self, *parts: object) -> "Field":
        text = self.path
        for p in parts:
            text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
        return Field(self.file, text)

    def fail(self, what: str) -> NoReturn:
        raise ForeignError(f"{self.file}: {self.path or 'the document'}: {what}")

    def get(self, doc: Mapping[str, Any], key: str) -> Any:
        """``doc[key]``, or ForeignError naming the field as missing."""
        if key not in doc:
            self.at(key).fail("missing (a required field)")
        return doc[key]

    def mapping(self, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(f"a {kind(value)}, not a JSON object")
        return value

    def list(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            self.fail(f"a {kind(value)}, not a list")
        return value

    def text(self, value: Any) -> str:
        if not isinstance(value, str):
            self.fail(f"a {kind(value)}, not a string")
        return value

    def whole(self, value: Any) -> int:
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))):
            self.fail(f"{short(value)} is not a whole number")
        return int(value)

    def positive(self, value: Any, unit: str) -> float:
        """A positive finite number (a time, a bandwidth): a NaN, an infinity, zero, a negative, a string or
        a boolean is refused with what it is."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"{short(value)} is not a number of {unit}")
        if not math.isfinite(value) or value <= 0:
            self.fail(f"{value!r} {unit} is not a positive finite figure")
        return float(value)


def kind(value: Any) -> str:
    """A JSON value's type in words."""
    return {dict: "JSON object", list: "list", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def short(value: Any, limit: int = 60) -> str:
    """``value`` as Python writes it (markup and control characters escaped), cut at ``limit`` characters."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."

"""The range of every setting, checked in one place: the plugin's options, the markers, the decision and
``gpucomm compare`` all call these, so that a value one of them refuses is refused by all of them, and early
(at the start of the session, at collection, before a command reads a file).

Each check returns the value, parsed and in its range, or raises :class:`CheckError`, whose message names
the value and where it came from (an :class:`Origin`).  The callers turn it into their own kind of error: a
usage error of the session, a marker's collection error naming the test, the command's exit status 2.

Standard library only, like ``vocab``: the worker processes and the gpucomm command read it too.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from .vocab import (DEFAULT_ALPHA, DEFAULT_FOLDS, DEFAULT_MAX_RUNS, DEFAULT_TAIL_TOLERANCE, DEFAULT_TOLERANCE,
                    MAX_BASELINE_RUNS, MAX_CAUSE_CASES, MAX_FOLDS, MAX_TAIL_TOLERANCE)

__all__ = ["CheckError", "Origin", "tolerance", "tail_tolerance", "alpha", "min_judged", "baseline_runs", "folds",
           "cause_cases", "seconds", "number", "percentile", "Judging", "FLAG_ON", "FLAG_OFF", "FLAG_WORDS",
           "environment", "not_empty", "flag", "env_text", "env_flag"]


class CheckError(ValueError):
    """A value outside its range (or not a value of its kind); the message names the value and its origin."""


@dataclass(frozen=True)
class Origin:
    """Where a value came from, as its error message names it.  ``text``: the value is the text of an
    option, an environment variable or an ini key (parsed here); else a Python value (a marker's argument, a
    keyword of the decision, a number the command line already parsed), which must be a number itself."""

    name: str
    raw: object
    source: Optional[str] = None  # an option's: "the command line", "the GPUCOMM_... environment variable", ...
    test: Optional[str] = None  # a marker's: the test's node id
    mark: Optional[str] = None  # a marker's name
    text: bool = False

    @classmethod
    def option(cls, name: str, raw: str, source: str) -> "Origin":
        """An option's text (``--gpu-tolerance``) from the command line, the environment or the ini file."""
        return cls(name, raw, source=source, text=True)

    @classmethod
    def argument(cls, name: str, value: object) -> "Origin":
        """A number a command's own option gave (``gpucomm compare --tolerance``)."""
        return cls(name, value)

    @classmethod
    def marker(cls, test: str, mark: str, key: str, value: object) -> "Origin":
        """A marker's keyword argument (``@bandwidth(tolerance=...)`` on the test ``test``)."""
        return cls(key, value, test=test, mark=mark)

    @classmethod
    def keyword(cls, name: str, value: object) -> "Origin":
        """A keyword argument of a function of the package (the decision's ``tolerance=``)."""
        return cls(name, value)

    def error(self, expected: str) -> CheckError:
        """The error saying that the value is not ``expected`` ("a fraction in (0, 1), e.g. 0.05")."""
        if self.test is not None:
            return CheckError(f"{self.test}: @{self.mark}({self.name}={self.raw!r}): {self.name} must be {expected}")
        if self.source is not None:
            return CheckError(f"invalid {self.name} {self.raw!r} (from {self.source}): expected {expected}")
        if self.name.startswith("-"):
            return CheckError(f"invalid {self.name} {self.raw!r}: expected {expected}")
        return CheckError(f"{self.name} must be {expected}, got {self.raw!r}")


def _float(where: Origin) -> float:
    """The value as a float: parsed from an option's text (nan where it is no number, so that the range
    refuses it), else a number itself (a bool or a string is refused, saying what it is)."""
    v = where.raw
    if where.text:
        try:
            return float(str(v))
        except ValueError:
            return math.nan
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise where.error(f"a number, got {type(v).__name__}")
    return float(v)


def _whole(where: Origin) -> Optional[int]:
    """The value as a whole number, or None where it is none."""
    v = where.raw
    if where.text:
        try:
            return int(str(v))
        except ValueError:
            return None
    return None if isinstance(v, bool) or not isinstance(v, numbers.Integral) else int(v)


def _in(where: Origin, low: float, high: float, expected: str, *, low_open: bool = False,
        high_open: bool = False) -> float:
    """The value as a finite float within low..high (each end excluded where it is open)."""
    x = _float(where)
    if not math.isfinite(x) or x < low or x > high or (low_open and x == low) or (high_open and x == high):
        raise where.error(expected)
    return x


def tolerance(where: Origin) -> float:
    """The baseline tolerance: a slowdown below this fraction is never a regression; 0 would make every
    slowdown one (the decision's bound needs a margin), 1 a total loss acceptable."""
    return _in(where, 0.0, 1.0, "a fraction in (0, 1), e.g. 0.05", low_open=True, high_open=True)


def tail_tolerance(where: Origin) -> float:
    """The tail verdict's tolerance: the share of slow single ops may be the baseline's x (1 + this); at
    MAX_TAIL_TOLERANCE the share allowed is every op."""
    return _in(where, 0.0, MAX_TAIL_TOLERANCE,
               f"a number from 0 to below {MAX_TAIL_TOLERANCE:g} (the share of single ops allowed above the "
               f"baseline's scaled p99 is the baseline's own share, about 1%, x (1 + tolerance); default "
               f"{DEFAULT_TAIL_TOLERANCE:g})", high_open=True)


def alpha(where: Origin) -> float:
    """The session's false-alarm level."""
    return _in(where, 0.0, 1.0, "a number above 0 and below 1, e.g. 0.01", low_open=True, high_open=True)


def min_judged(where: Origin) -> float:
    """The share of the cases against a baseline that must be judged for the session to pass."""
    return _in(where, 0.0, 1.0, "a share of the cases from 0 to 1, e.g. 0.5")


def _count(where: Origin, low: int, high: int, expected: str) -> int:
    k = _whole(where)
    if k is None or not low <= k <= high:
        raise where.error(expected)
    return k


def baseline_runs(where: Origin) -> int:
    """The runs kept per case in a baseline file."""
    return _count(where, 1, MAX_BASELINE_RUNS, f"a whole number from 1 to {MAX_BASELINE_RUNS}")


def folds(where: Origin) -> int:
    """The runs of a small collective before its verdict."""
    return _count(where, 1, MAX_FOLDS, f"a whole number from 1 (no folds) to {MAX_FOLDS}")


def cause_cases(where: Origin) -> int:
    """The failing cases of a session whose cause is looked for."""
    return _count(where, 0, MAX_CAUSE_CASES,
                  f"a whole number of cases from 0 (no cause test) to {MAX_CAUSE_CASES}")


def seconds(where: Origin, maximum: float, *, allow_zero: bool = True) -> float:
    """A number of seconds, at least 0 (above 0 without ``allow_zero``) and at most ``maximum``."""
    return _in(where, 0.0, maximum, f"a {'non-negative' if allow_zero else 'positive'} number of seconds, at most "
               f"{maximum:g}", low_open=not allow_zero)


def number(where: Origin, *, positive: bool = False) -> float:
    """A finite number, at least 0 (above 0 with ``positive``): a marker's threshold."""
    return _in(where, 0.0, math.inf, f"a {'positive' if positive else 'non-negative'} finite number",
               low_open=positive)


def percentile(where: Origin) -> float:
    """A percentile of the latencies, 0 to 100."""
    return _in(where, 0.0, 100.0, "within 0..100")


# -- the text of a setting: one rule for an empty value, one reading of yes and no -----------------------

#: the words of a yes/no setting (any case, spaces around ignored): an option, an environment variable, an ini key
FLAG_ON = ("1", "true", "yes", "on")
FLAG_OFF = ("0", "false", "no", "off")
FLAG_WORDS = "1/0, true/false, yes/no or on/off"


def environment(name: str) -> str:
    """Where a value of the environment variable ``name`` came from, as an :class:`Origin`'s source says it."""
    return f"the {name} environment variable"


def not_empty(where: Origin) -> str:
    """The text of a setting, which must not be empty: an empty value (``--gpu-baseline=``, ``GPUCOMM_JSON=``,
    an ini key left empty, spaces only) is an error, never "unset" or "off", for every option, environment
    variable and ini key of pytest-gpucomm -- a CI variable that expanded to nothing must not silently turn
    the gate or a report off.  Returns the text."""
    text = str(where.raw)
    if text.strip():
        return text
    env = where.source == environment(where.name)
    leave = f"unset {where.name}" if env else "leave the option out"
    raise CheckError(f"invalid {where.name} {where.raw!r} (from {where.source}): the value is empty; give one, or "
                     f"{leave} for its default")


def flag(where: Origin) -> bool:
    """A yes/no setting's text: 1/0, true/false, yes/no, on/off in any case; anything else, the empty text
    included (:func:`not_empty`), is refused naming the value and where it came from."""
    word = not_empty(where).strip().lower()
    if word in FLAG_ON:
        return True
    if word in FLAG_OFF:
        return False
    raise where.error(f"{FLAG_WORDS} (any case)")


def env_text(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The value of the environment variable ``name``, None where it is unset; CheckError where it is set
    but empty (:func:`not_empty`)."""
    env = os.environ if environ is None else environ
    if name not in env:
        return None
    return not_empty(Origin.option(name, env[name], environment(name)))


def env_flag(name: str, default: bool, environ: Optional[Mapping[str, str]] = None) -> bool:
    """The yes/no environment variable ``name`` (:func:`flag`), ``default`` where it is unset; CheckError
    naming the value where it is neither yes nor no (``GPUCOMM_SUPERVISE=maybe``) or empty."""
    env = os.environ if environ is None else environ
    if name not in env:
        return default
    return flag(Origin.option(name, env[name], environment(name)))


@dataclass(frozen=True, kw_only=True)
class Judging:
    """The values the gate judges with, defined once: the plugin's settings (``plugin.settings.Settings``,
    each value checked above as it is read) and the gate's own (``gate.GateSettings``) are both made of
    them, so that a value the options add reaches the gate without a list of fields copied between them."""

    tolerance: float = DEFAULT_TOLERANCE
    alpha: float = DEFAULT_ALPHA
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE
    strict: bool = False  # --gpu-baseline-strict: NEW and NOT GATED fail
    folds: int = DEFAULT_FOLDS  # the runs of a case of levels.FOLDED_CLASSES before its verdict
    max_runs: int = DEFAULT_MAX_RUNS  # --gpu-baseline-runs: runs kept per case when saving

    def judging(self) -> dict[str, Any]:
        """These values alone, as keyword arguments (of another ``Judging``, such as ``GateSettings``)."""
        return {f.name: getattr(self, f.name) for f in fields(Judging)}

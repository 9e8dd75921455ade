"""The option values of the ``gpucomm`` group, parsed from their text (:mod:`.settings` finds the text and
its origin: command line > environment > ini).

Each parser takes the text, the option's name and its origin and returns the typed value, or raises
``pytest.UsageError`` naming the bad value and where it came from ("invalid --gpucomm-min-time 'abc' (from the
command line)").  The yes/no variables (``GPUCOMM_ALLOW_XDIST``, ``GPUCOMM_LOCK``: :func:`env_flag`) and
``GPUCOMM_CPU_DEVICES`` (:func:`check_cpu_devices`) are checked here too, each error naming its variable.
"""

from __future__ import annotations

from typing import Callable, Optional, TypeVar

import pytest

from .. import checks, units
from ..checks import CheckError, Origin
from ..vocab import (
    DTYPE_ALIASES,
    DTYPES,
    ENGINE_CHOICES,
    MAX_TIMEOUT_S,
    NODE_MODES,
    PAIR_CHOICES,
)

__all__ = ["parse_seconds", "checked", "one_of", "parse_device", "parse_size_option", "parse_dtypes",
           "parse_launch", "parse_pairs", "parse_plots_format", "parse_env_names", "parse_engine",
           "parse_copy_engine", "parse_baseline_nodes", "parse_prior", "env_flag", "check_cpu_devices"]

T = TypeVar("T")


def parse_seconds(value: str, name: str, origin: str, allow_zero: bool = True,
                  maximum: float = MAX_TIMEOUT_S) -> float:
    """A number of seconds, at least 0 (above 0 without ``allow_zero``) and at most ``maximum``."""
    return checks.seconds(Origin.option(name, value, origin), maximum, allow_zero=allow_zero)


def checked(check: Callable[[Origin], T]) -> Callable[[str, str, str], T]:
    """An option's parser that runs the value's range check (``checks``)."""
    return lambda value, name, origin: check(Origin.option(name, value, origin))


def one_of(value: str, name: str, origin: str, choices: "tuple[str, ...]", sep: str) -> str:
    if value.strip().lower() not in choices:
        raise pytest.UsageError(f"invalid {name} {value!r} (from {origin}): expected {sep.join(choices)}")
    return value.strip().lower()


def parse_device(value: str, name: str, origin: str) -> str:
    v = value.strip().lower()
    aliases = {"auto": "auto", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "hip": "gpu", "cpu": "cpu"}
    if v not in aliases:
        raise pytest.UsageError(f"invalid {name} {value!r} (from {origin}): expected auto, gpu or cpu")
    return aliases[v]


def parse_size_option(value: str, name: str, origin: str) -> int:
    try:
        return units.parse_size(value, f"{name} from {origin}")
    except units.SizeError as e:
        raise pytest.UsageError(str(e)) from None


def parse_dtypes(value: str, name: str, origin: str) -> tuple[str, ...]:
    out = []
    for part in value.split(","):
        p = part.strip().lower()
        p = DTYPE_ALIASES.get(p, p)
        if p not in DTYPES:
            raise pytest.UsageError(
                f"invalid {name} {value!r} (from {origin}): unknown dtype {part.strip()!r}; known: {', '.join(DTYPES)}"
            )
        if p not in out:
            out.append(p)
    return tuple(out)


def parse_launch(value: str, name: str, origin: str) -> str:
    from ..env.launch import LAUNCH_CHOICES

    return one_of(value, name, origin, LAUNCH_CHOICES, ", ")


def parse_pairs(value: str, name: str, origin: str) -> Optional[str]:
    """One of PAIR_CHOICES ("neighbors" is "neighbours"), or None for "auto" (the default for the device count)."""
    v = value.strip().lower()
    v = {"neighbors": "neighbours"}.get(v, v)
    if v == "auto":
        return None
    if v not in PAIR_CHOICES:
        raise pytest.UsageError(f"invalid {name} {value!r} (from {origin}): expected {', '.join(PAIR_CHOICES)} "
                                "or auto")
    return v


def parse_plots_format(value: str, name: str, origin: str) -> str:
    return one_of(value, name, origin, ("png", "svg"), " or ")


def parse_env_names(value: str, name: str, origin: str) -> tuple[str, ...]:
    from ..env import variables

    try:
        return variables.parse_env_names(value, f"{name} from {origin}")
    except variables.EnvNamesError as e:
        raise pytest.UsageError(str(e)) from None


def parse_engine(value: str, name: str, origin: str) -> str:
    return one_of(value, name, origin, ENGINE_CHOICES, ", ")


def parse_copy_engine(value: str, name: str, origin: str) -> str:
    from ..ops.engines import copy_engine_choice

    try:
        return copy_engine_choice(value, origin)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def parse_baseline_nodes(value: str, name: str, origin: str) -> str:
    return one_of(value, name, origin, NODE_MODES, " or ")


def parse_prior(value: str, name: str, origin: str) -> str:
    """A prior file that can be read (checked now, not when a one-session case first needs it), or "none"."""
    from ..gate.prior import PriorError, load_prior, prior_path

    path = prior_path(value.strip())
    if path is not None:
        try:
            load_prior(path)
        except PriorError as e:
            raise pytest.UsageError(f"invalid {name} {value!r} (from {origin}): {e}") from None
    return value.strip()


def env_flag(name: str) -> bool:
    """A yes/no environment variable (``checks.env_flag``: 1/0, true/false, yes/no, on/off, any case), off
    where unset; an empty value or another word is a usage error naming it."""
    try:
        return checks.env_flag(name, False)
    except CheckError as e:
        raise pytest.UsageError(str(e)) from None


def check_cpu_devices() -> None:
    """A bad GPUCOMM_CPU_DEVICES is a usage error at start-up, not at the first test that counts devices."""
    from ..env.hardware import CpuDevicesError, cpu_logical_devices

    try:
        cpu_logical_devices()
    except CpuDevicesError as e:
        raise pytest.UsageError(str(e)) from None

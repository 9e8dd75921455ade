"""Every op that is measured, as a spec: its name (a measurement's and a baseline entry's ``op``), the group
whose common shift the gate fits it in, and the kind that makes its class.

Each op module declares the specs of its ops next to them (``SPECS`` in :mod:`.collectives`, :mod:`.copies`,
:mod:`.patterns` and :mod:`.nodes`); this module gathers them on first use, so the gate, the calibration and
the reports ask :func:`op_spec` instead of importing the op modules and testing names.  A new op is a spec in
its own module and nothing else here.

Imports no torch (neither do the op modules at import).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

__all__ = ["OpSpec", "COLLECTIVE", "COPY", "PEER_KIND", "HOST_KIND", "op_spec", "op_group", "op_kind", "known_ops"]

#: the groups: what runs over a process group (collectives, training-step patterns, node pairs) and copies
COLLECTIVE, COPY = "collective", "copy"
#: the kinds of the copies: between devices, and between pinned host memory and a device
PEER_KIND, HOST_KIND = "peer", "host"
_KINDS = {COLLECTIVE: (COLLECTIVE,), COPY: (PEER_KIND, HOST_KIND)}


@dataclass(frozen=True)
class OpSpec:
    """One measured op: ``group`` is "collective" or "copy" (the gate's common shift); ``kind`` is
    "collective", "peer" or "host" (with the size, the gate's class: ``gate.levels.case_class``)."""

    name: str
    group: str
    kind: str

    def __post_init__(self) -> None:
        if self.group not in _KINDS:
            raise ValueError(f"op {self.name!r}: group must be one of {', '.join(_KINDS)}, got {self.group!r}")
        if self.kind not in _KINDS[self.group]:
            raise ValueError(f"op {self.name!r} of group {self.group!r}: kind must be one of "
                             f"{', '.join(_KINDS[self.group])}, got {self.kind!r}")


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, OpSpec]:
    from . import collectives, copies, nodes, patterns

    specs: dict[str, OpSpec] = {}
    for module in (collectives, patterns, nodes, copies):
        for spec in module.SPECS:
            if spec.name in specs:
                raise ValueError(f"op {spec.name!r} is declared twice: in {module.__name__} and before it")
            specs[spec.name] = spec
    return specs


def op_spec(name: str) -> Optional[OpSpec]:
    """The spec of the op ``name``, None for an op no module declares (a user's own, or a name from a newer
    version in a stored file)."""
    return _registry().get(name)


def op_group(name: str) -> str:
    """The group of the op ``name``; an undeclared op counts as a copy (it shares no shift with the
    collectives)."""
    spec = op_spec(name)
    return spec.group if spec else COPY


def op_kind(name: str) -> str:
    """The kind of the op ``name``; an undeclared op counts as a copy between devices."""
    spec = op_spec(name)
    return spec.kind if spec else PEER_KIND


def known_ops() -> tuple[str, ...]:
    """Every declared op, collectives first, in the order their modules declare them."""
    return tuple(_registry())

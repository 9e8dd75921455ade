"""What changed in the environment since a baseline was recorded: the diff of two fingerprints.

A fingerprint is any JSON object (driver, library versions, GPUs, ...); finding it on this machine is
:mod:`pytest_gpucomm.env.hardware`'s job.  Here two of them are compared leaf by leaf and the result is put in
one line for the messages.  Standard library only.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

__all__ = ["ABSENT", "VOLATILE_KEYS", "diff_fingerprints", "format_fingerprint_diff", "node_differences"]


class _Absent:
    """The type of :data:`ABSENT` (one instance; it pickles as that instance)."""

    def __repr__(self) -> str:
        return "(absent)"

    __str__ = __repr__

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: object = _Absent()
"""Stands for a key missing on one side in :func:`diff_fingerprints` results."""

#: keys that change from run to run on an unchanged machine: never reported as a change.  The AMD reading
#: (pytest_gpucomm.env.amd) adds four readings of the moment: a GPU's current clock ("current_mhz") and whether
#: it sleeps ("deep_sleep") follow the load, and the xGMI links' accumulated traffic ("read_kb",
#: "write_kb") grows with every copy; the clock limits, locks and the links' widths, speeds and states
#: stay, so that a lower clock cap or a link trained down is reported.  The NVIDIA reading
#: (pytest_gpucomm.env.nvidia) adds the NVLinks' error counters ("error_counts"), which accumulate from the
#: driver's load; and a reading's "notes" (a call that failed) say how it was read, not what the machine is.
VOLATILE_KEYS: frozenset[str] = frozenset(
    {"date", "run_id", "time", "timestamp", "start_time", "end_time", "pid", "uptime_s",
     "current_mhz", "deep_sleep", "read_kb", "write_kb", "error_counts", "notes"}
)


def _flatten(obj: object, prefix: str, out: dict[str, object], ignore: frozenset) -> None:
    """Put every leaf of ``obj`` into ``out`` under its dotted key, depth first in document order (a later
    leaf of the same dotted key wins).  Iterative: a fingerprint nested thousands deep needs no recursion."""
    stack: list[tuple[object, str]] = [(obj, prefix)]
    while stack:
        node, pre = stack.pop()
        if isinstance(node, Mapping):
            children = [(v, f"{pre}.{k}" if pre else str(k)) for k, v in node.items() if str(k) not in ignore]
        elif isinstance(node, (list, tuple)):
            children = [(v, f"{pre}.{i}" if pre else str(i)) for i, v in enumerate(node)]
        else:
            out[pre] = node
            continue
        stack.extend(reversed(children))


def source_tool(fingerprint: Mapping[str, object]) -> Optional[str]:
    """The tool whose file a fingerprint came from (``source.tool``: nccl-tests, rccl-tests, nvbandwidth, as
    ``gpucomm baselines add`` records their files), None for a run of ours."""
    source = fingerprint.get("source")
    return str(source.get("tool")) if isinstance(source, Mapping) and source.get("tool") else None


def latest_of_source(fingerprints: Sequence[Mapping[str, object]],
                     like: Optional[Mapping[str, object]]) -> Optional[int]:
    """Of a baseline's runs' fingerprints, oldest first, the index of the one an environment ``like`` is compared
    with: the newest of the same source (:func:`source_tool`: in a file that holds runs of ours and of other
    tools, a run of one tool against that tool's last run, not whichever was recorded last: an nvbandwidth file
    against an nccl-tests run listed NCCL as gone), else the newest of all; None where there is none."""
    if not fingerprints:
        return None
    if like is not None:
        tool = source_tool(like)
        for i in range(len(fingerprints) - 1, -1, -1):
            if source_tool(fingerprints[i]) == tool:
                return i
    return len(fingerprints) - 1


def diff_fingerprints(
    old: Optional[Mapping[str, object]], new: Optional[Mapping[str, object]], *, ignore: Iterable[str] = VOLATILE_KEYS
) -> list[tuple[str, object, object]]:
    """What changed between two fingerprints: ``(dotted.key, old, new)`` for every leaf that was added
    (old is ABSENT), removed (new is ABSENT) or changed, sorted by key.  Nested objects and lists are
    flattened (``gpus.0.name``); keys named in ``ignore`` (volatile: date, run_id, ...) are skipped at
    any depth."""
    ign = frozenset(ignore)
    a: dict[str, object] = {}
    b: dict[str, object] = {}
    _flatten(old or {}, "", a, ign)
    _flatten(new or {}, "", b, ign)
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k, ABSENT), b.get(k, ABSENT)
        if va is ABSENT or vb is ABSENT or va != vb or type(va) is not type(vb):
            if va is not ABSENT and vb is not ABSENT and va == vb and {type(va), type(vb)} <= {int, float}:
                continue  # 2 and 2.0 are the same figure
            out.append((k, va, vb))
    return out


def format_fingerprint_diff(diffs: Sequence[tuple[str, object, object]], limit: int = 8) -> str:
    """One line for a message: ``driver 550.54 -> 560.35; nccl 2.20.5 -> 2.21.5``."""
    if not diffs:
        return "no fingerprint change"
    parts = [f"{k} {old} -> {new}" for k, old, new in diffs[:limit]]
    if len(diffs) > limit:
        parts.append(f"and {len(diffs) - limit} more")
    return "; ".join(parts)


def node_differences(nodes: Mapping[int, tuple[str, Mapping[str, object]]],
                     ignore: Iterable[str] = VOLATILE_KEYS | {"host"}) -> list[str]:
    """How the nodes of a job differ from each other (another driver, NCCL, NIC firmware, topology): one
    line per node whose fingerprint differs from the most common one among the nodes (with two nodes, or a
    tie, the one of the lowest node), naming the node, its host and what differs; ``[]`` when every node
    has the same fingerprint.  ``nodes`` maps node -> (host, fingerprint)."""
    if len(nodes) < 2:
        return []
    ign = frozenset(ignore)
    flat: dict[int, dict[str, object]] = {}
    for n, (_, fp) in nodes.items():
        flat[n] = {}
        _flatten(fp, "", flat[n], ign)
    groups: dict[str, list[int]] = {}
    for n in sorted(nodes):
        groups.setdefault(repr(sorted(flat[n].items(), key=lambda kv: kv[0])), []).append(n)
    if len(groups) == 1:
        return []
    ref = max(groups.values(), key=lambda ns: (len(ns), -ns[0]))
    r0 = ref[0]

    def name(n: int) -> str:
        host = nodes[n][0]
        return f"node {n}" + (f" ({host})" if host else "")

    others = f"the other {len(ref)} nodes" if len(ref) > 1 else name(r0)
    lines = []
    for ns in groups.values():
        if ns is ref:
            continue
        diff = format_fingerprint_diff(diff_fingerprints(nodes[r0][1], nodes[ns[0]][1], ignore=ign))
        who = ", ".join(name(n) for n in ns[:8]) + (f" and {len(ns) - 8} more" if len(ns) > 8 else "")
        lines.append(f"{who} differ{'s' if len(ns) == 1 else ''} from {others}: {diff}")
    return lines

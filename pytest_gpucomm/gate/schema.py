"""What a valid baseline document is: its JSON schema (:data:`JSON_SCHEMA`, the format documented field by
field in :mod:`pytest_gpucomm.gate.store`) and the checks beyond it, which the schema cannot say: every sample
and floor a positive finite number, each run's ``tail`` a tail sketch, no NaN or infinity anywhere, nesting at
most :data:`MAX_NESTING` deep.  Reading a file (:func:`pytest_gpucomm.gate.store.read_document`), writing one
and a saved report's baseline (:mod:`pytest_gpucomm.report.saved`) check with these; what fails is a
:class:`BaselineError` that names the file and the JSON path.

This module imports ``jsonschema``: :mod:`pytest_gpucomm.gate` imports it only on use.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import jsonschema

from ..files.formats import BASELINE_SCHEMA, BASELINE_VERSION
from ..files.jsontext import JsonKey, first_non_finite, json_path

if TYPE_CHECKING:
    from ..sketches import TailSketch

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "MAX_NESTING",
    "JSON_SCHEMA",
    "SCHEMA_VALIDATOR",
    "BaselineError",
    "nesting_depth_exceeds",
    "too_deep",
    "describe_error",
    "check_samples",
    "check_tails",
    "check_finite",
    "tail_sketch",
]

SCHEMA_ID, SCHEMA_VERSION = BASELINE_SCHEMA, BASELINE_VERSION  # written today; an earlier version is upgraded on read
#: the deepest nesting of JSON arrays/objects read (a baseline needs 6; fingerprints add a few more)
MAX_NESTING = 64

_POSITIVE_NUMBER = {"type": "number", "exclusiveMinimum": 0}

JSON_SCHEMA: dict[str, object] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://pytest-gpucomm/schemas/baseline-{SCHEMA_VERSION}.json",
    "title": f"pytest-gpucomm baseline file, schema_version {SCHEMA_VERSION}",
    "type": "object",
    "required": ["schema", "schema_version", "name", "source", "max_runs", "runs", "cases"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "schema_version": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "minLength": 1},
        "source": {"enum": ["measured", "published"]},
        "source_detail": {"type": "string"},
        "max_runs": {"type": "integer", "minimum": 1},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["run_id", "date"],
                "properties": {
                    "run_id": {"type": "string", "minLength": 1},
                    "date": {"type": "string"},
                    "session": {"type": "string", "minLength": 1},
                    "node": {"type": "integer", "minimum": 0},
                    "host": {"type": "string"},
                    "fingerprint": {"type": "object"},
                },
            },
        },
        "cases": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["test_id", "op", "size_bytes", "world_size", "runs"],
                "properties": {
                    "test_id": {"type": "string"},
                    "op": {"type": "string", "minLength": 1},
                    "size_bytes": {"type": "integer", "minimum": 0},
                    "world_size": {"type": "integer", "minimum": 1},
                    "dtype": {"type": ["string", "null"]},
                    "devices": {"type": "array", "items": {"type": "string"}},
                    "layout": {"type": "string", "pattern": "^[1-9][0-9]*x[1-9][0-9]*$"},
                    "floor_gbps": _POSITIVE_NUMBER,
                    "runs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["run_id", "samples_gbps"],
                            "properties": {
                                "run_id": {"type": "string", "minLength": 1},
                                "samples_gbps": {"type": "array", "minItems": 1, "items": _POSITIVE_NUMBER},
                                "summary": {
                                    "type": "object",
                                    "properties": {
                                        "median_gbps": {"type": "number"},
                                        "p50_us": {"type": "number"},
                                        "p99_us": {"type": "number"},
                                        "cv": {"type": "number"},
                                        "n": {"type": "integer", "minimum": 0},
                                    },
                                },
                                "tail": {
                                    "type": "object",
                                    "required": ["n", "p50_us", "ratios", "max_ratio"],
                                    "properties": {
                                        "n": {"type": "integer", "minimum": 1},
                                        "p50_us": _POSITIVE_NUMBER,
                                        "ratios": {"type": "object", "additionalProperties": {"type": "number",
                                                                                             "minimum": 1}},
                                        "max_ratio": {"type": "number", "minimum": 1},
                                    },
                                },
                            },
                        },
                    },
                },
                # a case without measured runs is only meaningful with a published floor
                "if": {"properties": {"runs": {"maxItems": 0}}},
                "then": {"required": ["floor_gbps"]},
            },
        },
    },
}


def _structure_schema() -> dict[str, object]:
    """JSON_SCHEMA without the per-sample rule: check_samples checks the samples (finite, > 0) in one
    plain loop, which is about ten times faster on a file of 5 runs x 169 cases than the validator."""
    schema = json.loads(json.dumps(JSON_SCHEMA))
    run = schema["properties"]["cases"]["additionalProperties"]["properties"]["runs"]["items"]
    del run["properties"]["samples_gbps"]["items"]
    return schema


SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(_structure_schema())


class BaselineError(Exception):
    """A baseline that cannot be used; the message names the file and exactly what is wrong."""


def nesting_depth_exceeds(doc: object, limit: int) -> bool:
    """Whether arrays/objects in ``doc`` nest deeper than ``limit`` levels (the top level is level 1).
    Iterative: a document of any depth is checked without recursion."""
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, Mapping):
            children: Iterable[object] = obj.values()
        elif isinstance(obj, (list, tuple)):
            children = obj
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (Mapping, list, tuple)))
    return False


def too_deep(path: Path) -> BaselineError:
    return BaselineError(
        f"{path}: the JSON is nested deeper than {MAX_NESTING} levels, the most a baseline file may "
        "use: not a baseline file"
    )


def check_finite(path: Path, doc: object) -> None:
    """Refuse a NaN or an infinity anywhere (Python's json reads them, but they are not JSON: a file that held
    one in a fingerprint loaded, and then the next run could not be saved to it); the schema has already
    named those in the samples and the figures it knows (the samples, most of a file, are left out here)."""
    found = first_non_finite(doc, skip=("samples_gbps",))
    if found:
        raise BaselineError(f"{path}: invalid baseline: at {found[0]}: {found[1]!r} is not a finite "
                            "number (a baseline holds finite numbers only)")


def describe_error(err: "jsonschema.exceptions.ValidationError") -> str:
    if err.validator == "required":
        return err.message.replace("is a required property", "is missing (a required field)")
    if err.validator == "then":
        return "a case without runs needs a 'floor_gbps' (a published figure)"
    return err.message


def _finite(v: Any) -> bool:
    """A number that is finite as a float (an integer too large for a float is not)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def check_samples(path: Path, doc: dict) -> None:
    """Samples and floors are positive finite numbers (JSON has no NaN/Infinity, but Python's json module
    reads them)."""
    for key, case in doc["cases"].items():
        floor = case.get("floor_gbps")
        if floor is not None and not _finite(floor):
            raise BaselineError(f"{path}: invalid baseline: at {json_path(['cases', key, 'floor_gbps'])}: "
                                f"{floor!r} is not finite")
        for i, run in enumerate(case["runs"]):
            for j, v in enumerate(run["samples_gbps"]):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (_finite(v) and v > 0):
                    raise BaselineError(
                        f"{path}: invalid baseline: at "
                        f"{json_path(['cases', key, 'runs', i, 'samples_gbps', j])}: {v!r} is not a positive "
                        "finite number"
                    )


def check_tails(path: Path, doc: dict) -> None:
    """Each run's ``tail`` (optional) is a tail sketch: its levels in (0, 1), its ratios in [1, max_ratio]."""
    for key, case in doc["cases"].items():
        for i, run in enumerate(case["runs"]):
            if "tail" in run:
                tail_sketch(path, run["tail"], ["cases", key, "runs", i, "tail"])


def tail_sketch(path: Path, d: Any, where: list[JsonKey]) -> TailSketch:
    """The :class:`~pytest_gpucomm.sketches.TailSketch` of a run's ``tail``, or a BaselineError naming the file
    and the place."""
    from ..sketches import TailSketch

    at = f"{path}: invalid baseline: at {json_path(where)}"
    bad = [q for q in (d.get("ratios") or {}) if not _level(q)] if isinstance(d, dict) else []
    if bad:
        raise BaselineError(f"{at}: {bad[0]!r} is not a level between 0 and 1 (a ratio's key is its quantile)")
    try:
        return TailSketch.from_dict(d, at)
    except ValueError as e:
        raise BaselineError(str(e)) from None


def _level(q: Any) -> bool:
    try:
        return 0 < float(q) < 1
    except (TypeError, ValueError):
        return False

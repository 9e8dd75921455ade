#!/usr/bin/env python3
"""The package's structure in a few numbers, read from its source (``ast``; nothing of it is imported).

Prints the folders that import each other, the imports that point back up against the layer order (the
order of docs/architecture.md and ``tests/test_layers.py``), the functions over 80 lines, how often ``Any``
and ``dict[str, Any]`` are written, the imports of the package made inside a function, and the longest
module.  An import counts at any depth, in a function or under ``if TYPE_CHECKING:`` alike: each is an
arrow between two parts of the package.  ``from .. import units`` is an arrow to ``units``, the module it
names, not to the package root.

    python benchmarks/structure.py [--json FILE] [--package DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

PACKAGE = "pytest_gpucomm"
DEFAULT_DIR = Path(__file__).resolve().parents[1] / PACKAGE

#: the layers, bottom to top: a part of the package may import the parts of its own layer and those below.
#: The root modules of the shared vocabulary are the bottom layer; a root module not named here (one added
#: later) counts there too.  ``__init__`` is the lazy public API, ``__main__`` the ``python -m`` entry.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("vocab", "units", "text", "summary", "measurement", "sketches", "checks", "_lazy"),
    ("files",), ("env",), ("ranks",), ("analysis",), ("ops",), ("foreign",), ("gate",), ("report",),
    ("compare",), ("cli",), ("plugin",), ("__init__",), ("__main__",),
)

#: the arrows back up that the layers allow: none today (the version string lives in vocab.py)
ALLOWED_UP: frozenset[tuple[str, str]] = frozenset()

LONG_FUNCTION = 80


@dataclass(frozen=True)
class Arrow:
    """One import of the package: the part that imports, the part imported, and where."""

    source: str
    target: str
    where: str  # "path:line"
    local: bool  # written inside a function


def _part(module: str) -> Optional[str]:
    """The part of the package a dotted module name belongs to: its folder, or a root module's name, or
    ``__init__`` for the package itself; None outside the package."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _named_module(base: str, name: str, package_dir: Path) -> str:
    """``base.name`` where ``name`` is a module or folder beside ``base``'s files, else ``base``."""
    path = package_dir.parent.joinpath(*base.split("."), name)
    if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
        return f"{base}.{name}"
    return base


def _module_of(path: Path, package_dir: Path) -> tuple[str, ...]:
    """The dotted package parts of the folder holding ``path``."""
    return (PACKAGE,) + path.relative_to(package_dir).parts[:-1]


def _imports(tree: ast.AST, path: Path, package_dir: Path) -> Iterator[tuple[str, int, bool]]:
    """(absolute module, line, inside a function) of every import in a file, each name of a
    ``from X import a, b`` resolved to ``X.a`` where ``a`` is a module."""
    folder = _module_of(path, package_dir)

    def walk(node: ast.AST, local: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                yield from ((a.name, child.lineno, local) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = (".".join(folder[:len(folder) - child.level + 1]) if child.level else "")
                base = ".".join(x for x in (base, child.module or "") if x)
                for a in child.names:
                    yield _named_module(base, a.name, package_dir), child.lineno, local
            yield from walk(child, inner)

    yield from walk(tree, False)


def _part_of_file(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _rank(part: str) -> int:
    for i, layer in enumerate(LAYERS):
        if part in layer:
            return i
    return 0  # a root module of the vocabulary not named in LAYERS


def _arrows(files: dict[Path, ast.AST], package_dir: Path) -> list[Arrow]:
    out = []
    for path, tree in files.items():
        source = _part_of_file(path, package_dir)
        for module, line, local in _imports(tree, path, package_dir):
            target = _part(module)
            if target is not None and target != source:
                out.append(Arrow(source, target, f"{path.relative_to(package_dir.parent)}:{line}", local))
    return out


def _local_imports(files: dict[Path, ast.AST], package_dir: Path) -> tuple[int, int]:
    """Import statements written inside a function: all of them, and those of the package."""
    every = package = 0
    for path, tree in files.items():
        found = [(line, _part(module) is not None)
                 for module, line, local in _imports(tree, path, package_dir) if local]
        every += len({line for line, _ in found})
        package += len({line for line, ours in found if ours})
    return every, package


def _long_functions(files: dict[Path, ast.AST], package_dir: Path) -> list[str]:
    out = []
    for path, tree in files.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > LONG_FUNCTION:
                    out.append((n, f"{path.relative_to(package_dir.parent)}:{node.lineno} {node.name} ({n} lines)"))
    return [text for _, text in sorted(out, reverse=True)]


def measure(package_dir: Path) -> dict[str, object]:
    """The figures of the package under ``package_dir``, as the JSON the script writes."""
    paths = sorted(package_dir.rglob("*.py"))
    texts = {p: p.read_text(encoding="utf-8") for p in paths}
    files: dict[Path, ast.AST] = {p: ast.parse(t, str(p)) for p, t in texts.items()}
    arrows = _arrows(files, package_dir)
    pairs = {(a.source, a.target) for a in arrows}
    mutual = sorted({tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs})
    up: dict[str, list[str]] = {}
    for a in arrows:
        if _rank(a.target) > _rank(a.source) and (a.source, a.target) not in ALLOWED_UP:
            where = up.setdefault(f"{a.source} -> {a.target}", [])
            text = a.where + (" (in a function)" if a.local else "")
            if text not in where:
                where.append(text)
    local_every, local_package = _local_imports(files, package_dir)
    longest = max(paths, key=lambda p: texts[p].count("\n"))
    return {
        "mutual_pairs": [f"{a} <-> {b}" for a, b in mutual],
        "arrows_up": dict(sorted(up.items())),
        "functions_over_80_lines": _long_functions(files, package_dir),
        "any": sum(len(re.findall(r"\bAny\b", t)) for t in texts.values()),
        "dict_str_any": sum(t.count("dict[str, Any]") for t in texts.values()),
        "local_imports": local_every,
        "local_imports_of_the_package": local_package,
        "longest_module": f"{longest.relative_to(package_dir.parent)} ({texts[longest].count(chr(10))} lines)",
    }


def _print(figures: dict[str, object]) -> None:
    mutual, up, long = figures["mutual_pairs"], figures["arrows_up"], figures["functions_over_80_lines"]
    assert isinstance(mutual, list) and isinstance(up, dict) and isinstance(long, list)
    print(f"folder pairs that import each other: {len(mutual)}")
    for pair in mutual:
        print(f"  {pair}")
    print(f"arrows back up against the layer order: {len(up)}")
    for arrow, where in up.items():
        print(f"  {arrow}: {', '.join(where[:3])}{f' and {len(where) - 3} more' if len(where) > 3 else ''}")
    print(f"functions over {LONG_FUNCTION} lines: {len(long)}")
    for text in long:
        print(f"  {text}")
    print(f"`Any` written: {figures['any']}; `dict[str, Any]`: {figures['dict_str_any']}")
    print(f"imports inside a function: {figures['local_imports']}, "
          f"of the package: {figures['local_imports_of_the_package']}")
    print(f"longest module: {figures['longest_module']}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE as JSON")
    p.add_argument("--package", metavar="DIR", type=Path, default=DEFAULT_DIR,
                   help=f"the package's folder (default: {PACKAGE}/ beside this script's folder)")
    args = p.parse_args(argv)
    figures = measure(args.package.resolve())
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

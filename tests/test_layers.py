"""The package's layers (issue 26, docs/architecture.md): read from the source, no module imported."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pytest_gpucomm"


def _imports(path: Path) -> list[tuple[int, str, list[str], int]]:
    """(line, module, names, level) of every import in a file, at any depth."""
    text = path.read_text(encoding="utf-8")
    return [(line, mod, list(names), level) for line, mod, names, level in _imports_in(text)]


@functools.lru_cache(maxsize=None)
def _imports_in(text: str) -> tuple[tuple[int, str, tuple[str, ...], int], ...]:
    """:func:`_imports` of a file's text, parsed once for the tests of this file that read the same text (the
    package's parse takes most of their time); a file changed meanwhile is another text, parsed again."""
    out: list[tuple[int, str, tuple[str, ...], int]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, (), 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, node.module or "", tuple(a.name for a in node.names), node.level))
    return tuple(out)


def test_only_the_plugin_folder_imports_pytest():
    """pytest is imported only under plugin/ (and by the package root's lazy marker names, which are
    pytest's own marks): the gate, the reports and the gpucomm command work without it."""
    found = []
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] == "plugin" or rel == Path("__init__.py"):
            continue
        found += [f"{rel}:{line} {mod}" for line, mod, _, level in _imports(p)
                  if level == 0 and mod.split(".")[0] in ("pytest", "_pytest")]
    assert found == []


def test_the_package_root_holds_only_the_public_api_and_the_shared_vocabulary():
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "_lazy.py", "checks.py", "measurement.py", "sketches.py",
                    "summary.py", "text.py", "units.py", "vocab.py"]
    folders = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == ["analysis", "cli", "compare", "env", "files", "foreign", "gate", "ops", "plugin", "ranks",
                       "report"]


def test_no_module_outside_the_plugin_imports_the_plugin():
    """The layers point one way: plugin/ uses the rest, nothing below it reaches back up."""
    found = []
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] == "plugin" or rel == Path("__init__.py"):
            continue
        for line, mod, _, level in _imports(p):
            absolute = _target(rel, mod, level)
            if absolute == "pytest_gpucomm.plugin" or absolute.startswith("pytest_gpucomm.plugin."):
                found.append(f"{rel}:{line} {absolute}")
    assert found == []


def test_no_module_of_the_package_imports_another_modules_private_name():
    """A name another module needs is public there (issue 26); torch's private helpers are the exception."""
    root = ROOT
    private = []
    for p in sorted(root.rglob("*.py")):
        for line, mod, names, level in _imports(p):  # a plain import names no name: only `from ... import` counts
            if mod != "__future__" and level + mod.startswith("pytest_gpucomm") > 0:
                private += [f"{p.relative_to(root)}:{line} {name}" for name in names
                            if name.startswith("_") and not name.startswith("__")]
    assert private == []


def _target(rel: Path, mod: str, level: int) -> str:
    """The absolute module name an import in file ``rel`` (relative to the package) names."""
    if level == 0:
        return mod
    package = ("pytest_gpucomm",) + rel.parts[:-1]
    return ".".join(package[:len(package) - level + 1] + ((mod,) if mod else ()))


def test_every_import_of_the_package_names_a_module_or_name_that_exists():
    """Also the imports inside functions, which a test run reaches only on their own path (a module moved
    to another folder leaves such imports pointing at nothing)."""
    missing = []
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        for line, mod, names, level in _imports(p):
            target = _target(rel, mod, level)
            if not target.startswith("pytest_gpucomm"):
                continue
            path = ROOT.parent.joinpath(*target.split("."))
            if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
                missing.append(f"{rel}:{line} {target}")
                continue
            for name in names:  # a submodule, or a name the module defines (its text says so)
                sub = path / name
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    continue
                text = (path.with_suffix(".py") if path.with_suffix(".py").is_file()
                        else path / "__init__.py").read_text(encoding="utf-8")
                if name != "*" and name not in text:
                    missing.append(f"{rel}:{line} {target}.{name}")
    assert missing == []


#: the package's layers, bottom to top (docs/architecture.md): each imports only its own layer and those below.
#: The root modules of the shared vocabulary are the bottom layer, the lazy public API (the package's
#: ``__init__``) and the ``python -m`` entry the top.  benchmarks/structure.py counts the same arrows.
LAYERS = (
    ("vocab", "units", "text", "summary", "measurement", "sketches", "checks", "_lazy"),
    ("files",), ("env",), ("ranks",), ("analysis",), ("ops",), ("foreign",), ("gate",), ("report",), ("compare",),
    ("cli",),
    ("plugin",), ("__init__",), ("__main__",),
)

#: arrows back up that the layers allow, as (importing part, imported part): none.  The version string, which
#: the HTML report prints, was the last one: it is defined in vocab.py and the package root re-exports it.
ALLOWED_UP: frozenset[tuple[str, str]] = frozenset()


def _part_of(rel: Path) -> str:
    """The layer part a file (relative to the package) belongs to: its folder, or a root module's name."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_parts(rel: Path) -> list[tuple[int, str]]:
    """(line, part) of every import of the package in a file, at any depth (in functions and under
    ``TYPE_CHECKING`` too); ``from .. import vocab`` names the module ``vocab``, not the package root."""
    out = []
    for line, mod, names, level in _imports(ROOT / rel):
        target = _target(rel, mod, level)
        if not target.startswith("pytest_gpucomm"):
            continue
        parts = target.split(".")[1:]
        if parts:
            out.append((line, parts[0]))
            continue
        for name in names or ["__init__"]:  # `from pytest_gpucomm import x`: the module x, else the root
            sub = ROOT / name
            out.append((line, name if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file()
                        else "__init__"))
    return out


def test_each_folder_imports_only_the_folders_below_it_in_the_layer_order():
    """gate/ judges and imports no report, ops/ and analysis/ borrow no word of the gate, nothing below the
    package root's public API imports it (issue 44): every import, in a function too, points down the order."""
    rank = {part: i for i, layer in enumerate(LAYERS) for part in layer}
    parts = {_part_of(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")}
    assert parts <= set(rank), f"a part of the package outside the layer order: {sorted(parts - set(rank))}"
    up = []
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        source = _part_of(rel)
        up += [f"{rel}:{line} {source} -> {target}" for line, target in _imported_parts(rel)
               if rank[target] > rank[source] and (source, target) not in ALLOWED_UP]
    assert up == []


def test_the_gate_asks_op_specs_and_imports_no_op_module():
    """The gate decides a case's group and class from the op's spec (ops/specs.py), not by importing the
    collectives, the patterns, the copies or the node pairs and testing names (issue 26, item 3)."""
    found = []
    for p in sorted((ROOT / "gate").rglob("*.py")):
        rel = p.relative_to(ROOT)
        for line, mod, _, level in _imports(p):
            absolute = _target(rel, mod, level)
            if absolute.startswith("pytest_gpucomm.ops") and absolute != "pytest_gpucomm.ops.specs":
                found.append(f"{rel}:{line} {absolute}")
    assert found == []


def test_the_plugin_has_no_module_over_600_lines_and_no_class_over_15_public_methods():
    """Thin hooks, small parts (issue 26, item 4): the session's state is composed of objects of one concern
    each, and launched mode is a folder of its own (properties count as methods)."""
    long, wide = [], []
    for p in sorted((ROOT / "plugin").rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        if text.count("\n") > 600:
            long.append(f"{p.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                public = {f.name for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}
                if len(public) > 15:
                    wide.append(f"{p.relative_to(ROOT)}: {node.name} has {len(public)} public methods")
    assert long == [] and wide == []


def test_the_plugins_generic_hooks_leave_the_modes_to_their_own_plugins():
    """Launched mode and pytest-xdist are plugins registered at configure (plugin/launched/mode.py,
    plugin/xdist.py): the hooks of plugin/__init__.py import neither and import no private pytest name."""
    rel = Path("plugin") / "__init__.py"
    found = [f"{rel}:{line} {_target(rel, mod, level)}" for line, mod, _, level in _imports(ROOT / rel)
             if _target(rel, mod, level).startswith(("pytest_gpucomm.plugin.launched", "pytest_gpucomm.plugin.xdist",
                                                     "_pytest"))]
    assert found == []

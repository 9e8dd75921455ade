"""The package's layers (issue 26, docs/architecture.md): read from the source, no module imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pytest_gpucomm"


def _imports(path: Path) -> list[tuple[int, str, list[str], int]]:
    """(line, module, names, level) of every import in a file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, [], 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, node.module or "", [a.name for a in node.names], node.level))
    return out


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
    assert root == ["__init__.py", "__main__.py", "_lazy.py", "checks.py", "measurement.py", "summary.py", "units.py",
                    "vocab.py"]
    folders = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == ["analysis", "cli", "compare", "env", "files", "gate", "ops", "plugin", "ranks", "report"]


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
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__" and node.level + (
                    (node.module or "").startswith("pytest_gpucomm")) > 0:
                private += [f"{p.relative_to(root)}:{node.lineno} {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
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

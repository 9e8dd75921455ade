#!/usr/bin/env python3
"""How far one value travels through the package, read from its source (``ast``; nothing of it is imported).

A *way* starts in one function with one followed value and goes where the value is handed on, function by
function.  It is counted as stays (the functions visited), the files and folders they are in, and the climbs
back up (steps from a lower layer to a higher one, in the layer order of docs/architecture.md).

    python benchmarks/ways.py [--package DIR] [--json FILE] [-v] [WAY ...]

A WAY is ``FILE:FUNCTION:PARAM`` (FILE relative to the package, FUNCTION a name or ``Class.method``, PARAM a
parameter, or ``return`` / ``return.ATTR``: the function's result, or one attribute of it, followed into each
function of the package that calls it, from the name the result is assigned to).  Without a WAY, the named
ways are measured:

* ``option-to-verdict``: ``plugin/settings.py:read_settings:return.baseline``, the ``--gpu-baseline`` value
  as the settings carry it, from the function that reads the options to the gate's verdict on a case;
* ``session-end``: ``plugin/finish.py:finish_session:state``, the session's state at its end;
* ``gate-judge``: ``gate/verdicts.py:Gate.judge:m``, one measurement judged.

The rules, one function at a time:

1. *Followed paths.*  What is followed is a set of dotted paths (``state``, ``settings.baseline``,
   ``self.gate``).  An expression *mentions* a followed path P when it holds a name or attribute chain T
   with T == P, or T a part of P (``state.records`` of ``state``), or T the object P is inside
   (``settings`` of ``settings.baseline``).
2. *Data flow*, flow-insensitive: a name, ``x.attr`` or ``x[...]`` assigned (``=``, ``:=``, ``for``,
   ``with ... as``, a comprehension's ``for``) from an expression that mentions a followed path becomes
   followed; assigned the object a path is inside (``s = self.settings`` of ``self.settings.baseline``), it
   carries the rest of the path (``s.baseline``).  A tuple assigned from a tuple (``a, b = x, y``) pairs
   its elements one by one.  Repeated until nothing new is followed.  Nested functions and lambdas are
   part of the function they are written in.
3. *Steps.*  Each call whose arguments or receiver (``obj`` of ``obj.meth()``) mention a followed path, or
   hand on the object one is inside, is a step.  The callee is found by name: a plain name is the
   function or class of that name defined in the module or imported into it (at any depth, through
   ``from .x import y`` and re-exports; a lazy export, the one of that name in the package); ``mod.f()`` is
   ``f`` of an imported module; ``self.meth()`` is the method of the class (or its bases); ``obj.meth()`` is
   the method of ``obj``'s class where the source tells it (a parameter's or a field's annotation, a
   property's return annotation, ``x = Cls(...)``), else every method ``meth`` of the classes defined in
   the module or imported into it by name, the methods of Python's own containers and strings
   (``BUILTIN_METHODS``) left out.  A class called is its ``__init__`` (or its bases'), else the class
   itself, one stay (a dataclass); built with a followed value as a field (``Cls(spec=x)``) its object
   carries ``.spec``, not the whole value.  The arguments go to the callee's parameters by position and
   keyword, the receiver to ``self``; a parameter given a followed path whole is followed; given the
   object a path is inside, it carries the rest of it, and the step is taken only if the callee's body
   uses what it carries.  A path is at most ``MAX_DOTS`` attributes deep.
4. *Within a class.*  ``self.attr`` followed in one method (assigned, or carried in ``self``) is followed in
   the class: each method of the class that mentions it is a step from where it became followed.  A
   property whose return mentions a followed path makes ``self.<property>`` followed in its class.
5. *Counting.*  Depth-first, each function visited once (the first time, with what it was given then).
   Stays: functions visited.  Files, folders: those they are in (the package root is a folder).  Climbs
   back up: steps taken into a function whose layer is higher than the caller's (``LAYERS``).

Blind spots: the flow through pytest (hooks, ``config.stash``), through containers' contents and through
values returned (other than by assignment at the call site) is not followed, except the ``return`` start;
a method call on an object of unknown class may go to several classes' methods of that name, or to none
where the class is not imported by name; the class rule (4) takes in every method of a class that reads a
followed attribute, whether or not the way's value reaches it at run time; a function
visited once is not entered again with other parameters; ``getattr`` and ``**kwargs`` are not read.
"""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Union

PACKAGE = "pytest_gpucomm"
DEFAULT_DIR = Path(__file__).resolve().parents[1] / PACKAGE

#: the layers, bottom to top, as docs/architecture.md orders them (benchmarks/structure.py has the same);
#: a root module not named here is one of the root's words, the bottom layer
LAYERS: tuple[tuple[str, ...], ...] = (
    ("vocab", "units", "summary", "measurement", "sketches", "_lazy"),
    ("files",), ("env",), ("ranks",), ("analysis",), ("ops",), ("gate",), ("report",), ("compare",),
    ("cli",), ("plugin",), ("__init__",), ("__main__",),
)

NAMED_WAYS: dict[str, str] = {
    "option-to-verdict": "plugin/settings.py:read_settings:return.baseline",
    "session-end": "plugin/finish.py:finish_session:state",
    "gate-judge": "gate/verdicts.py:Gate.judge:m",
}

#: a followed path is at most this many attributes deep (``a.b.c.d``): ``x = Box(x)`` in a loop ends there
MAX_DOTS = 4

#: methods of Python's lists, dicts, sets and strings: ``x.append(v)`` is not a step into the package
BUILTIN_METHODS = frozenset({
    "append", "extend", "insert", "remove", "pop", "clear", "copy", "count", "index", "sort", "reverse",
    "get", "items", "keys", "values", "update", "setdefault", "popitem", "fromkeys", "add", "discard",
    "union", "intersection", "difference", "issubset", "issuperset", "join", "split", "rsplit", "strip",
    "lstrip", "rstrip", "format", "startswith", "endswith", "replace", "lower", "upper", "encode", "decode",
    "splitlines", "partition", "rpartition", "find", "rfind", "ljust", "rjust", "center", "zfill",
})


@dataclass
class Func:
    """A function or method of the package (or a class without ``__init__``, called as one stay)."""

    module: str  # dotted, without the package: "plugin.session"
    path: str  # relative to the package: "plugin/session.py"
    qualname: str
    node: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]
    cls: Optional["Cls"] = None

    @property
    def params(self) -> list[str]:
        if isinstance(self.node, ast.ClassDef):  # a dataclass: its fields, in order
            return [s.target.id for s in self.node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        a = self.node.args
        return [p.arg for p in a.posonlyargs + a.args]

    @property
    def self_name(self) -> Optional[str]:
        if self.cls is None or isinstance(self.node, ast.ClassDef) or _is_static(self.node):
            return None
        return self.params[0] if self.params else None

    @property
    def key(self) -> str:
        return f"{self.path}:{self.qualname}"


@dataclass
class Cls:
    module: str
    name: str
    node: ast.ClassDef
    methods: dict[str, Func] = field(default_factory=dict)
    bases: list["Cls"] = field(default_factory=list)

    def mro(self) -> Iterator["Cls"]:
        seen: set[int] = set()
        todo = [self]
        while todo:
            c = todo.pop(0)
            if id(c) not in seen:
                seen.add(id(c))
                yield c
                todo.extend(c.bases)

    def method(self, name: str) -> Optional[Func]:
        return next((c.methods[name] for c in self.mro() if name in c.methods), None)


def _is_static(node: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
               for d in getattr(node, "decorator_list", []))


def _is_property(node: ast.AST) -> bool:
    return any((isinstance(d, ast.Name) and d.id in ("property", "cached_property"))
               or (isinstance(d, ast.Attribute) and d.attr == "cached_property")
               for d in getattr(node, "decorator_list", []))


def chain(node: ast.AST) -> Optional[str]:
    """``a.b.c`` of a name or attribute chain; ``x[...]`` is ``x``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = chain(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    if isinstance(node, ast.Subscript):
        return chain(node.value)
    return None


def chains(node: ast.AST) -> Iterator[str]:
    """The longest name and attribute chains of an expression (``x[i]`` counts as ``x`` and ``i``)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        text = chain(node)
        if text is not None:
            yield text
            return
    if isinstance(node, ast.Subscript):
        yield from chains(node.value)
        yield from chains(node.slice)
        return
    for child in ast.iter_child_nodes(node):
        yield from chains(child)


def relation(text: str, path: str) -> Optional[str]:
    """How chain ``text`` touches followed ``path``: "" when it is the path or a part of it, the rest of the
    path (".baseline") when ``text`` is the object the path is inside, None when they are apart."""
    if text == path or text.startswith(path + "."):
        return ""
    if path.startswith(text + "."):
        return path[len(text):]
    return None


def mentions(node: ast.AST, followed: set[str], skip: Optional[str] = None) -> bool:
    """Whether an expression holds a followed path or a part of it (a bare ``skip``, ``self``, aside)."""
    return any(relation(t, p) == "" for t in chains(node) if t != skip for p in followed)


def uses(node: ast.AST, followed: set[str], skip: Optional[str] = None) -> bool:
    """Whether a body mentions a followed path, or hands on (an argument, a value assigned) the object a
    path is inside."""
    if mentions(node, followed, skip):
        return True
    for n in ast.walk(node):
        values = list(n.args) + [k.value for k in n.keywords] if isinstance(n, ast.Call) else \
            [n.value] if isinstance(n, (ast.Assign, ast.AnnAssign, ast.Return)) and n.value is not None else []
        if any(_flow(v, followed) for v in values if chain(v) != skip):
            return True
    return False


def _flow(value: ast.AST, followed: set[str]) -> set[str]:
    """What a target given ``value`` follows: "" (the whole value) and/or the rests of paths it carries.  Only
    a chain carries a path (``s = self.settings``); any other expression must hold the path itself."""
    text = chain(value)
    if text is not None and not isinstance(value, ast.Subscript):
        rels = {r for p in followed if (r := relation(text, p)) is not None}
        return {""} if "" in rels else rels
    return {""} if mentions(value, followed) else set()


def _targets(node: ast.AST) -> Iterator[str]:
    if isinstance(node, (ast.Tuple, ast.List)):
        for e in node.elts:
            yield from _targets(e)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        text = chain(node)
        if text is not None:
            yield text


def _pairs(target: ast.AST, value: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """``a, b = x, y`` pairs ``a`` with ``x`` and ``b`` with ``y`` (nested alike); a starred element on either
    side, lengths that differ, or a value that is not written as a tuple or list keep the whole pair."""
    if (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in target.elts + value.elts)):
        for t, v in zip(target.elts, value.elts):
            yield from _pairs(t, v)
    else:
        yield target, value


def _assignments(body: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) of every assignment in a function, its nested functions included; a tuple assigned
    from a tuple, element by element (:func:`_pairs`)."""
    for n in ast.walk(body):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                yield from _pairs(t, n.value)
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and n.value is not None:
            yield n.target, n.value
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield n.target, n.iter
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            yield n.optional_vars, n.context_expr


def _calls(node: ast.AST) -> list[ast.Call]:
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))


class Package:
    """The package's modules, functions, classes and the names each module imports."""

    def __init__(self, package_dir: Path) -> None:
        self.dir = package_dir
        self.trees: dict[str, ast.Module] = {}
        self.paths: dict[str, str] = {}
        self.defs: dict[str, dict[str, Union[Func, Cls]]] = {}
        self.imports: dict[str, dict[str, tuple[str, Optional[str]]]] = {}  # name -> (module, name or None)
        self.classes: list[Cls] = []
        for p in sorted(package_dir.rglob("*.py")):
            rel = p.relative_to(package_dir)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join(parts)
            self.trees[module] = ast.parse(p.read_text(encoding="utf-8"), str(p))
            self.paths[module] = rel.as_posix()
        for module, tree in self.trees.items():
            self._read(module, tree)
        for c in self.classes:
            for b in c.node.bases:
                found = self.resolve(c.module, b.id) if isinstance(b, ast.Name) else None
                if isinstance(found, Cls):
                    c.bases.append(found)

    def _folder(self, module: str) -> list[str]:
        parts = module.split(".") if module else []
        return parts if self.paths[module].endswith("__init__.py") else parts[:-1]

    def _read(self, module: str, tree: ast.Module) -> None:
        defs: dict[str, Union[Func, Cls]] = {}
        path = self.paths[module]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = Func(module, path, node.name, node)
            elif isinstance(node, ast.ClassDef):
                c = Cls(module, node.name, node)
                for m in node.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        c.methods[m.name] = Func(module, path, f"{node.name}.{m.name}", m, c)
                defs[node.name] = c
                self.classes.append(c)
        self.defs[module] = defs
        imports: dict[str, tuple[str, Optional[str]]] = {}
        folder = self._folder(module)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                if n.level:
                    base = folder[:len(folder) - n.level + 1] + (n.module.split(".") if n.module else [])
                elif n.module and (n.module == PACKAGE or n.module.startswith(PACKAGE + ".")):
                    base = n.module.split(".")[1:]
                else:
                    continue
                src = ".".join(base)
                for a in n.names:
                    sub = ".".join(base + [a.name])
                    imports[a.asname or a.name] = (sub, None) if sub in self.trees else (src, a.name)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith(PACKAGE + ".") and a.asname:
                        imports[a.asname] = (a.name[len(PACKAGE) + 1:], None)
        self.imports[module] = imports

    def resolve(self, module: str, name: str, depth: int = 0) -> Union[Func, Cls, str, None]:
        """What ``name`` is in ``module``: a function, a class, a module's dotted name, or None."""
        if depth > 10 or module not in self.trees:
            return None
        if name in self.defs[module]:
            return self.defs[module][name]
        if name in self.imports[module]:
            src, what = self.imports[module][name]
            if what is None:
                return src
            found = self.resolve(src, what, depth + 1)
            return found if found is not None else self._unique(what)
        return None

    def _unique(self, name: str) -> Union[Func, Cls, None]:
        found = [d[name] for d in self.defs.values() if name in d]
        return found[0] if len(found) == 1 else None

    def imported_modules(self, module: str) -> set[str]:
        return {module} | {src for src, _ in self.imports[module].values()}


def _entry(found: Union[Func, Cls, str, None]) -> Optional[Func]:
    """The function a call of ``found`` runs: the function, or a class's ``__init__``, else the class."""
    if isinstance(found, Func):
        return found
    if isinstance(found, Cls):
        init = found.method("__init__")
        if init is not None:
            return init
        return Func(found.module, "", found.name, found.node, found)
    return None


@dataclass
class Way:
    name: str
    visited: list[Func] = field(default_factory=list)
    climbs: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, object]:
        files = sorted({f.path for f in self.visited})
        folders = sorted({str(Path(p).parent) for p in files})
        return {"stays": len(self.visited), "files": len(files), "folders": len(folders),
                "climbs_back_up": len(self.climbs), "folder_names": folders,
                "visited": [f"{f.path}:{f.node.lineno} {f.qualname}" for f in self.visited],
                "climbs": self.climbs}


def _rank(path: str) -> int:
    part = path.split("/")[0] if "/" in path else Path(path).stem
    return next((i for i, layer in enumerate(LAYERS) if part in layer), 0)


def _annotation_names(node: Optional[ast.AST]) -> list[str]:
    """The class names an annotation may name: ``Optional["Gate"]`` is ``Gate``, ``A | B`` both."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _annotation_names(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return []
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Subscript) and chain(node.value) in ("Optional", "typing.Optional", "Union"):
        inner = node.slice
        return [n for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner]) for n in _annotation_names(e)]
    if isinstance(node, ast.BinOp):
        return _annotation_names(node.left) + _annotation_names(node.right)
    return []


class Types:
    """What class a name or ``self.attr`` holds, where the source says it: an annotation, or ``Cls(...)``."""

    def __init__(self, pkg: Package) -> None:
        self.pkg = pkg

    def of_annotation(self, module: str, node: Optional[ast.AST]) -> Optional[Cls]:
        for name in _annotation_names(node):
            found = self.pkg.resolve(module, name) or self.pkg._unique(name)
            if isinstance(found, Cls):
                return found
        return None

    def of_value(self, module: str, value: ast.AST) -> Optional[Cls]:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            found = self.pkg.resolve(module, value.func.id) or self.pkg._unique(value.func.id)
            if isinstance(found, Cls):
                return found
        return None

    def attribute(self, cls: Cls, attr: str) -> Optional[Cls]:
        """The class of ``obj.attr`` for an ``obj`` of class ``cls``: a field, ``self.attr`` set in a method,
        or a property's return annotation."""
        for c in cls.mro():
            for s in c.node.body:
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == attr:
                    return self.of_annotation(c.module, s.annotation)
            m = c.methods.get(attr)
            if m is not None and _is_property(m.node):
                return self.of_annotation(c.module, m.node.returns)
            for m in c.methods.values():
                me = m.self_name
                for n in ast.walk(m.node):
                    if isinstance(n, ast.AnnAssign) and chain(n.target) == f"{me}.{attr}":
                        return self.of_annotation(c.module, n.annotation)
                    if isinstance(n, ast.Assign) and any(chain(t) == f"{me}.{attr}" for t in n.targets):
                        found = self.of_value(c.module, n.value)
                        if found is not None:
                            return found
        return None

    def of_chain(self, f: Func, text: str) -> Optional[Cls]:
        """The class of a chain ``a.b.c`` in function ``f``, where it can be told."""
        head, *rest = text.split(".")
        cls: Optional[Cls] = None
        if f.cls is not None and head == f.self_name:
            cls = f.cls
        elif not isinstance(f.node, ast.ClassDef):
            a = f.node.args
            for p in a.posonlyargs + a.args + a.kwonlyargs:
                if p.arg == head:
                    cls = self.of_annotation(f.module, p.annotation)
            if cls is None:
                for n in ast.walk(f.node):
                    if isinstance(n, ast.AnnAssign) and chain(n.target) == head:
                        cls = self.of_annotation(f.module, n.annotation)
                    elif isinstance(n, ast.Assign) and any(chain(t) == head for t in n.targets):
                        cls = cls or self.of_value(f.module, n.value)
        for attr in rest:
            if cls is None:
                return None
            cls = self.attribute(cls, attr)
        return cls


class Follower:
    def __init__(self, package: Package, way: Way) -> None:
        self.pkg = package
        self.way = way
        self.seen: set[str] = set()
        self.class_followed: dict[int, set[str]] = {}  # id(Cls) -> paths under self ("settings.baseline")
        self.types = Types(package)

    # -- one function ------------------------------------------------------------------------------
    def visit(self, f: Func, followed: set[str], caller: Optional[Func] = None) -> None:
        if f.path == "":  # a class without __init__, called
            f.path = self.pkg.paths[f.module]
        if f.key in self.seen:
            return
        self.seen.add(f.key)
        self.way.visited.append(f)
        if caller is not None and _rank(f.path) > _rank(caller.path):
            self.way.climbs.append(f"{caller.path} -> {f.path} ({caller.qualname} -> {f.qualname})")
        if isinstance(f.node, ast.ClassDef):
            return
        me = f.self_name
        followed = set(followed)
        if f.cls is not None and me is not None:
            followed |= {f"{me}.{p}" for p in self.class_followed.get(id(f.cls), set())}
        self._fixpoint(f, followed)
        self._class_flow(f, followed)
        for call in _calls(f.node):
            for callee, given in self._steps(f, call, followed):
                self.visit(callee, given, f)

    def flow(self, f: Func, value: ast.AST, followed: set[str]) -> set[str]:
        """:func:`_flow`, and a class built with a followed value as a field (``Cls(spec=x)``) carries
        ``.spec``, not the whole object."""
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            cls = self.pkg.resolve(f.module, value.func.id)
            if isinstance(cls, Cls):
                entry = _entry(cls)
                params = entry.params[1:] if entry and not isinstance(entry.node, ast.ClassDef) else \
                    (entry.params if entry else [])
                named = list(zip(params, value.args)) + [(k.arg, k.value) for k in value.keywords if k.arg]
                out = {f".{name}{rest}" for name, v in named for rest in self.flow(f, v, followed)}
                if any(isinstance(v, ast.Starred) for v in value.args) or len(value.args) > len(params):
                    out |= {""} if mentions(value, followed) else set()
                return out
        return _flow(value, followed)

    def _fixpoint(self, f: Func, followed: set[str]) -> None:
        pairs = list(_assignments(f.node))
        while True:
            before = len(followed)
            for target, value in pairs:
                for rest in self.flow(f, value, followed):
                    followed.update(t + rest for t in _targets(target) if (t + rest).count(".") < MAX_DOTS)
            if len(followed) == before:
                return

    def _class_flow(self, f: Func, followed: set[str]) -> None:
        """Rule 4: what this method makes followed under ``self`` is followed in its class."""
        me = f.self_name
        if f.cls is None or me is None:
            return
        mine = self.class_followed.setdefault(id(f.cls), set())
        new = {p[len(me) + 1:] for p in followed if p.startswith(me + ".")} - mine
        if _is_property(f.node) and any(isinstance(n, ast.Return) and n.value is not None
                                        and mentions(n.value, followed, me) for n in ast.walk(f.node)):
            new |= {f.node.name} - mine
        if not new:
            return
        mine |= new
        for m in f.cls.methods.values():
            if m.key not in self.seen and m.self_name and m is not f:
                paths = {f"{m.self_name}.{p}" for p in mine}
                if uses(m.node, paths, m.self_name):
                    self.visit(m, paths, f)

    # -- the steps of one call ---------------------------------------------------------------------
    def _callees(self, f: Func, call: ast.Call) -> tuple[list[Func], Optional[ast.AST]]:
        """(the functions a call may run, its receiver where it is a method's)."""
        fn = call.func
        if isinstance(fn, ast.Name):
            e = _entry(self.pkg.resolve(f.module, fn.id))
            return ([e] if e else []), None
        if not isinstance(fn, ast.Attribute):
            return [], None
        recv = fn.value
        if isinstance(recv, ast.Name):
            found = self.pkg.resolve(f.module, recv.id)
            if isinstance(found, str):  # mod.f()
                e = _entry(self.pkg.resolve(found, fn.attr))
                return ([e] if e else []), None
            if isinstance(found, Cls):  # Cls.method(...), a classmethod or a static one
                m = found.method(fn.attr)
                return ([m] if m else []), None
            if f.cls is not None and recv.id == f.self_name:
                m = f.cls.method(fn.attr)
                if m is not None:
                    return [m], recv
        if (isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "super"
                and f.cls is not None):
            ms = [b.method(fn.attr) for b in f.cls.bases]
            return [m for m in ms if m], None
        text = chain(recv)
        known = self.types.of_chain(f, text) if text is not None and not isinstance(recv, ast.Subscript) else None
        if known is not None:  # the receiver's class, where an annotation or a constructor tells it
            m = known.method(fn.attr)
            return ([m] if m else []), recv
        if fn.attr in BUILTIN_METHODS:
            return [], recv
        near = [c for c in self.pkg.classes if c.module == f.module] + [
            c for c in (self.pkg.resolve(f.module, n) for n in self.pkg.imports[f.module]) if isinstance(c, Cls)]
        ms = {m.key: m for c in near if (m := c.method(fn.attr)) is not None}
        return list(ms.values()), recv

    def _steps(self, f: Func, call: ast.Call, followed: set[str]) -> Iterator[tuple[Func, set[str]]]:
        fn = call.func
        recv_flow: set[str] = set()
        if isinstance(fn, ast.Attribute):
            recv_flow = self.flow(f, fn.value, followed)
        values = list(call.args) + [k.value for k in call.keywords]
        if not recv_flow and not any(self.flow(f, v.value if isinstance(v, ast.Starred) else v, followed)
                                     for v in values):
            return
        callees, recv = self._callees(f, call)
        for callee in callees:
            given, carried_only = self._map(f, callee, call, followed, recv_flow if recv is not None else set())
            if not given:
                continue
            if carried_only and not isinstance(callee.node, ast.ClassDef) and not uses(
                    ast.Module(body=callee.node.body, type_ignores=[]), given, callee.self_name):
                continue
            yield callee, given

    def _map(self, f: Func, callee: Func, call: ast.Call, followed: set[str],
             recv_flow: set[str]) -> tuple[set[str], bool]:
        """The paths the callee follows, and whether all of them are only carried (rule 3)."""
        params = callee.params
        offset = 0
        given: set[str] = set()
        whole = False
        if callee.self_name is not None and not isinstance(callee.node, ast.ClassDef):
            offset = 1
            if callee.node.name == "__init__":
                recv_flow = set()
            for rest in recv_flow:
                given.add(callee.self_name + rest)
                whole |= rest == ""
        positional = params[offset:]
        node = callee.node
        vararg = node.args.vararg.arg if not isinstance(node, ast.ClassDef) and node.args.vararg else None
        kwarg = node.args.kwarg.arg if not isinstance(node, ast.ClassDef) and node.args.kwarg else None
        kwonly = [] if isinstance(node, ast.ClassDef) else [a.arg for a in node.args.kwonlyargs]
        pairs: list[tuple[Optional[str], ast.AST]] = []
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                pairs.append((vararg, a.value))
            else:
                pairs.append((positional[i] if i < len(positional) else vararg, a))
        for k in call.keywords:
            if k.arg is None:
                continue
            pairs.append((k.arg if k.arg in positional or k.arg in kwonly else kwarg, k.value))
        for param, value in pairs:
            if param is None:
                continue
            for rest in self.flow(f, value, followed):
                if (param + rest).count(".") < MAX_DOTS:
                    given.add(param + rest)
                whole |= rest == ""
        return given, not whole


def parse_way(text: str) -> tuple[str, str, str]:
    text = NAMED_WAYS.get(text, text)
    path, function, param = text.rsplit(":", 2)
    return path, function, param


def _find(pkg: Package, path: str, function: str) -> Func:
    module = next((m for m, p in pkg.paths.items() if p == path), None)
    if module is None:
        raise SystemExit(f"ways.py: no file {path} in {pkg.dir}")
    name, _, method = function.partition(".")
    found = pkg.defs[module].get(name)
    if method and isinstance(found, Cls):
        found = found.methods.get(method)
    if not isinstance(found, Func):
        raise SystemExit(f"ways.py: no function {function} in {path}")
    return found


def follow(pkg: Package, way: str) -> Way:
    """Rules 1 to 5 from the start ``way`` (a named way or FILE:FUNCTION:PARAM)."""
    path, function, param = parse_way(way)
    start = _find(pkg, path, function)
    result = Way(way)
    follower = Follower(pkg, result)
    if param != "return" and not param.startswith("return."):
        follower.visit(start, {param})
        return result
    rest = param[len("return"):]
    follower.seen.add(start.key)
    result.visited.append(start)
    for module, tree in pkg.trees.items():  # each caller, from the name the result is assigned to
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            targets = {t + rest for t, v in _assignments(node) for t in _targets(t) if isinstance(v, ast.Call)
                       and _callee_is(pkg, module, v, start)}
            if targets:
                caller = _function_of(pkg, module, node)
                if caller is not None:
                    follower.visit(caller, targets, start)
    return result


def _callee_is(pkg: Package, module: str, call: ast.Call, start: Func) -> bool:
    fn = call.func
    found = pkg.resolve(module, fn.id) if isinstance(fn, ast.Name) else None
    return found is start


def _function_of(pkg: Package, module: str, node: ast.AST) -> Optional[Func]:
    for d in pkg.defs[module].values():
        if isinstance(d, Func) and d.node is node:
            return d
        if isinstance(d, Cls):
            for m in d.methods.values():
                if m.node is node:
                    return m
    return None


def line(way: Way) -> str:
    f = way.figures()
    return f"{way.name}: {f['stays']} stays in {f['files']} files over {f['folders']} folders, " \
           f"{f['climbs_back_up']} climbs back up"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ways", nargs="*", metavar="WAY", help="FILE:FUNCTION:PARAM or a named way "
                   f"({', '.join(NAMED_WAYS)}; all of them by default)")
    p.add_argument("--package", metavar="DIR", type=Path, default=DEFAULT_DIR,
                   help=f"the package's folder (default: {PACKAGE}/ beside this script's folder)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="list the functions visited, in order")
    args = p.parse_args(argv)
    pkg = Package(args.package.resolve())
    out = {}
    for w in args.ways or list(NAMED_WAYS):
        way = follow(pkg, w)
        print(line(way))
        if args.verbose:
            for text in way.figures()["visited"]:  # type: ignore[union-attr]
                print(f"  {text}")
            for text in way.climbs:
                print(f"  climbs: {text}")
        out[w] = way.figures()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

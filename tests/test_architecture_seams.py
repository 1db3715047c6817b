"""The private names that cross module boundaries are declared where they live.

A module of tritnum may use another module's underscore names only where that module
lists them in its ``_INTERNAL_API`` tuple (a seam: internal API, named in the module so a
reader sees who leans on it). Scanned statically (no imports):

- ``from .x import _name`` (``_name`` not a submodule) needs ``"_name"`` in ``x``'s list;
- ``x._name`` on a module ``x`` bound by an import needs the same;
- ``obj._name`` where ``_name`` is a method or attribute defined in a class of other
  modules only (such as ``PackedTrits._encoded``) needs ``"Class._name"`` in the list of
  a module that defines it.

Importing a private *module* (``from . import _config``) is the package's layout, not a
seam; dunder names are Python's. The Dask layer's entry points are the names of
``tritnum._dask.__all__`` that public modules call through ``_interop.dask_layer()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tritnum

PACKAGE = Path(tritnum.__file__).resolve().parent
# private attributes of other libraries' objects that share a name with one of tritnum's
FOREIGN = {("tritnum._kernels.cpu._jit", "_cache")}  # numba's Dispatcher._cache


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _parse(paths: dict[str, Path]) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8"), str(path))
            for name, path in paths.items()}


def _declared(tree: ast.Module) -> set[str]:
    """The strings of the module's ``_INTERNAL_API`` tuple (empty when it has none)."""
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "_INTERNAL_API" for t in targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple) and all(isinstance(v, str) for v in value)
            return set(value)
    return set()


def _class_members(tree: ast.Module) -> dict[str, set[str]]:
    """Private member name -> the classes of the module that define it (or set it on self)."""
    members: dict[str, set[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for name in names:
                if _private(name):
                    members.setdefault(name, set()).add(cls.name)
        for node in ast.walk(cls):  # instance attributes: self._x = ...
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                       else [])
            for t in targets:
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self" and _private(t.attr)):
                    members.setdefault(t.attr, set()).add(cls.name)
    return members


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if not level:
        return target or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def violations(paths: dict[str, Path] | None = None) -> list[str]:
    """``"module: line: what"`` for every undeclared use of another module's private name."""
    if paths is None:
        paths = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    trees = _parse(paths)
    declared = {name: _declared(tree) for name, tree in trees.items()}
    members = {name: _class_members(tree) for name, tree in trees.items()}
    found = []
    for module, tree in trees.items():
        is_package = paths[module].name == "__init__.py"
        aliases: dict[str, str] = {}  # local name -> tritnum module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, is_package, node.level, node.module)
                if not source.startswith("tritnum"):
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if _is_module(full):
                        aliases[alias.asname or alias.name] = full
                    elif _private(alias.name) and alias.name not in declared.get(source, ()):
                        found.append(f"{module}:{node.lineno}: imports {alias.name} from "
                                     f"{source}, which does not declare it in _INTERNAL_API")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tritnum") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                owner = aliases[base.id]
                if node.attr not in declared.get(owner, ()) and not _is_module(
                        f"{owner}.{node.attr}"):
                    found.append(f"{module}:{node.lineno}: uses {owner}.{node.attr}, which "
                                 f"{owner} does not declare in _INTERNAL_API")
                continue
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if node.attr in members[module] or (module, node.attr) in FOREIGN:
                continue  # a member of a class of this module (or a namesake)
            owners = {(other, cls) for other, by_name in members.items() if other != module
                      for cls in by_name.get(node.attr, ())}
            if owners and not any(f"{cls}.{node.attr}" in declared[other]
                                  for other, cls in owners):
                where = ", ".join(sorted(f"{other}.{cls}" for other, cls in owners))
                found.append(f"{module}:{node.lineno}: uses .{node.attr} of {where}, "
                             f"not declared in _INTERNAL_API there")
    return found


def test_cross_module_private_names_are_declared():
    found = violations()
    assert not found, "private names used across modules without a seam:\n" + "\n".join(found)


def test_every_declared_seam_exists():
    """A seam names something its module defines (a stale entry is an error too)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Name)}
        defined |= {n.name for n in ast.walk(tree)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        defined |= {a.asname or a.name for n in ast.walk(tree)
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        members = _class_members(tree)
        for seam in _declared(tree):
            cls, _, member = seam.rpartition(".")
            ok = cls in members.get(member, ()) if cls else seam in defined
            assert ok, f"{_module_name(path)} declares {seam!r} but does not define it"


def test_an_undeclared_import_is_caught(tmp_path):
    """The scan fails on a private name imported from a module that does not declare it."""
    pkg = tmp_path / "tritnum"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text('_INTERNAL_API = ("_shared",)\n\ndef _shared(): ...\n'
                              "def _own(): ...\nclass K:\n    def _m(self): ...\n")
    (pkg / "b.py").write_text("from .a import _shared, _own\nfrom . import a\n"
                              "a._own()\n\ndef f(k):\n    return k._m()\n")
    paths = {"tritnum": pkg / "__init__.py", "tritnum.a": pkg / "a.py", "tritnum.b": pkg / "b.py"}
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        found = violations(paths)
    finally:
        PACKAGE = saved
    assert len(found) == 3, found
    assert "imports _own from tritnum.a" in found[0]
    assert "uses tritnum.a._own" in found[1]
    assert "uses ._m of tritnum.a.K" in found[2]


def test_the_dask_layer_is_entered_by_its_declared_names():
    """``dask_layer().name`` in a public module names an entry of ``tritnum._dask.__all__``."""
    tree = ast.parse((PACKAGE / "_dask" / "__init__.py").read_text(encoding="utf-8"))
    entries = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    calls = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "dask_layer"):
                calls.add(node.attr)
    assert calls, "no public module calls into the Dask layer: is the scan stale?"
    assert calls <= set(entries), sorted(calls - set(entries))

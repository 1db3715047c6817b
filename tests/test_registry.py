"""The kernel registry and the kernels' import graph keep the architecture honest.

Every op has a kernel on every backend, all called the same way; no backend imports
another backend; public modules reach the backends only through the registry.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tritnum import _dispatch

PACKAGE = Path(__file__).resolve().parent.parent / "tritnum"
# device: its folder under tritnum/_kernels
BACKENDS = {device: module.rpartition(".")[2] for device, module in _dispatch._BACKENDS.items()}
DEVICES = tuple(BACKENDS)


@pytest.fixture(scope="module")
def registry():
    """The registry with all three backends imported (CUDA's imports without a GPU)."""
    for folder in BACKENDS.values():
        importlib.import_module(f"tritnum._kernels.{folder}")
    return dict(_dispatch._REGISTRY)


def _ops(registry):
    return sorted({op for op, _ in registry})


def _calling_convention(fn):
    """``inspect.signature`` without annotations: names, order, kinds and defaults.

    Annotations name each backend's array type (NumPy on the host, device arrays
    on CUDA), which legitimately differ.
    """
    sig = inspect.signature(fn)
    return sig.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty)
                    for p in sig.parameters.values()],
        return_annotation=inspect.Signature.empty)


def test_every_op_is_registered_on_every_backend(registry):
    missing = [(op, dev) for op in _ops(registry) for dev in DEVICES if (op, dev) not in registry]
    assert not missing, f"ops without a kernel on a backend: {missing}"


def test_every_op_has_one_signature_on_every_backend(registry):
    differ = {}
    for op in _ops(registry):
        sigs = {dev: str(_calling_convention(registry[op, dev]))
                for dev in DEVICES if (op, dev) in registry}
        if len(set(sigs.values())) > 1:
            differ[op] = sigs
    assert not differ, f"kernels of one op called differently per backend: {differ}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """``(line, modules)`` for every import in ``path``: the absolute modules it may load.

    ``from package import name`` may load ``package.name`` too: ``name`` may be a
    submodule.
    """
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield node.lineno, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            yield node.lineno, [target] + [f"{target}.{alias.name}" for alias in node.names]


def _violations(paths, rule):
    """``path:line imports module`` for each import in ``paths`` of a module ``rule`` flags."""
    found = []
    for path in paths:
        for line, modules in _imports(path):
            flagged = [m for m in modules if rule(path, m)]
            if flagged:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {flagged[-1]}")
    return found


def _backend_of(module: str) -> str | None:
    """The backend folder ``module`` lies in (or is), else None."""
    parts = module.split(".")
    if parts[:2] == ["tritnum", "_kernels"] and len(parts) > 2 and parts[2] in BACKENDS.values():
        return parts[2]
    return None


def _kernel_dir_of(module: str) -> str | None:
    """The folder or module of ``tritnum._kernels`` that ``module`` names, else None."""
    parts = module.split(".")
    if parts[:2] == ["tritnum", "_kernels"] and len(parts) > 2:
        return parts[2]
    return None


def test_backends_import_only_shared_code_and_their_own_folder():
    def foreign(path, module):
        own = path.relative_to(PACKAGE / "_kernels").parts[0]
        return _kernel_dir_of(module) not in (None, own, "shared")

    bad = _violations(sorted(p for folder in BACKENDS.values()
                             for p in (PACKAGE / "_kernels" / folder).rglob("*.py")), foreign)
    assert not bad, "a backend imports code outside shared/ and its own folder:\n" + "\n".join(bad)


def test_shared_code_imports_no_backend():
    bad = _violations(sorted((PACKAGE / "_kernels" / "shared").rglob("*.py")),
                      lambda path, module: _backend_of(module) is not None)
    assert not bad, "shared kernel code imports a backend:\n" + "\n".join(bad)


def test_public_modules_import_no_backend():
    kernels = PACKAGE / "_kernels"
    bad = _violations(sorted(p for p in PACKAGE.rglob("*.py") if kernels not in p.parents),
                      lambda path, module: _backend_of(module) is not None)
    assert not bad, ("public code imports a backend module (use tritnum._kernels.shared or "
                     "_dispatch.kernel(op, device)):\n" + "\n".join(bad))

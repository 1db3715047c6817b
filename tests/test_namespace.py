"""The public namespace: what ``__all__`` promises exists, is documented and is complete;
the ``tritnum.typing`` literals match the checks; the package's imports form no cycle."""

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

import tritnum as tn
import tritnum.typing as tt

PUBLIC = {
    "tritnum": {
        "BitLinear", "DeviceUnavailableError", "FORMATS", "FormatError", "InvalidTritsError",
        "PackedTrits", "ShapeMismatchError", "TernaryTensor", "TritnumError", "__version__",
        "cuda_available", "dequantize", "errors", "get_device", "io", "linear", "load",
        "nbytes", "pack", "quantize", "quantize_activations", "save", "set_device", "unpack",
        "use_device", "vsa", "warmup",
    },
    "tritnum.vsa": {
        "Centroid", "ItemMemory", "bind", "bundle", "bundle_sequence", "circular",
        "encode_features", "hash_table", "identity", "level", "negate", "ngrams", "permute",
        "random", "search", "similarity", "unbind",
    },
    "tritnum.io": {"QTYPES", "from_gguf_blocks", "read_gguf", "to_gguf_blocks", "write_gguf"},
    "tritnum.testing": {"packed_trits", "ternary_tensors", "trit_arrays", "trit_shapes"},
    "tritnum.typing": {"Activations", "BindRule", "Device", "Format", "GGUFQType", "HVFormat",
                       "Metric"},
    "tritnum.torch": {"BitLinear", "convert", "export"},
}


def own_doc(obj):
    """The object's own docstring: a class's, not the one it inherits."""
    return vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__


def public_module(name):
    if name == "tritnum.torch":
        pytest.importorskip("torch")
    return importlib.import_module(name)


@pytest.mark.parametrize("module", PUBLIC)
def test_all_is_the_public_list(module):
    mod = public_module(module)
    assert len(mod.__all__) == len(set(mod.__all__)), "a name listed twice"
    assert set(mod.__all__) == PUBLIC[module]
    assert (mod.__doc__ or "").strip()


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_name_exists_and_is_documented(module):
    mod = public_module(module)
    for name in mod.__all__:
        obj = getattr(mod, name)  # AttributeError for a name that is not there
        if inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
            assert (own_doc(obj) or "").strip(), f"{module}.{name} has no docstring"


def in_device(device):
    with tn.use_device(device):
        pass


A = np.ones((2, 8), np.int8)
W = tn.quantize(np.ones((2, 8)))
LITERALS = {  # each literal and the call that takes one of its values
    tt.Format: lambda v: tn.pack([1], v),
    tt.Device: lambda v: in_device(v),
    tt.Activations: lambda v: tn.linear(np.ones(8), W, activations=v),
    tt.Metric: lambda v: tn.vsa.similarity(A, A, v),
    tt.HVFormat: lambda v: tn.vsa.random(1, 8, format=v),
    tt.BindRule: lambda v: tn.vsa.bind(A, A, rule=v),
    tt.GGUFQType: lambda v: tn.io.to_gguf_blocks(np.ones(256, np.float32), v),
}


@pytest.mark.parametrize("literal", LITERALS, ids=lambda lit: repr(lit))
def test_typing_literals_are_what_the_checks_accept(literal):
    call, values = LITERALS[literal], get_args(literal)
    for value in values:
        call(value)
    listed = f"must be one of {', '.join(map(repr, values))}, got 'other'"
    with pytest.raises(ValueError, match=re.escape(listed) + "$"):
        call("other")


def test_no_import_cycles():
    # every import counts, also those inside functions: a cycle is a cycle when it runs
    root = Path(tn.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = path.name == "__init__.py"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph = {}
    for name, (path, package) in modules.items():
        here = name.split(".") if package else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps

    def reaches(start, goal, seen):
        for dep in graph[start] - seen:
            seen.add(dep)
            if dep == goal or reaches(dep, goal, seen):
                return True
        return False

    cycles = {name for name in graph if reaches(name, name, set())}
    assert not cycles, sorted(cycles)


def test_torch_is_imported_by_tritnum_torch_only():
    pytest.importorskip("torch")
    code = """
import sys
import tritnum
print(sorted(m for m in sys.modules if m.split(".")[0] == "torch" or m == "tritnum.torch"))
import tritnum.torch
print("torch" in sys.modules, sorted(m for m in sys.modules if m.split(".")[0] == "numba"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    # tritnum.torch brings torch, and still no numba (kernels compile on first use)
    assert out.stdout.split("\n")[:2] == ["[]", "True []"]

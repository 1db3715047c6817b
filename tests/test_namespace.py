"""The public namespace: what ``__all__`` promises exists, is documented and is complete;
the ``tritnum.typing`` literals match the checks; the package's imports form no cycle;
optional frameworks (dask) are imported only by their own layer, and only when used."""

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

import tritnum as tn
import tritnum.typing as tt

PUBLIC = {
    "tritnum": {
        "BitLinear", "DeviceUnavailableError", "ErrorFeedback", "FORMATS", "FormatError",
        "InvalidTritsError", "PackedTrits", "ShapeMismatchError", "Sketch", "TernaryTensor",
        "TritnumError", "__version__", "compress", "cuda_available", "decompress", "dequantize",
        "errors", "get_device", "io", "linear", "load", "nbytes", "pack", "quantize",
        "quantize_activations", "save", "set_device", "unpack", "use_device", "vsa", "warmup",
        "set_num_threads", "get_num_threads", "limit_threads",
    },
    "tritnum.vsa": {
        "Centroid", "ItemMemory", "bind", "bundle", "bundle_sequence", "circular",
        "encode_features", "hash_table", "identity", "level", "level_indices", "negate",
        "ngrams", "permute",
        "random", "search", "similarity", "unbind",
        # torchhd's structures (issue 31, item 2)
        "Factorization", "SparseDistributedMemory", "automaton", "automaton_step",
        "bind_sequence", "cleanup", "graph", "graph_neighbors", "resonator", "tree", "tree_leaf",
    },
    "tritnum.io": {"I2S_LAYOUTS", "QTYPES", "GGUFBlocks", "GGUFModel", "GGUFReport", "GGUFValue",
                   "SafetensorsFile", "TensorReport", "convert", "from_gguf_blocks",
                   "from_hf_bitnet", "hf_bitnet_to_gguf", "llama_to_gguf", "quantize_gguf",
                   "read_gguf", "read_hf_bitnet", "read_safetensors", "to_gguf_blocks",
                   "to_hf_bitnet", "write_gguf", "write_hf_bitnet", "write_safetensors"},
    "tritnum.testing": {"packed_trits", "ternary_tensors", "trit_arrays", "trit_shapes"},
    "tritnum.typing": {"Activations", "BindRule", "Device", "Estimate", "Format", "GGUFQType",
                       "HVFormat", "I2SLayout", "Metric"},
    "tritnum.torch": {"BitLinear", "CompressionState", "GradientCompression", "QuantSchedule",
                      "convert", "ddp_comm_hook", "export", "freeze", "load_exported",
                      "register_compression", "set_quant_lambda", "unfreeze"},
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
W = tn.quantize(np.ones((2, 256)))  # q8_k takes rows of whole 256-value blocks
LITERALS = {  # each literal and the call that takes one of its values
    tt.Format: lambda v: tn.pack([1], v),
    tt.Device: lambda v: in_device(v),
    tt.Activations: lambda v: tn.linear(np.ones(256), W, activations=v),
    tt.Metric: lambda v: tn.vsa.similarity(A, A, v),
    tt.HVFormat: lambda v: tn.vsa.random(1, 8, format=v),
    tt.BindRule: lambda v: tn.vsa.bind(A, A, rule=v),
    tt.GGUFQType: lambda v: tn.io.to_gguf_blocks(np.ones(256, np.float32), v),
    tt.I2SLayout: lambda v: tn.io.to_gguf_blocks(np.ones((4, 128), np.float32), "I2_S",
                                                 layout=v),
    tt.Estimate: lambda v: tn.decompress(tn.compress(np.ones(8), 2, 0), estimate=v),
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


def test_dask_is_imported_only_for_dask_input():
    # in-memory work never imports dask nor tritnum's Dask layer
    code = textwrap.dedent("""
        import sys, numpy as np, tritnum as tn
        t = tn.vsa.random(20, 64, seed=1)
        tn.vsa.search(t[:2], t, 3)
        tn.linear(np.ones((2, 64), np.float32), tn.quantize(np.ones((4, 64))))
        tn.unpack(tn.pack(t, "bitplane"))
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")
                     or m.startswith("tritnum._dask")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_only_the_dask_layer_imports_dask():
    root = Path(tn.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                importers.add(path.relative_to(root).parts[0])
    assert importers <= {"_dask", "_bench"}, importers


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

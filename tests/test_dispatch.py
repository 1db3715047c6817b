"""Device policy (DESIGN §4): defaults, context, env vars, fallbacks, lazy CUDA."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tritnum as tn
from tritnum import _dispatch


def run_python(code, **env):
    import os

    full_env = {**os.environ, **env}
    full_env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, check=False)


def test_import_touches_neither_numba_nor_cuda():
    out = run_python("""
        import sys, tritnum
        print(sorted(m for m in sys.modules
                     if m.split('.')[0] in ('numba', 'llvmlite', 'torch', 'cupy', 'dask',
                                           'safetensors')))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_set_get_and_context():
    assert tn.get_device() == "auto"
    with tn.use_device("numpy"):
        assert tn.get_device() == "numpy"
        with tn.use_device("cpu"):
            assert tn.get_device() == "cpu"
        assert tn.get_device() == "numpy"
    assert tn.get_device() == "auto"
    tn.set_device("cpu")
    try:
        assert tn.get_device() == "cpu"
    finally:
        tn.set_device("auto")
    with pytest.raises(ValueError, match="device must be one of"):
        tn.set_device("gpu")
    with pytest.raises(ValueError, match="device must be one of"):
        tn.pack([1], device="tpu")


def test_set_device_is_process_wide_and_use_device_local():
    from concurrent.futures import ThreadPoolExecutor

    tn.set_device("numpy")
    try:
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(tn.get_device).result() == "numpy"
            with tn.use_device("cpu"):
                assert tn.get_device() == "cpu"
                assert pool.submit(tn.get_device).result() == "numpy"
                tn.set_device("auto")
                assert tn.get_device() == "cpu"  # the block's override still holds
            assert tn.get_device() == "auto"
    finally:
        tn.set_device("auto")


def test_default_device_picks_the_backend(monkeypatch, backends):
    calls = []
    for dev in backends:
        real = _dispatch.kernel("pack", dev)
        monkeypatch.setitem(_dispatch._REGISTRY, ("pack", dev),
                            lambda *a, _d=dev, _r=real: calls.append(_d) or _r(*a))
    tn.pack([1, 0])
    with tn.use_device("numpy"):
        tn.pack([1, 0])
        tn.pack([1, 0], device="cpu")  # an explicit argument wins over the default
    assert calls == ["cpu", "numpy", "cpu"]


@pytest.mark.skipif(tn.cuda_available(), reason="this machine has a GPU")
def test_explicit_cuda_without_gpu_raises():
    with pytest.raises(tn.DeviceUnavailableError, match="device='cuda'"):
        tn.pack([1, 0], device="cuda")


@pytest.mark.skipif(tn.cuda_available(), reason="this machine has a GPU")
def test_cuda_default_falls_back_with_one_warning():
    out = run_python("""
        import warnings, numpy as np, tritnum as tn
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as seen:
            a = tn.pack(np.array([1, 0, -1]))
            b = tn.pack(np.array([1, 1]), "base3")
        print(tn.get_device(), len(seen), a.device)
        print(seen[0].message)
    """, TRITNUM_DEVICE="cuda")
    assert out.returncode == 0, out.stderr
    first, message = out.stdout.strip().split("\n", 1)
    assert first == "cuda 1 cpu"
    assert "TRITNUM_DEVICE=auto" in message


def test_bad_env_device_is_reported():
    out = run_python("import tritnum", TRITNUM_DEVICE="gpu")
    assert out.returncode != 0 and out.stderr.rstrip().endswith(
        "ValueError: TRITNUM_DEVICE must be one of 'auto', 'cpu', 'cuda', 'numpy', got 'gpu'")


def test_isa_can_be_forced_lower_and_is_reported():
    out = run_python("""
        from tritnum._environment import environment
        from tritnum import _isa
        from tritnum._kernels.cpu._llvm import gemv_target
        from tritnum._kernels.cpu.packing import _pack2
        env = environment()
        print(_isa.ISA, gemv_target.BLOCK_BYTES, env["simd"].split(";")[0], _isa.CACHEABLE,
              env["kernel cache"].split()[0])
    """, TRITNUM_ISA="portable")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["portable", "32", "portable", "(TRITNUM_ISA)", "False", "off"]


@pytest.mark.parametrize("value", ["avx9", "sse2"])
def test_bad_isa_is_reported_at_import(value):
    out = run_python("import tritnum", TRITNUM_ISA=value)
    assert out.returncode != 0 and out.stderr.rstrip().endswith(
        "ValueError: TRITNUM_ISA must be one of 'portable', 'avx2', 'avxvnni', 'avx512vnni', "
        f"got {value!r}")


def test_isa_levels_follow_the_features():
    from tritnum import _isa

    assert _isa.available(frozenset()) == ("portable",)
    assert _isa.available(frozenset({"avx2", "avxvnni"})) == ("portable", "avx2", "avxvnni")
    assert _isa.select(None, frozenset({"avx2"})) == "avx2"
    with pytest.raises(ValueError, match="lacks avxvnni"):
        _isa.select("avxvnni", frozenset({"avx2"}))


def test_cache_switch_is_read_once():
    out = run_python("""
        import numpy as np, tritnum as tn
        from tritnum._kernels.cpu import packing
        print(packing._pack2._cache.__class__.__name__)
    """, TRITNUM_CACHE="0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "NullCache"


@pytest.mark.slow
def test_warmup_compiles_every_cpu_kernel():
    # every numba dispatcher in the CPU backend's modules, or in their dicts, tuples and lists
    # (a family's copies, by format or size), found rather than listed; helpers with
    # inline="always" are compiled into their callers, never on their own
    out = run_python("""
        import importlib, json, pkgutil
        from numba.core.registry import CPUDispatcher
        import tritnum as tn
        import tritnum._kernels.cpu as cpu

        modules = [cpu] + [importlib.import_module(m.name)
                           for m in pkgutil.walk_packages(cpu.__path__, cpu.__name__ + ".")]
        held = lambda v: (v.values() if isinstance(v, dict) else v
                          if isinstance(v, (tuple, list)) else [v])
        kernels = {id(k): k for m in modules for v in vars(m).values() for k in held(v)
                   if isinstance(k, CPUDispatcher) and k.targetoptions.get("inline") != "always"}
        name = lambda k: f"{k.py_func.__module__}.{k.__name__}"
        before = sorted(name(k) for k in kernels.values() if k.signatures)
        seconds = tn.warmup("cpu")
        missed = sorted(name(k) for k in kernels.values() if not k.signatures)
        print(json.dumps([len(kernels), before, missed, seconds > 0]))
    """, TRITNUM_CACHE="0")
    assert out.returncode == 0, out.stderr
    found, compiled_before, missed, timed = json.loads(out.stdout)
    assert found >= 60  # packing, quantize, gguf, matmul, vsa... (100 on AVX-512 VNNI, GFNI)
    assert compiled_before == []  # finding them compiled nothing
    assert missed == [], f"tn.warmup('cpu') leaves {len(missed)} of {found} uncompiled"
    assert timed


def test_forked_child_can_use_the_thread_pool():
    out = run_python("""
        import multiprocessing as mp
        import numpy as np
        import tritnum as tn
        from tritnum._kernels.cpu import _parallel

        a = np.zeros((64, 40000), np.int8)
        assert a.nbytes > _parallel.MIN_PARALLEL_BYTES
        tn.pack(a)  # the parent's pool threads now exist

        def work(_):
            return tn.unpack(tn.pack(a)).shape

        with mp.get_context("fork").Pool(1) as pool:
            print(pool.map_async(work, [0]).get(timeout=60))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(64, 40000)]"


def test_follows_data_on_host():
    assert _dispatch.resolve_device("auto", np.zeros(3)) == "cpu"

    class FakeGpuArray:
        __cuda_array_interface__ = {}

    assert _dispatch.resolve_device("auto", FakeGpuArray()) == "cuda"

"""No public op starts numba's own threading layer (its OpenMP pool slows torch: see
``tritnum._threads.available``); the CPU kernels share work on tritnum's pool, by tritnum's
thread count and limit."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import tritnum as tn

# every public CPU op, on sizes that split work between threads, then numba's launch state:
# ``numba.np.ufunc.parallel._is_initialized`` turns True when ``_launch_threads`` runs
# (``numba.get_num_threads``, ``prange`` code, ``set_num_threads``), never before
_CHILD = """
import sys
import numpy as np
import tritnum as tn

rng = np.random.default_rng(0)
t = rng.integers(-1, 2, (256, 1000), dtype=np.int8)
for fmt in ("2bit", "base3", "bitplane"):
    assert (tn.unpack(tn.pack(t, format=fmt)) == t).all()
w = rng.standard_normal((512, 1024)).astype(np.float32)
x = rng.standard_normal((40, 1024)).astype(np.float32)
for kw in ({}, {"axis": -1}, {"group_size": 256}):
    q = tn.quantize(w, **kw)
    tn.dequantize(q)
    for act in ("float", "int8", "q8_k"):
        tn.linear(x, q, activations=act)
        tn.linear(x[:1], q, activations=act)
tn.quantize_activations(x)
for fmt in ("dense", "bitplane"):
    mem = tn.vsa.random(3000, 2000, seed=1, format=fmt)
    qs = tn.vsa.random(20, 2000, seed=2, format=fmt)
    b = tn.vsa.bind(mem[:20], qs)
    tn.vsa.unbind(b, qs)
    tn.vsa.bundle(mem[:50])
    tn.vsa.permute(qs, 3)
    for metric in ("dot", "cosine", "hamming"):
        tn.vsa.similarity(qs, mem[:20], metric=metric)
        tn.vsa.search(qs, mem, k=5, metric=metric)
        tn.vsa.search(qs[:1], mem, k=100, metric=metric)
parallel = sys.modules.get("numba.np.ufunc.parallel")
print("started" if parallel is not None and parallel._is_initialized else "not started")
"""


def test_no_public_op_starts_numbas_threading_layer():
    env = {**os.environ, "PYTHONPATH": str(Path(tn.__file__).parents[1]), "NUMBA_NUM_THREADS": "2",
           "TRITNUM_DEVICE": "cpu"}
    child = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split()[-2:] == ["not", "started"], child.stdout[-500:]


def test_the_detection_sees_numbas_layer_start():
    code = ("import sys, numba; numba.get_num_threads(); "
            "print(sys.modules['numba.np.ufunc.parallel']._is_initialized)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    assert child.stdout.strip() == "True", child.stderr[-2000:]


def test_search_follows_tritnums_thread_limit(monkeypatch):
    from tritnum import _threads
    from tritnum._kernels.cpu import vsa_search

    counts = []
    real = vsa_search.run

    def spy(kernel, tasks, *args):
        counts.append(tasks)
        return real(kernel, tasks, *args)

    monkeypatch.setattr(vsa_search, "run", spy)
    monkeypatch.setattr(_threads, "available", lambda: 8)
    mem = tn.vsa.random(4096, 640, seed=3)
    q = tn.vsa.random(1, 640, seed=4)
    want = tn.vsa.search(q, mem, k=3, device="numpy")
    with _threads.limit(1):
        got = tn.vsa.search(q, mem, k=3, device="cpu")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])
    # one thread: the memory is cut into CHUNKS_PER_THREAD parts, not 8 threads' worth
    assert counts == [vsa_search.CHUNKS_PER_THREAD]

"""A first call compiles only what it runs (issue 29 item 4): the quantizer, the thread pool.

Each test runs a fresh process (numba's signatures are per process; the disk cache
may fill them, which counts too: a kernel loaded from the cache is one the call took)
and reports which kernels gained a signature with each call.
"""

import json

import pytest
from test_dispatch import run_python

FORMATS = ("2bit", "base3", "bitplane")

QUANTIZE = """
import json
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import packing, quantize

kernels = {f"_quantize_pack_rows[{code}]": k
           for (code, float32), k in quantize._quantize_pack_rows.items() if float32}
kernels.update({name: getattr(packing, name) for name in ("_pack2", "_pack3", "_packbp")})
rng = np.random.default_rng(0)
report = []
for fmt in FORMATS:
    # 70 rows of 131: blocks of whole rows in the scratch, a last one short, odd widths
    w = rng.standard_normal((70, 131)).astype(np.float32)
    before = {name: len(k.signatures) for name, k in kernels.items()}
    got = tn.quantize(w, format=fmt, device="cpu")
    added = sorted(name for name, k in kernels.items() if len(k.signatures) > before[name])
    want = tn.quantize(w, format=fmt, device="numpy")
    report.append([added, bool(np.array_equal(got.packed.data, want.packed.data)
                               and np.array_equal(got.scales, want.scales))])
print(json.dumps(report))
""".replace("FORMATS", repr(FORMATS))


@pytest.fixture(scope="module")
def quantized():
    """``[[kernels a quantize to a format added, whether its bytes equal NumPy's], ...]``."""
    out = run_python(QUANTIZE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize(("case", "packer"), list(enumerate(("_pack2", "_pack3", "_packbp"))),
                         ids=FORMATS)
def test_a_quantize_compiles_only_its_format_s_kernel(quantized, case, packer):
    """Its own kernel for float32 weights: the packer's body is inlined, not compiled apart."""
    added, equal = quantized[case]
    assert added == [f"_quantize_pack_rows[{case}]"]
    assert equal


INT8 = """
import json
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import matmul, quantize

x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
amax, xscale = np.empty((2, 3), np.float32)
q, xl = np.empty((2, 3, 256), np.int8)
# the int8 GEMV's fused quantizer, as linear_int8_fused calls it
matmul._quantized_laid_out(x, x.view(np.uint32), amax, amax.view(np.uint32), q, xl,
                           np.empty((3, 1), np.int32), xscale)
report = [len(quantize._absmax_quantize_rows.signatures)]
w = tn.quantize(np.ones((8, 256), np.float32))
tn.linear(x[:1], w, activations="int8", device="cpu")  # a small layer's one-call route
report.append(len(quantize._absmax_quantize_rows.signatures))
tn.quantize_activations(x, device="cpu")  # the row quantizer's own call (the GEMM's)
report.append(len(quantize._absmax_quantize_rows.signatures))
print(json.dumps(report))
"""


def test_the_gemv_and_the_gemm_share_one_int8_quantizer():
    """The fused quantizers of the GEMV and of small layers call the row quantizer as a GEMM does.

    Each passed a literal 0 as the first row: numba compiled the row quantizer twice,
    for ``Literal[int](0)`` and for ``int64`` (0.2 s of a first int8 GEMM). The disk
    cache is off: a kernel loaded from it brings its callees compiled in.
    """
    out = run_python(INT8, TRITNUM_CACHE="0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [1, 1, 1]


DECODE = """
import json
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import dequantize

rng = np.random.default_rng(0)
report = []
# float GEMMs (more rows than the GEMV takes) of layers past the small layers' route:
# whole SIMD blocks (one scale a row), then groups of 100 inputs (25 bytes) and a tail
for n, size in ((256, None), (300, 100)):
    w = tn.quantize(rng.standard_normal((4100, n)).astype(np.float32), group_size=size)
    x = rng.standard_normal((20, n)).astype(np.float32)
    before = len(dequantize.decode_2bit_rows.signatures)
    got = tn.linear(x, w, device="cpu")
    want = tn.linear(x, w, device="numpy")
    report.append([len(dequantize.decode_2bit_rows.signatures) > before,
                   bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))])
print(json.dumps(report))
"""


def test_the_float_gemm_compiles_one_decoder_for_every_group_size():
    """The first float GEMM compiles the SIMD decoder; one of other groups reuses it."""
    out = run_python(DECODE)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[True, True], [False, True]]


POOL = """
import json
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import _parallel

def compiled():  # but claim and leave: compiled into the GEMV kernels that call them
    return {name: len(k.signatures) for name, k in vars(_parallel).items()
            if hasattr(k, "signatures") and len(k.signatures) and name not in ("claim", "leave")}

rng = np.random.default_rng(0)
small = rng.standard_normal((256, 256)).astype(np.float32)  # 256 KiB: on the calling thread
tn.dequantize(tn.quantize(small))
tn.quantize_activations(small)
report = [_parallel._pool is None, compiled()]
big = rng.standard_normal((1024, 512)).astype(np.float32)  # 2 MiB: on the pool's threads
assert big.nbytes >= _parallel.MIN_PARALLEL_BYTES
tn.quantize(big)
tn.quantize_activations(big)
report += [_parallel._pool is not None, compiled()]
w = tn.quantize(rng.standard_normal((2048, 2048)).astype(np.float32))  # 1 MiB of codes
_parallel.MISSES, _parallel._get_pool().alone = 1 << 30, 0  # on 2 threads, however late
tn.linear(rng.standard_normal(2048).astype(np.float32), w)  # the first native call
report += [compiled()]
print(json.dumps(report))
"""


def test_the_pool_starts_with_the_first_parallel_call_and_compiles_its_waits():
    """Small calls leave the pool unstarted and its kernels uncompiled; then two, once
    each, and the first native call a third.

    The waits of the caller and of the helpers and the clock's rate are one kernel
    (``_spin``; they were four: 0.5-1.5 s of compiling at the first parallel call),
    ``_own`` takes the pool; the helpers' wait that runs native calls, ``_idle`` (0.2 s),
    is compiled at the first of them.
    """
    out = run_python(POOL, NUMBA_NUM_THREADS="2")
    assert out.returncode == 0, out.stderr
    unstarted, before, started, after, native = json.loads(out.stdout)
    assert unstarted and before == {}
    assert started and after == {"_spin": 1, "_own": 1}
    assert native == {"_spin": 1, "_own": 1, "_idle": 1}


FAMILIES = """
import json
import numpy as np
from numba.core.event import install_recorder
import tritnum as tn
from tritnum._formats import FORMATS
from tritnum._isa import CACHEABLE
from tritnum._kernels.cpu import matmul, quantize

families = [*quantize._quantize_pack_rows.values(), *matmul._gemv_scaled.values(),
            *matmul._gemv_int8_groups.values(), *matmul._gemv_float_groups.values()]
rng = np.random.default_rng(0)
n, rows, fmt = 1024, 64, FORMATS["2bit"]
w = tn.pack(rng.integers(-1, 2, (rows, n), dtype=np.int8)).data
with install_recorder("numba:compile") as rec:
    tn.quantize(rng.standard_normal((8, 256)).astype(np.float32), format="base3")
    for size, dtype in ((32, np.int8), (128, np.int8), (32, np.float32), (None, np.int8)):
        groups = 1 if size is None else n // size
        scales = rng.uniform(0.1, 1, (rows, groups)).astype(np.float32)
        x = rng.integers(-127, 128, (1, n)).astype(dtype)
        segment = matmul._gemv_segment(fmt, n, groups)
        matmul._gemv(x, np.float32([0.5]), w, fmt, n, scales, segment)
compiled = {ev.data["dispatcher"].py_func.__qualname__ for _, ev in rec.buffer
            if ev.is_start and "dispatcher" in ev.data}
names = [k.py_func.__qualname__ for k in families]
print(json.dumps([CACHEABLE, sorted(compiled & set(names)), len(set(names)) == len(names)]))
"""


def test_kernel_families_load_from_the_disk_cache_in_a_new_process(tmp_path):
    """The quantizer's and the GEMV's copies of one kernel (a format, a dtype, a dot) are
    no closures: a second process loads them from the disk cache (closures holding
    compiled functions missed it in every process: the quantizer compiled again, 3.4 s,
    and the int8 GEMV of groups, 0.4-6 s), and each has a name of its own (its index
    file, its symbols)."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "TRITNUM_CACHE": "1"}
    first, second = run_python(FAMILIES, **env), run_python(FAMILIES, **env)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    cacheable, compiled, distinct = json.loads(first.stdout)
    if not cacheable:
        pytest.skip("a forced TRITNUM_ISA turns numba's disk cache off")
    assert distinct
    assert len(compiled) == 5  # the quantizer, three group sizes, one scale
    assert "quantize_pack_rows_base3_True" in compiled
    assert json.loads(second.stdout)[1] == []


ONCE = """
import json
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import _parallel, matmul

rng = np.random.default_rng(0)
w = tn.quantize(rng.standard_normal((2048, 2048)).astype(np.float32))  # 1 MiB of codes
x = rng.standard_normal(2048).astype(np.float32)
with tn.limit_threads(1):
    alone = tn.linear(x, w, activations="int8")
_parallel.MISSES, _parallel._get_pool().alone = 1 << 30, 0  # on 2 threads, however late
both = tn.linear(x, w, activations="int8")
native = bool(_parallel._get_pool().description[-1] != 0)  # a kernel address: a native call
print(json.dumps([len(matmul._gemv_scaled[True].signatures), native,
                  bool(np.array_equal(alone, both))]))
"""


def test_a_kernel_run_alone_and_on_two_threads_compiles_once():
    """The C functions call the kernels' compilation for read-only weights and scales, as a
    TernaryTensor's are and as a call alone passes them: one compilation, not two."""
    out = run_python(ONCE, NUMBA_NUM_THREADS="2")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [1, True, True]

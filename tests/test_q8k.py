"""``linear(x, w, activations="q8_k")`` against a plain-NumPy transcription of llama.cpp.

The oracle below transcribes ggml's C code statement by statement (ggml-quants.c
``quantize_row_q8_K_ref`` with ``nearest_int``; ggml-cpu/arch/x86/quants.c
``ggml_vec_dot_tq2_0_q8_K`` and ``ggml_vec_dot_tq1_0_q8_K``, their AVX2 branches
with each intrinsic spelled out on NumPy arrays; ggml-cpu/quants.c's generic
kernels), and runs on the TQ2_0/TQ1_0 bytes of the weights. Quants, scales and
bsums must match bit for bit and the float32 outputs exactly: ``activations="q8_k"``
as a default (GCC) x86 AVX2 build, whose compiler fuses the lane update into an FMA
(the oracle's FMA rounds the exact value once, in rational arithmetic), and
``"q8_k_unfused"`` as a build that does not; the generic kernel within the
documented bound.
"""

from fractions import Fraction

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

import tritnum as tn
from tritnum import _isa as isa
from tritnum._dispatch import call
from tritnum._formats import FORMATS
from tritnum._interop import to_host
from tritnum._kernels.cpu import q8k as cpu_q8k
from tritnum._kernels.cpu._llvm import dot_q8k, gemv_target
from tritnum._kernels.reference.q8k import linear_q8k as reference_linear_q8k
from tritnum._kernels.shared.q8k import fma32

QK_K = 256
F32 = np.float32
# each activations mode and the ggml build it reproduces (llama_cpp's ``dot``)
ORDERS = [("q8_k", "fma"), ("q8_k_unfused", "avx2")]

# ---------------------------------------------------------------- the oracle: ggml in NumPy


def nearest_int(fval):
    """ggml-quants.c: ``val = fval + 12582912.f``, its bits ``(i & 0x007fffff) - 0x00400000``."""
    val = (fval.astype(F32) + F32(12582912)).astype(F32)
    return (val.view(np.int32).astype(np.int64) & 0x007FFFFF) - 0x00400000


def quantize_row_q8_K_ref(x):
    """One float32 row to blocks ``(d, qs[256], bsums[16])``, as ggml-quants.c."""
    blocks = []
    for i in range(len(x) // QK_K):
        xb = x[QK_K * i:QK_K * (i + 1)].astype(F32)
        vmax = F32(0)
        amax = F32(0)
        for j in range(QK_K):
            ax = abs(xb[j])
            if ax > amax:
                amax = ax
                vmax = xb[j]
        if not amax:
            # ggml leaves bsums unset here; its dot multiplies them by d = 0
            blocks.append((F32(0), np.zeros(QK_K, np.int8), np.zeros(16, np.int16)))
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            iscale = F32(-127) / vmax
            v = nearest_int(iscale * xb)
        qs = np.minimum(127, v).astype(np.int8)  # (int8_t) MIN(127, v): C's wrap-around
        bsums = qs.reshape(16, 16).astype(np.int32).sum(axis=1).astype(np.int16)
        with np.errstate(divide="ignore"):
            blocks.append((F32(1) / iscale, qs, bsums))
    return blocks


def srli_epi16(b, c):
    return (b.view("<u2") >> c).astype("<u2").view(np.uint8)


def slli_epi16(b, c):
    return (b.view("<u2").astype(np.uint32) << c).astype("<u2").view(np.uint8)


def maddubs_epi16(a, b):
    """Unsigned a times signed b, adjacent pairs added with int16 saturation."""
    p = a.astype(np.int32) * b.astype(np.int32)
    return np.clip(p[0::2] + p[1::2], -32768, 32767).astype(np.int16)


def madd_epi16_ones(a):
    return a[0::2].astype(np.int32) + a[1::2].astype(np.int32)


def add16(*vs):
    return np.sum(np.stack(vs).astype(np.int32), axis=0).astype(np.int16)  # wraps as epi16


def avg_epu8(a, b):
    return ((a.astype(np.uint16) + b + 1) >> 1).astype(np.uint8)


def top2(qx):
    """``subs_epu8(qx, 1)``, then ``avg(qx, avg(qx, 0))`` and ``(srli_epi16(., 6)) & 3``."""
    qx = np.maximum(qx.astype(np.int16) - 1, 0).astype(np.uint8)
    qx = avg_epu8(qx, avg_epu8(qx, np.zeros_like(qx)))
    return srli_epi16(qx, 6) & 3


def times3_9_27_81(qx0):
    """The 8-bit products by 1, 3, 9, 27, 81 of the TQ1_0 kernel (shifts, masks, adds)."""
    qx1 = (qx0 + qx0 + qx0).astype(np.uint8)
    mask = np.uint8(0xF8)
    qx2 = ((slli_epi16(qx0, 3) & mask) + qx0).astype(np.uint8)
    qx3 = ((slli_epi16(qx1, 3) & mask) + qx1).astype(np.uint8)
    qx4 = ((slli_epi16(qx2, 3) & mask) + qx2).astype(np.uint8)
    return qx0, qx1, qx2, qx3, qx4


def hsum_float_8(v):
    res = (v[4:8] + v[0:4]).astype(F32)
    res = (res + res[[2, 3, 2, 3]]).astype(F32)
    return F32(res[0] + res[1])


def round_f32(v, zero):
    """The float32 nearest the rational ``v`` (ties to even); ``zero`` when ``v == 0``."""
    if v == 0:
        return zero
    if abs(v) >= 2**128 - 2**103:  # halfway past the largest float32 (odd): infinity
        return F32(np.inf) if v > 0 else F32(-np.inf)
    f = np.float32(np.clip(float(v), -3.4028234663852886e38, 3.4028234663852886e38))
    with np.errstate(over="ignore"):  # past the largest float32: infinity, never nearest
        near = [c for c in (np.nextafter(f, F32(-np.inf)), f, np.nextafter(f, F32(np.inf)))
                if np.isfinite(c)]
    return min(near, key=lambda c: (abs(Fraction(float(c)) - v), int(c.view(np.uint32)) & 1))


def fma_exact(a, b, c):
    """``fma(a, b, c)`` of float32 scalars: ``a * b + c`` computed exactly, rounded once."""
    a, b, c = F32(a), F32(b), F32(c)
    if not np.isfinite([a, b, c]).all():  # IEEE: infinities and NaN round nothing
        return F32(np.float64(a) * np.float64(b) + np.float64(c))
    # an exact zero is -0.0 only as (-0.0) + (-0.0): a product of sign - and c = -0.0
    zero = F32(-0.0) if (c == 0 and np.signbit(c) and a * b == 0
                         and np.signbit(a) != np.signbit(b)) else F32(0.0)
    return round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)), zero)


def dot_avx2(block_sums, wd, y, fma=False):
    """The shared tail: ``sumf = _mm256_add_ps(_mm256_mul_ps(cvtepi32_ps(madd(sumi)),
    d), sumf)`` with ``d = y.d * x.d``, then hsum; ``fma``: the multiply and add
    contracted into one FMA, as GCC does."""
    sumf = np.zeros(8, F32)
    for sumi, d_w, (d_y, _, _) in zip(block_sums, wd, y, strict=True):
        d = F32(d_y * d_w)
        lanes = madd_epi16_ones(sumi).astype(F32)
        if fma:
            sumf = np.array([fma_exact(v, d, s) for v, s in zip(lanes, sumf, strict=True)], F32)
        else:
            sumf = (lanes * d + sumf).astype(F32)
    return hsum_float_8(sumf)


def tq2_sumi(qs, y_qs, bsums):
    """``ggml_vec_dot_tq2_0_q8_K``'s AVX2 int16 lanes of one block (``qs[64]``)."""
    sumi0 = np.zeros(16, np.int16)
    sumi1 = np.zeros(16, np.int16)
    for j in (0, 32):
        qx0 = qs[j:j + 32]
        qx = [srli_epi16(qx0, 2 * n) & 3 for n in range(4)]
        p = [maddubs_epi16(qx[n], y_qs[j * 4 + 32 * n:j * 4 + 32 * n + 32]) for n in range(4)]
        sumi0 = add16(sumi0, add16(p[0], p[1]))
        sumi1 = add16(sumi1, add16(p[2], p[3]))
    return add16(add16(sumi0, sumi1), -bsums.astype(np.int32))


def tq1_sumi(qs, qh, y_qs, bsums):
    """``ggml_vec_dot_tq1_0_q8_K``'s AVX2 int16 lanes of one block (``qs[48]``, ``qh[4]``)."""
    qx = [top2(v) for v in times3_9_27_81(qs[:32])]
    p = [maddubs_epi16(qx[n], y_qs[32 * n:32 * n + 32]) for n in range(5)]
    sumi0, sumi1, sumi2 = add16(p[0], p[1]), add16(p[2], p[3]), p[4]
    q16 = times3_9_27_81(qs[32:48])
    qx5_l = np.tile(qh, 4).astype(np.uint16)  # cvtepu8_epi16(set1_epi32(qh))
    qx5_l = (qx5_l * np.repeat(np.array([1, 3, 9, 27], np.uint16), 4)).astype(np.uint16) & 0xFF
    qx5 = qx5_l.astype(np.uint8)  # packus_epi16 of values below 256
    pairs = [np.concatenate(v) for v in ((q16[0], q16[1]), (q16[2], q16[3]), (q16[4], qx5))]
    p = [maddubs_epi16(top2(v), y_qs[160 + 32 * n:192 + 32 * n]) for n, v in enumerate(pairs)]
    sumi0 = add16(sumi0, p[0])
    sumi1 = add16(sumi1, p[1])
    sumi2 = add16(sumi2, p[2])
    return add16(add16(sumi0, -bsums.astype(np.int32)), add16(sumi1, sumi2))


def vec_dot_avx2(qtype, codes, wd, y, fma=False):
    """``ggml_vec_dot_{tq2_0,tq1_0}_q8_K`` (AVX2) of one weight row's code bytes."""
    if qtype == "TQ2_0":
        sums = [tq2_sumi(qs, y_qs, bs) for qs, (_, y_qs, bs) in zip(codes, y, strict=True)]
    else:
        sums = [tq1_sumi(c[:48], c[48:52], y_qs, bs)
                for c, (_, y_qs, bs) in zip(codes, y, strict=True)]
    return dot_avx2(sums, wd, y, fma)


def vec_dot_generic(trits, wd, y):
    """ggml-cpu/quants.c's generic kernels (TQ2_0 and TQ1_0 alike): block sums in order."""
    sumf = F32(0)
    for i, (d_y, y_qs, _) in enumerate(y):
        sumi = int(trits[QK_K * i:QK_K * (i + 1)].astype(np.int64) @ y_qs.astype(np.int64))
        sumf = F32(sumf + F32(sumi) * F32(d_y * wd[i]))
    return sumf


def tq_blocks(w, qtype):
    """The TQ bytes of TernaryTensor ``w`` (codes ``(out, blocks, code bytes)``) and its
    block scales as float32 ``(out, blocks)``, the scales standing where fp16 ``d`` goes."""
    out, n = w.shape
    blocks = n // QK_K
    code_bytes = 64 if qtype == "TQ2_0" else 52
    if w.group_size is None:
        scales = np.broadcast_to(w.scales, (out, blocks))
    else:
        scales = np.repeat(w.scales.reshape(out, -1), w.group_size // QK_K, axis=1)
    unit = tn.TernaryTensor(w.packed, np.float32(1))
    codes = tn.io.to_gguf_blocks(unit, qtype).reshape(out, blocks, -1)[:, :, :code_bytes]
    return codes, scales.astype(F32)


def llama_cpp(x, w, qtype="TQ2_0", dot="fma", bias=None):
    """``y[r, o]``: the x86 build's Q8_K quantization and ``vec_dot`` of TQ2_0/TQ1_0 blocks.

    ``dot``: ``"fma"`` (AVX2, GCC's default contraction), ``"avx2"`` (AVX2, no
    contraction) or ``"generic"`` (ggml-cpu/quants.c, builds without AVX2).
    """
    rows = x.reshape(-1, x.shape[-1]).astype(F32)
    codes, scales = tq_blocks(w, qtype)
    trits = tn.unpack(w.packed).reshape(w.shape[0], -1)
    y = np.empty((rows.shape[0], w.shape[0]), F32)
    for r, row in enumerate(rows):
        yq = quantize_row_q8_K_ref(row)
        for o in range(w.shape[0]):
            if dot == "generic":
                y[r, o] = vec_dot_generic(trits[o], scales[o], yq)
            else:
                y[r, o] = vec_dot_avx2(qtype, codes[o], scales[o], yq, fma=dot == "fma")
    if bias is not None:
        y = (y + bias.astype(F32)).astype(F32)
    return y.reshape(*x.shape[:-1], w.shape[0])


# ---------------------------------------------------------------- data


def gguf_weights(out, n, rng, qtype="TQ2_0", fmt="2bit"):
    """A TernaryTensor read from TQ bytes the way llama.cpp's files hold them: fp16 ``d``
    per block (one all-zero block with d = 0 where there is room)."""
    trits = rng.integers(-1, 2, (out, n)).astype(F32)
    d = rng.uniform(0.01, 2.0, (out, n // QK_K)).astype(np.float16).astype(F32)
    if trits.size > QK_K:
        trits[0, :QK_K] = 0
    values = trits * np.repeat(d, QK_K, axis=1)
    buf = quants.quantize(values, getattr(GGMLQuantizationType, qtype))
    return tn.io.from_gguf_blocks(buf, qtype, (out, n), ternary=True, format=fmt)


def hostile_rows(m, n, rng):
    """Rows with ties, equal |max| of both signs, zero and tiny blocks, huge values."""
    x = (rng.standard_normal((m, n)) * rng.choice([1e-3, 1.0, 1e3], (m, 1))).astype(F32)
    blocks = x.reshape(m, -1, QK_K)
    row = blocks[0]
    row[0] = np.arange(QK_K) % 254 - F32(126.5)  # iscale = -1: every product a tie
    row[0, 0] = 127.0
    if row.shape[0] > 1:
        row[1, 5], row[1, 9] = 9.0, -9.0  # equal |max|: the first one is max
    if row.shape[0] > 2:
        row[2] = np.arange(-128, 128, dtype=F32) / F32(2)  # products near a half
    if m > 1:
        blocks[1, 0] = 0
        blocks[1, 0, 7] = 1e-39  # subnormal max: -127 / max overflows, every quant 0
        blocks[1, -1, 3] = F32(3e38)
        blocks[1, -1, 4] = -0.0
    if m > 2:
        blocks[2, -1] = 0
    return x


# ---------------------------------------------------------------- tests


def float32s():
    """Finite float32 values of every magnitude, and ones near 1 (whose products tie)."""
    near_one = st.integers(-2**12, 2**12).map(lambda k: F32(1 + k * 2.0**-12))
    return st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False), near_one)


@given(a=float32s(), b=float32s(), c=float32s())
def test_fma32_rounds_once(a, b, c):
    """The reference's NumPy FMA against the exact rational one (the oracle's)."""
    got = fma32(np.array([a], F32), np.array([b], F32), np.array([c], F32))[0]
    assert got.tobytes() == fma_exact(a, b, c).tobytes()


def test_fma32_where_float64_rounds_twice():
    """a * b = 1 + 2**-11 + 2**-24 is a float32 tie and c tips it up; float64 loses c."""
    a, c = F32(1 + 2**-12), F32(2.0**-80)
    assert fma_exact(a, a, c) == F32(1 + 2**-11 + 2**-23)
    assert F32(np.float64(a) * np.float64(a) + np.float64(c)) == F32(1 + 2**-11)  # twice
    assert fma32(a, a, c) == fma_exact(a, a, c)
    assert fma32(-a, a, -c) == -fma_exact(a, a, c)
    assert np.isnan(fma32(F32(np.inf), F32(0), F32(1)))
    assert fma32(F32(np.inf), F32(2), F32(1)) == np.inf


def test_oracle_nearest_int_rounds_half_to_even():
    f = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, -126.4999, 3.0], F32)
    np.testing.assert_array_equal(nearest_int(f), np.rint(f).astype(np.int64))


@pytest.mark.parametrize("m,n", [(1, 256), (3, 512), (2, 1280)])
def test_quantized_activations_are_ggml_bit_for_bit(m, n, device):
    x = hostile_rows(m, n, np.random.default_rng(n + m))
    q, d, bsums = (to_host(a) for a in call("quantize_q8k", device, x))
    assert (q.dtype, d.dtype, bsums.dtype) == (np.int8, np.float32, np.int16)
    for r in range(m):
        for i, (d_ref, qs_ref, bsums_ref) in enumerate(quantize_row_q8_K_ref(x[r])):
            assert d[r, i].tobytes() == d_ref.tobytes(), (r, i)
            np.testing.assert_array_equal(q[r, QK_K * i:QK_K * (i + 1)], qs_ref)
            np.testing.assert_array_equal(bsums[r, 16 * i:16 * (i + 1)], bsums_ref)


@pytest.mark.parametrize("m", [1, 3, cpu_q8k.TILE_ROWS + 3])  # tiles, row pairs, odd rows
@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
@pytest.mark.parametrize("mode,dot", ORDERS)
def test_llama_cpp_float_result_bit_for_bit(m, qtype, mode, dot, device):
    rng = np.random.default_rng(m)
    w = gguf_weights(5, 768, rng, qtype)
    x = hostile_rows(m, 768, rng)
    bias = rng.standard_normal(5).astype(F32)
    y = tn.linear(x, w, bias, activations=mode, device=device)
    np.testing.assert_array_equal(to_host(y), llama_cpp(x, w, qtype, dot=dot, bias=bias))


@pytest.mark.parametrize("blocks", range(1, 9))
@pytest.mark.parametrize("mode,dot", ORDERS)
def test_rows_of_one_to_eight_blocks_in_each_order(blocks, mode, dot, device):
    """One row (the VNNI GEMV), a few (the dots) and many (the GEMM's tile) of 1..8 blocks;
    the two orders differ from two blocks a row on."""
    rng = np.random.default_rng(blocks)
    n = QK_K * blocks
    w = gguf_weights(3, n, rng)
    x = rng.standard_normal((20, n)).astype(F32) * rng.uniform(0.1, 10, (20, blocks)).repeat(
        QK_K, axis=1).astype(F32)
    for rows in (x[:1], x[:3], x):
        np.testing.assert_array_equal(to_host(tn.linear(rows, w, activations=mode, device=device)),
                                      llama_cpp(rows, w, dot=dot))


def test_the_two_orders_differ():
    """The oracle's two builds (and so the two modes) differ on these rows: the tests above
    can tell them apart."""
    rng = np.random.default_rng(2)
    w = gguf_weights(3, QK_K * 4, rng)
    x = rng.standard_normal((20, QK_K * 4)).astype(F32)
    assert (llama_cpp(x, w, dot="fma") != llama_cpp(x, w, dot="avx2")).any()


@given(out=st.integers(1, 4), blocks=st.integers(1, 5), m=st.integers(1, 3),
       fmt=st.sampled_from(tn.FORMATS), order=st.sampled_from(ORDERS),
       seed=st.integers(0, 2**32 - 1))
def test_every_format_and_size_bit_for_bit(out, blocks, m, fmt, order, seed, device):
    rng = np.random.default_rng(seed)
    w = gguf_weights(out, QK_K * blocks, rng, fmt=fmt)
    x = hostile_rows(m, QK_K * blocks, rng)
    mode, dot = order
    np.testing.assert_array_equal(to_host(tn.linear(x, w, activations=mode, device=device)),
                                  llama_cpp(x, w, dot=dot))


@pytest.mark.parametrize("layout", ["tensor", "row", "group512"])
@pytest.mark.parametrize("mode,dot", ORDERS)
def test_other_scale_layouts_take_their_scale_as_each_blocks_d(layout, mode, dot, device):
    rng = np.random.default_rng(11)
    v = rng.standard_normal((6, 1024))
    kwargs = {"tensor": {}, "row": {"axis": -1}, "group512": {"group_size": 512}}[layout]
    w = tn.quantize(v, **kwargs)
    x = hostile_rows(4, 1024, rng)
    np.testing.assert_array_equal(to_host(tn.linear(x, w, activations=mode, device=device)),
                                  llama_cpp(x, w, dot=dot))


@pytest.mark.parametrize("dot", ["generic", "avx2"])
def test_other_builds_within_the_documented_bound(dot):
    """The generic C kernel and an unfused AVX2 build sum the same integers in another order
    than a GCC (FMA) build."""
    rng = np.random.default_rng(4)
    n = 2048
    w = gguf_weights(8, n, rng)
    x = rng.standard_normal((3, n)).astype(F32)
    y = tn.linear(x, w, activations="q8_k")
    other = llama_cpp(x, w, dot=dot)
    _, scales = tq_blocks(w, "TQ2_0")
    q, d, _ = call("quantize_q8k", "numpy", x)
    qabs = np.abs(q.astype(np.float64)).reshape(3, -1, QK_K).sum(-1)  # (rows, blocks)
    bound = (n // QK_K + 5) * 2.0**-23 * 3 * (np.abs(d)[:, None] * scales[None] * qabs[:, None]
                                              ).sum(-1)
    assert (np.abs(y.astype(np.float64) - other) <= bound).all()
    assert (y != other).any()  # the orders do differ: the test can tell them apart


def test_exact_at_the_largest_lane_sums(device):
    """Every quant at +-127 and every trit +-1: the int16 and int32 lanes at their largest."""
    n = QK_K * 4
    trits = np.ones((2, n), np.int8)
    trits[1] = -1
    w = tn.TernaryTensor(tn.pack(trits), np.full((2, 4), 0.5, F32), QK_K)
    x = np.full((2, n), 3.0, F32)
    x[1, 1::2] = -3.0
    y = to_host(tn.linear(x, w, activations="q8_k", device=device))
    np.testing.assert_array_equal(y, llama_cpp(x, w))
    np.testing.assert_array_equal(y, [[3.0 * n / 2, -3.0 * n / 2], [0, 0]])


@pytest.mark.parametrize("mode", ["q8_k", "q8_k_unfused"])
def test_threaded_gemv_and_gemm_match_the_reference(mode):
    """Weights large enough for the thread pool (> 1 MiB packed), one row and many."""
    rng = np.random.default_rng(3)
    w = gguf_weights(4100, 1024, rng)
    for m in (1, 40):
        x = rng.standard_normal((m, 1024)).astype(F32)
        np.testing.assert_array_equal(tn.linear(x, w, activations=mode, device="cpu"),
                                      tn.linear(x, w, activations=mode, device="numpy"))


def test_layouts_and_shapes(device):
    rng = np.random.default_rng(9)
    w = gguf_weights(3, 512, rng)
    x = rng.standard_normal((2, 3, 1024)).astype(np.float64)[..., ::2]  # 3-D, strided
    x.flags.writeable = False
    y = to_host(tn.linear(x, w, activations="q8_k", device=device))
    assert y.shape == (2, 3, 3) and y.dtype == F32
    np.testing.assert_array_equal(y, llama_cpp(x.astype(F32), w))
    one = to_host(tn.linear(x[0, 0].astype(np.float16), w, activations="q8_k", device=device))
    np.testing.assert_array_equal(one, llama_cpp(x[0, 0].astype(np.float16), w))
    bias = np.arange(3, dtype=F32)
    for empty in (np.zeros((0, 512)), np.zeros((2, 0, 512))):
        z = to_host(tn.linear(empty, w, bias, activations="q8_k", device=device))
        assert z.shape == (*empty.shape[:-1], 3)
    none = tn.TernaryTensor(tn.pack(np.zeros((3, 0), np.int8)), np.float32(1))
    np.testing.assert_array_equal(
        to_host(tn.linear(np.ones((2, 0)), none, bias, activations="q8_k", device=device)),
        [bias, bias])


class TestArguments:
    w = tn.quantize(np.ones((2, 512)), group_size=256)

    def test_inputs_not_in_whole_blocks(self):
        with pytest.raises(tn.ShapeMismatchError, match="not a multiple of 256") as e:
            tn.linear(np.ones(300), tn.quantize(np.ones((2, 300))), activations="q8_k")
        assert (e.value.expected, e.value.actual) == ("a multiple of 256", 300)

    @pytest.mark.parametrize("group_size", [1, 128, 384])
    def test_scales_finer_than_a_block(self, group_size):
        w = tn.quantize(np.ones((2, 768)), group_size=group_size)
        with pytest.raises(ValueError, match=f"got group_size={group_size}"):
            tn.linear(np.ones(768), w, activations="q8_k")
        with pytest.raises(ValueError, match="group_size"):
            tn.BitLinear(w, activations="q8_k")

    def test_int8_x_is_the_int8_path(self):
        with pytest.raises(TypeError, match="activations='q8_k' quantizes float x"):
            tn.linear(np.ones(512, np.int8), self.w, x_scale=1.0, activations="q8_k")

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_x_names_the_position(self, bad, device):
        x = np.ones((2, 512), F32)
        x[1, 300] = bad
        with pytest.raises(ValueError, match=rf"x\[1, 300\] = {bad} is not finite"):
            tn.linear(x, self.w, activations="q8_k", device=device)

    def test_beyond_float32(self):
        x = np.ones(512)
        x[7] = 1e39
        with pytest.raises(ValueError, match=r"x\[7\] = 1e\+39 overflows float32"):
            tn.linear(x, self.w, activations="q8_k")

    def test_bitlinear_runs_q8_k(self):
        layer = tn.BitLinear(self.w, activations="q8_k")
        x = np.linspace(-1, 1, 512)
        np.testing.assert_array_equal(layer(x), tn.linear(x, self.w, activations="q8_k"))


def _q8k_runner(one):
    @njit
    def run(w, xl, csum, d, scales, fused):
        return (one(w, 2, xl, 0, csum, d, scales, fused),
                dot_q8k.dot_q8k_rows(w, 2, xl, 1, csum, d, scales, fused))

    return run


# the one-row dot (AVX2 and its portable lowering) with the rows' dot, compiled once
Q8K_RUNS = {True: _q8k_runner(dot_q8k.dot_q8k), False: _q8k_runner(dot_q8k.dot_q8k_portable)}


@pytest.mark.parametrize("avx2", [True, False])
@given(blocks=st.integers(0, 4), groups=st.sampled_from([1, 2]), fused=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_simd_q8k_dots_match_the_reference(avx2, blocks, groups, fused, seed):
    """The LLVM dots (one row, and Q8K_ROWS rows at once; the portable lowering of the
    one-row dot) against the reference kernel, bit for bit."""
    if avx2 and "avx2" not in isa.available():
        pytest.skip("this CPU has no AVX2; the portable lowering is what runs here")
    run = Q8K_RUNS[avx2]
    rows = dot_q8k.Q8K_ROWS + 1
    rng = np.random.default_rng(seed)
    n = QK_K * blocks * groups
    w = tn.pack(rng.integers(-1, 2, (3, n), dtype=np.int8)).data
    q, d, bsums = call("quantize_q8k", "numpy",
                       rng.standard_normal((rows, n)).astype(F32) * F32(100))
    scales = rng.uniform(0.5, 2, (3, groups)).astype(F32)
    csum = bsums.reshape(rows, -1, 2).sum(-1, dtype=np.int32)
    single, several = run(w, cpu_q8k.laid_out(q), csum, d, scales, fused)
    ref = reference_linear_q8k(q, d, bsums, w, FORMATS["2bit"], n, scales, None, fused)[:, 2]
    assert F32(single).tobytes() == ref[0].tobytes()
    assert np.array(several, F32).tobytes() == ref[1:].tobytes()


def _vnni_runners(level):
    dot = dot_q8k.make_dot_q8k(True, 1, gemv_target.TARGETS[level].block)
    dots = dot_q8k.make_dot_q8k(True, dot_q8k.Q8K_VNNI_ROWS, gemv_target.TARGETS[level].block)

    @njit
    def run(w, xl, csum, d, scales, fused):
        return dot(w, 2, xl, 1, csum, d, scales, fused)

    @njit
    def run_rows(w, xl, csum, d, scales, fused):
        return dots(w, 1, xl, 1, csum, d, scales, fused)

    return run, run_rows


# the GEMV's VNNI dots (one weight row and Q8K_VNNI_ROWS) of each width, compiled once
VNNI_RUNS = {level: _vnni_runners(level) for level in ("avxvnni", "avx512vnni")}


@pytest.mark.parametrize("level", ["avxvnni", "avx512vnni"])
@given(blocks=st.integers(0, 4), groups=st.sampled_from([1, 2]), fused=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_vnni_q8k_dot_matches_the_reference(level, blocks, groups, fused, seed):
    """The GEMV's VNNI dots (256- and 512-bit; one weight row and Q8K_VNNI_ROWS) in their
    layout, with minus the chunk sums, bit for bit."""
    if level not in isa.available():
        pytest.skip(f"this CPU has no {level}")
    run, run_rows = VNNI_RUNS[level]
    rng = np.random.default_rng(seed)
    n = QK_K * blocks * groups
    out = 2 + dot_q8k.Q8K_VNNI_ROWS
    w = tn.pack(rng.integers(-1, 2, (out, n), dtype=np.int8)).data
    q, d, bsums = call("quantize_q8k", "numpy", rng.standard_normal((2, n)).astype(F32) * F32(50))
    scales = rng.uniform(0.5, 2, (out, groups)).astype(F32)
    xl, ncsum = cpu_q8k.laid_out_vnni(q, bsums)
    np.testing.assert_array_equal(ncsum, -bsums.reshape(2, -1, 2).sum(-1, dtype=np.int32))
    got = run(w, xl, ncsum, d, scales, fused)
    ref = reference_linear_q8k(q, d, bsums, w, FORMATS["2bit"], n, scales, None, fused)[1]
    assert F32(got).tobytes() == ref[2].tobytes()
    several = run_rows(w, xl, ncsum, d, scales, fused)
    assert np.array(several, F32).tobytes() == ref[1:1 + dot_q8k.Q8K_VNNI_ROWS].tobytes()


def test_vnni_layout_pairs_each_code_with_its_value():
    """Position ``64 n + p`` of a block holds the value of code n of byte ``Q8K_VNNI_ORDER[p]``."""
    q = np.arange(2 * QK_K, dtype=np.int64).reshape(1, -1)
    order = np.array(dot_q8k.Q8K_VNNI_ORDER)
    expected = [256 * b + 4 * order[p] + c for b in range(2) for c in range(4) for p in range(64)]
    bsums = np.zeros((1, 2 * QK_K // 16), np.int16)
    np.testing.assert_array_equal(cpu_q8k.laid_out_vnni(q, bsums)[0][0], expected)
    assert sorted(order) == list(range(64))
    assert (order.reshape(16, 4) % 8 == np.arange(16)[:, None] % 8).all()  # one ggml lane each

"""Every CUDA kernel compiles to PTX: the check the CUDA simulator cannot make.

The simulator runs kernels as Python, so it accepts code that numba's CUDA target rejects
(Python lists, NumPy calls, type errors). This compiles each kernel of
the modules in ``tritnum/_kernels/cuda/`` with NVVM for the signatures tritnum launches it with,
for ``cc=(8, 0)``, without a GPU. It runs in the main pytest process (no simulator).

Skipped only when NVVM is genuinely unavailable (no numba-cuda, no libNVVM, or the
simulator is on in this process); with ``TRITNUM_REQUIRE_PTX=1`` (CI) it fails instead.

The shared codecs are ``cuda.jit(device=True, inline="always")`` functions: inlined at
the Numba IR level, so compiling a kernel needs no driver (numba-cuda 0.30 asks the
driver for a compute capability when a kernel calls a non-inlined device function).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re

import pytest

CC = (8, 0)  # the probe's target; every kernel compiles for each of CCS
CCS = ((8, 0), (9, 0))  # A100, H100/H200
REQUIRE = os.environ.get("TRITNUM_REQUIRE_PTX", "").strip().lower() not in ("", "0", "false", "no")
KERNEL_MODULES = tuple(f"tritnum._kernels.cuda.{m}" for m in (
    "packing", "quantize", "gguf", "matmul", "gemv", "q8k", "vsa", "vsa_bundle", "vsa_similarity",
    "vsa_search", "compress", "gemm", "_launch"))


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"TRITNUM_REQUIRE_PTX=1 but PTX cannot be compiled here: {reason}",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cuda():
    """``numba.cuda`` with a working NVVM, or a skip (a failure under TRITNUM_REQUIRE_PTX=1)."""
    try:
        from numba import cuda
    except ImportError as exc:
        _unavailable(f"numba-cuda is not installed ({exc}); install the 'cuda' extra")
    try:
        from numba.cuda.core import config
    except ImportError:  # older numba-cuda
        from numba.core import config
    if getattr(config, "ENABLE_CUDASIM", 0):
        _unavailable("NUMBA_ENABLE_CUDASIM is on in this process (it replaces NVVM); "
                     "run this file in the main pytest process")
    try:
        from numba.cuda.cudadrv import nvvm
        from numba.cuda.cudadrv.error import NvvmSupportError
    except ImportError as exc:
        _unavailable(f"numba-cuda has no NVVM bindings ({exc})")
    if not nvvm.is_available():
        _unavailable("libNVVM is not available (numba-cuda[cu13] provides it)")

    def probe(a):
        a[0] = 1

    try:
        cuda.compile_ptx(probe, "void(int32[::1])", cc=CC)
    except NvvmSupportError as exc:
        _unavailable(f"libNVVM cannot be loaded: {exc}")
    return cuda


@pytest.fixture(scope="module")
def kernels(cuda):
    """The module's kernels (not device functions), by name."""
    from numba.cuda.dispatcher import CUDADispatcher

    return {
        name: obj
        for module in map(importlib.import_module, KERNEL_MODULES)
        for name, obj in vars(module).items()
        if isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")
    }


def _signatures():
    """Argument types tritnum launches each kernel with (see the wrappers in the module).

    Scalars are Python ints (typed int64); packed buffers are C-contiguous uint8 rows
    (bitplane words viewed as bytes); trits are 2-D rows of any integer dtype (uint64 is
    viewed as int64 before launch), C-contiguous when copied from the host, any layout
    ("A") when they already live on the GPU; the bad-input flag is int32[::1].
    """
    from numba import types as nt

    i64 = nt.int64
    bad = nt.Array(nt.int32, 1, "C")
    rows_u8 = nt.Array(nt.uint8, 2, "C")
    trits_out = nt.Array(nt.int8, 2, "C")
    floats = (nt.float16, nt.float32, nt.float64)
    f32 = nt.Array(nt.float32, 1, "C")
    u32 = nt.Array(nt.uint32, 1, "C")
    f32_rows = nt.Array(nt.float32, 2, "C")
    trit_inputs = [
        (dtype, layout)
        for dtype in (nt.int8, nt.int16, nt.int64)
        for layout in ("C", "A")
    ] + [(nt.int32, "C"), (nt.uint8, "C"), (nt.uint16, "A"), (nt.uint32, "A")]
    return {
        "pack_rows": [
            ((nt.Array(dtype, 2, layout), i64, rows_u8, i64, i64, bad), f"{dtype}-{layout}")
            for dtype, layout in trit_inputs
        ],
        "unpack_rows": [((rows_u8, i64, i64, i64, i64, trits_out, bad), "uint8-C")],
        "check_rows": [((rows_u8, i64, i64, i64, i64, bad), "uint8-C")],
        "_clear": [((bad,), "int32")],
        # strided GPU arrays made C-contiguous (and cast) on the GPU: _launch.contiguous
        **{f"copy_{nd}d": [((nt.Array(src, nd, "A"), nt.Array(dst, nd, "C")), f"{src}-{dst}")
                           for src, dst in ((nt.int8, nt.int8), (nt.int64, nt.int8),
                                            (nt.uint64, nt.uint64), (nt.float16, nt.float32),
                                            (nt.float64, nt.float32))]
           for nd in (1, 2, 3)},
        "dequantize_kernel": [((nt.Array(nt.int8, 2, "C"), f32_rows, f32_rows), "int8")],
        "take_2d": [((nt.Array(dt, 2, "C"), nt.Array(nt.int64, 1, "C"), nt.Array(dt, 2, "C")),
                     str(dt)) for dt in (nt.uint8, nt.uint64)],
        "convert_rows": [((rows_u8, i64, i64, rows_u8, i64, i64, i64, i64), "uint8-C")],
        "abs_sums_rows": [
            ((nt.Array(dtype, 2, layout), i64, nt.Array(nt.float64, 2, "C")), f"{dtype}-{layout}")
            for dtype in floats for layout in ("C", "A")
        ],
        "quantize_pack_rows": [
            ((nt.Array(dtype, 2, "C"), f32_rows, i64, rows_u8, i64, i64), f"{dtype}")
            for dtype in floats
        ],
        "row_amax": [((nt.Array(dtype, 2, "C"), f32), f"{dtype}") for dtype in floats],
        "quantize_act_rows": [
            ((nt.Array(dtype, 2, "C"), f32, trits_out), f"{dtype}") for dtype in floats
        ],
        "encode_tq_blocks": [((f32, u32, nt.boolean, rows_u8, f32, u32), "float32")],
        "encode_i2s_blocks": [((f32, u32, rows_u8, u32), "float32")],
        "widen_float16": [((nt.Array(nt.uint16, 1, "C"), f32, u32), "uint16")],
        "decode_tq_blocks": [((rows_u8, f32, nt.boolean, out, bad), f"uint8-{out.dtype}")
                             for out in (f32_rows, trits_out)],  # values; trits (scale 1)
        "decode_i2s_blocks": [((rows_u8, nt.float64, out, bad), f"uint8-{out.dtype}")
                              for out in (f32_rows, trits_out)],
        **_vsa_signatures(),
        **_compress_signatures(),
        "gemv_rows": _matmul_signatures(),
        "gemm_tiles": _matmul_signatures(),
        "scale_group": [((nt.Array(part, 2, "C"), f32_rows, i64, f32, f32,
                          nt.Array(nt.float64, 2, "C"), f32_rows), str(part))
                        for part in (nt.int32, nt.float32)],  # torch's int8 and float sums
        "quantize_q8k_blocks": [((f32_rows, trits_out, f32_rows, nt.Array(nt.int16, 2, "C")),
                                 "float32")],
        "q8k_lanes": [((trits_out, f32_rows, nt.Array(nt.int16, 2, "C"), rows_u8, i64, i64,
                        f32_rows, i64, f32, nt.boolean, f32_rows), "int8")],
        "quantize_act_permuted": [
            ((nt.Array(dtype, 2, layout), f32, nt.boolean, trits_out, nt.Array(nt.int32, 1, "C"),
              f32), f"{dtype}-{layout}")
            for dtype in (*floats, nt.int8) for layout in ("C", "A")
        ],
        **{name: [(sig, name)] for name, sig in _gemv_signatures().items()},
    }


def _gemv_signatures():
    """The word GEMV kernels of ``cuda/gemv.py`` as ``cuda/matmul.py`` launches them."""
    from numba import types as nt

    f32, u32, i32 = (nt.Array(t, 1, "C") for t in (nt.float32, nt.uint32, nt.int32))
    floats = (f32, u32, nt.int64, f32, f32, f32)
    int8 = (u32, i32, f32, u32, nt.int64, f32, f32, f32)
    return {"gemv_float": floats, "gemv_float_portable": floats,
            "gemv_int8": int8, "gemv_int8_portable": int8}


def _matmul_signatures():
    """``(x, xscale, w, fmt, half, n, scales, bias, y)`` as ``linear`` launches the kernels.

    x is float32 or int8; xscale and bias are float32 (empty where absent: a real GPU
    launch refuses None); the weights are uint8 rows ("2bit", "base3", or bitplane
    words viewed as bytes).
    """
    from numba import types as nt

    i64 = nt.int64
    f32_rows = nt.Array(nt.float32, 2, "C")
    f32 = nt.Array(nt.float32, 1, "C")
    rows_u8 = nt.Array(nt.uint8, 2, "C")
    return [
        ((nt.Array(x, 2, "C"), f32, rows_u8, i64, i64, i64, f32_rows, f32, f32_rows), str(x))
        for x in (nt.float32, nt.int8)
    ]


def _vsa_signatures():
    """The VSA kernels as the wrappers in ``cuda/vsa*.py`` launch them.

    int8 rows (dense) or uint64 ``(rows, 2, nw)`` words (bitplane), int64 row indices and
    shifts, uint64 generator keys, float64 scores; trits checked in any integer dtype.
    """
    from numba import types as nt

    i64, u64, bad = nt.int64, nt.uint64, nt.Array(nt.int32, 1, "C")

    def arr(dtype, ndim):
        return nt.Array(dtype, ndim, "C")

    idx, f64 = arr(i64, 1), arr(nt.float64, 1)
    kinds = {"dense": (arr(nt.int8, 2), arr(nt.int8, 3)), "planes": (arr(u64, 3), arr(u64, 4))}
    sigs = {
        "random_dense": [((i64, u64, u64, arr(nt.int8, 2)), "int8")],
        "random_planes": [((i64, i64, u64, u64, arr(u64, 3)), "uint64")],
        "mixed_dense": [((u64, u64, nt.boolean, arr(nt.int8, 2)), "int8")],
        "check_rows": [((nt.Array(dtype, 2, layout), bad), f"{dtype}-{layout}")
                       for dtype in (nt.int8, nt.int16, nt.int32, nt.int64, nt.uint8, nt.uint16,
                                     nt.uint32) for layout in ("C", "A")],
        "bundle_dense": [((arr(nt.int8, 3), arr(w, 1), arr(nt.int8, 2)), str(w))
                         for w in (nt.int32, nt.int64, nt.float64)],
        "bundle_planes": [((arr(u64, 4), i64, arr(u64, 3)), "uint64")],
        "permute_dense": [((arr(nt.int8, 2), idx, arr(nt.int8, 2)), "int8")],
        "permute_planes": [((arr(u64, 3), idx, i64, arr(u64, 3)), "uint64")],
    }
    sigs["op_dense"] = [((*(kinds["dense"][0],) * 2, idx, idx, i64, kinds["dense"][0], bad),
                         "dense")]
    sigs["op_planes"] = [((*(kinds["planes"][0],) * 2, idx, idx, i64, kinds["planes"][0]),
                          "planes")]
    sigs["class_sums_dense"] = [((arr(nt.int8, 2), idx, arr(i64, 2)), "int8")]
    sigs["class_scores_dense"] = [((arr(nt.int8, 2), arr(nt.float64, 2), f64,
                                    arr(nt.float64, 2), idx), "int8")]
    sigs["axis_first_rows"] = [((arr(t, 3), arr(t, 3)), str(t)) for t in (nt.int8, u64)]
    reals = (nt.int8, nt.int16, nt.int32, nt.int64, nt.uint8, nt.uint16, nt.uint32, nt.uint64,
             nt.float16, nt.float32, nt.float64)
    sigs["levels_of_values"] = [((arr(t, 1), f64, f64, i64, idx, bad), str(t)) for t in reals]
    sigs["checked_indices"] = [((arr(t, 1), i64, idx, bad), str(t)) for t in reals[:8]]
    for name, (rows, _) in kinds.items():
        sigs[f"pairs_{name}"] = [((rows, rows, idx, idx, i64, i64, f64), name)]
        sigs[f"search_{name}"] = [((rows, rows, i64, i64, i64, i64, i64, arr(nt.float64, 3),
                                    arr(i64, 3)), name)]
    sigs["search_merge"] = [((arr(nt.float64, 3), arr(i64, 3), i64, arr(nt.float64, 2),
                              arr(i64, 2)), "float64")]
    return sigs


def _compress_signatures():
    """The sketch kernels as ``cuda/compress.py`` launches them: float16/32/64 gradients,
    float32 values and residuals (empty where absent), a uint64 key."""
    from numba import types as nt

    f32 = nt.Array(nt.float32, 1, "C")
    grads = [(nt.Array(dtype, 1, "C"), str(dtype))
             for dtype in (nt.float16, nt.float32, nt.float64)]
    return {
        "sketch_buckets": [((x, f32, nt.uint64, f32), label) for x, label in grads],
        "expand_stripes": [((f32, nt.int64, nt.uint64, nt.boolean, x, f32, f32), label)
                           for x, label in grads],
    }


SIGNATURES = _signatures() if importlib.util.find_spec("numba") else {}
CASES = [
    pytest.param(name, sig, id=f"{name}[{label}]")
    for name, sigs in SIGNATURES.items()
    for sig, label in sigs
]


def test_every_kernel_has_signatures(kernels):
    assert set(kernels) == set(SIGNATURES), (
        f"kernels in {KERNEL_MODULES} and the signatures compiled here differ: "
        f"add signatures for {sorted(set(kernels) - set(SIGNATURES))}, "
        f"drop {sorted(set(SIGNATURES) - set(kernels))}"
    )


@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize(("name", "signature"), CASES)
def test_kernel_compiles_to_ptx(cuda, kernels, name, signature, cc):
    assert name in kernels, f"{KERNEL_MODULES} have no kernel {name!r}"
    ptx, resty = cuda.compile_ptx(kernels[name].py_func, signature, cc=cc)
    assert str(resty) == "none"
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert ".entry" in ptx


def _local_bytes(cuda, kernel, signature) -> int:
    """Bytes of local memory (the stack frame NVVM could not keep in registers) on sm_90."""
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    return sum(int(line.rsplit("[", 1)[1].split("]")[0])
               for line in ptx.splitlines() if "__local_depot" in line and ".local" in line)


def test_bit_counters_stay_in_registers(cuda, kernels):
    """The bundle's bit-sliced counters and the search tile's popcount counters unroll into
    registers: local memory holds only the search's per-thread top-k lists (indexed at run
    time, so local by necessity)."""
    from tritnum._kernels.cuda.vsa_search import KMAX, QTILE

    [(bundle_sig, _)] = SIGNATURES["bundle_planes"]
    assert _local_bytes(cuda, kernels["bundle_planes"], bundle_sig) == 0
    lists = 2 * QTILE * KMAX * 8  # best scores and indices
    for name in ("search_planes", "search_dense"):
        [(search_sig, _)] = SIGNATURES[name]
        assert _local_bytes(cuda, kernels[name], search_sig) <= lists, name


def test_half_trit_lookup_table():
    """``gemv.HALF_LUT`` through ``prmt`` (emulated): code -> the top byte of (code - 1) / 2."""
    import numpy as np

    from tritnum._kernels.cuda import gemv

    table = gemv.HALF_LUT.to_bytes(4, "little")
    for code, half in enumerate([-0.5, 0.0, 0.5]):
        bits = np.array([table[code] << 24], np.uint32)
        assert bits.view(np.float32)[0] == half


def loop_instructions(ptx):
    """Opcodes of the innermost loops: the basic blocks that branch back to their own label."""
    parts = re.split(r"\n(\$L__BB\d+_\d+):", ptx)
    loops = []
    for label, body in zip(parts[1::2], parts[2::2], strict=True):
        if re.search(rf"bra(\.uni)?\s+{re.escape(label)};", body):
            loops.append([line.split()[0] for line in map(str.strip, body.splitlines())
                          if line and not line.startswith(("//", "{", "}", "@"))])
    return loops


# per 64 trits (one 128-bit weight load per lane and step): the inner loop of each hot GEMV
HOT = {
    "gemv_int8": {"dp4a.u32.s32": 16, "ld.global.nc.v4.u32": 5},
    "gemv_float": {"fma.rn.f32": 64, "prmt.b32": 80, "ld.global.nc.v4.u32": 1,
                   "ld.global.nc.v4.f32": 16},
}
# an address: base + 4 * (32-bit index) + a constant offset (ptxas folds it into the load)
INT64_ALLOWED = {"mul.wide.u32", "add.s64"}


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)], ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_gemv_uses_32_bit_indices_and_no_local_memory(cuda, kernels, name, cc):
    """The issue's static check, from the PTX: 128-bit loads and dp4a in the inner loop,
    32-bit index arithmetic there (64-bit only to form addresses), no local memory."""
    ptx, _ = cuda.compile_ptx(kernels[name].py_func, dict(_gemv_signatures())[name], cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert ".local" not in ptx and "ld.local" not in ptx and "st.local" not in ptx
    loops = loop_instructions(ptx)
    hot = [ops for ops in loops if all(op in ops for op in HOT[name])]
    assert hot, f"no inner loop of {name} holds {sorted(HOT[name])}"
    for ops in hot:
        for op, count in HOT[name].items():
            assert ops.count(op) == count, (op, ops.count(op))
        wide = sorted({op for op in ops if re.search(r"\.[su]64\b|\.b64\b|\.f64\b", op)}
                      - INT64_ALLOWED - {"cvt.f64.f32", "add.f64"}  # the float chunk sum
                      - {"ld.param.u64"})  # an array's base from the constant bank
        assert not wide, f"64-bit operations in {name}'s inner loop: {wide}"
        assert not any(op.startswith("cvt") and op != "cvt.f64.f32" for op in ops)
        assert ops.count("mul.wide.u32") <= 2  # one 32-bit index widened per array

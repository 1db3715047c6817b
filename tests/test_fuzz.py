"""Fuzz every public op with hostile inputs: a correct result or a typed error, never a crash.

Each input is drawn in a hostile layout (negative strides, zero strides, an unaligned view at an
odd offset, read-only, a memmap, an ndarray subclass, Fortran order, big-endian) with hostile
shapes (0-size, 1-element, 3-D) and sometimes hostile values (non-trits, corrupt packed codes).
The oracle is the NumPy reference (``device="numpy"``) on ``np.ascontiguousarray`` of the same
values in native byte order: the op under test must give the same result (exactly for integer
outputs, within ``RTOL``/``ATOL`` for float outputs) or raise the same typed error
(a TritnumError, TypeError or ValueError) as the reference.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tritnum as tn

# Float results: the kernels may sum in another order than the reference.
RTOL = 1e-5
ATOL = 1e-5
TYPED = (tn.TritnumError, TypeError, ValueError)
LAYOUTS = ("plain", "reversed", "broadcast", "unaligned", "readonly", "memmap", "subclass",
           "fortran", "bigendian")
FEW = settings(max_examples=25)
# A warning is no answer either: the ops return a result or raise a typed error.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


class Sub(np.ndarray):
    """A trivial ndarray subclass."""


_TMP = tempfile.mkdtemp(prefix="tritnum-fuzz-")


def _memmap(a: np.ndarray) -> np.ndarray:
    if a.size == 0:  # np.memmap refuses an empty file
        return a
    fd, path = tempfile.mkstemp(dir=_TMP)
    os.close(fd)
    m = np.memmap(path, dtype=a.dtype, mode="w+", shape=a.shape)
    m[...] = a
    m.flush()
    del m
    r = np.memmap(path, dtype=a.dtype, mode="r", shape=a.shape)
    os.unlink(path)  # the mapping stays valid
    return r


def _unaligned(a: np.ndarray) -> np.ndarray:
    buf = np.zeros(a.nbytes + 1, np.uint8)
    out = buf[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def make_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """The values of ``a`` (or, for "broadcast", of its first entry along axis 0 repeated)
    in a hostile layout."""
    a = np.ascontiguousarray(a)
    if layout == "reversed":
        if a.ndim > 1:
            return a[::-1, ..., ::-1].copy()[::-1, ..., ::-1]
        return a[::-1].copy()[::-1]
    if layout == "broadcast":
        return np.broadcast_to(a[:1], a.shape) if a.shape[0] else a
    if layout == "unaligned":
        return _unaligned(a)
    if layout == "readonly":
        a.flags.writeable = False
        return a
    if layout == "memmap":
        return _memmap(a)
    if layout == "subclass":
        return a.view(Sub)
    if layout == "fortran":
        return np.asfortranarray(a)
    if layout == "bigendian":
        return a.astype(a.dtype.newbyteorder(">"))
    return a


def native(a: Any) -> Any:
    """The oracle's input: the same values, C-contiguous, native byte order, a plain ndarray."""
    if not isinstance(a, np.ndarray):
        return a
    a = np.asarray(a)
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))


@st.composite
def hostile(draw: st.DrawFn, base: np.ndarray) -> np.ndarray:
    return make_layout(base, draw(st.sampled_from(LAYOUTS)))


def shapes(min_dims: int = 1, max_dims: int = 3, max_side: int = 20,
           min_side: int = 0) -> st.SearchStrategy[tuple[int, ...]]:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def outcome(f: Callable[[], Any]) -> Any:
    """What ``f()`` returns, or the typed error it raises (any other exception propagates)."""
    try:
        return f()
    except TYPED as e:
        return e


def same(got: Any, want: Any, *, exact: bool = True) -> None:
    if isinstance(want, BaseException):
        assert isinstance(got, type(want)), f"{got!r} is not a {type(want).__name__}: {want}"
        return
    assert not isinstance(got, BaseException), f"raised {got!r}; the reference returned"
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w, exact=exact)
        return
    if isinstance(want, tn.PackedTrits):
        assert isinstance(got, tn.PackedTrits)
        assert got.shape == want.shape and got.format == want.format
        np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data))
        return
    if isinstance(want, tn.TernaryTensor):
        assert isinstance(got, tn.TernaryTensor)
        same(got.packed, want.packed)
        same(got.scales, want.scales, exact=exact)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                  want.shape, want.dtype)
    if exact or want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def check(f: Callable[..., Any], args: tuple[Any, ...], device: str, *,
          exact: bool = True, **kwargs: Any) -> Any:
    """``f(*args, device=device)`` against ``f(*native(args), device="numpy")``."""
    want = outcome(lambda: f(*[native(a) for a in args], device="numpy", **kwargs))
    got = outcome(lambda: f(*args, device=device, **kwargs))
    same(got, want, exact=exact)
    return got


TRIT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "bool", "float32", "float64")


@st.composite
def trit_inputs(draw: st.DrawFn, max_side: int = 20, invalid: bool = True) -> np.ndarray:
    """Trits in a hostile dtype and layout; sometimes with a value that is not a trit."""
    dtype = draw(st.sampled_from(TRIT_DTYPES if invalid else ("int8",)))
    shape = draw(shapes(max_side=max_side))
    a = draw(hnp.arrays(np.int8, shape, elements=st.sampled_from([-1, 0, 1])))
    if invalid and a.size and draw(st.integers(0, 4)) == 0:
        a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([2, -2, 3, 127, -128]))
    if dtype == "bool":
        a = a != 0
    return draw(hostile(a.astype(dtype)))


# -- pack / unpack / PackedTrits / .to ------------------------------------------------------

@given(data=st.data())
def test_pack_unpack(device, data):
    x = data.draw(trit_inputs())
    fmt = data.draw(st.sampled_from(tn.FORMATS))
    p = check(tn.pack, (x, fmt), device)
    if isinstance(p, tn.PackedTrits):
        t = check(tn.unpack, (p,), device)
        np.testing.assert_array_equal(t, native(x).astype(np.int8))  # plain NumPy: the inverse


def _packed_buffer(fmt: str, shape: tuple[int, ...], raw: bytes, layout: str) -> np.ndarray:
    n = shape[-1]
    if fmt == "bitplane":
        dshape, dtype = (*shape[:-1], 2, -(-n // 64)), np.dtype(np.uint64)
    else:
        dshape, dtype = (*shape[:-1], -(-n // (4 if fmt == "2bit" else 5))), np.dtype(np.uint8)
    count = int(np.prod(dshape)) * dtype.itemsize
    buf = np.frombuffer((raw * (count // max(len(raw), 1) + 1))[:count], np.uint8)
    return make_layout(buf.view(dtype).reshape(dshape), layout)


@given(data=st.data())
def test_packed_trits_corrupt_codes(device, data):
    fmt = data.draw(st.sampled_from(tn.FORMATS))
    shape = data.draw(shapes(max_side=70 if fmt == "bitplane" else 20))
    raw = data.draw(st.binary(min_size=1, max_size=64))
    if data.draw(st.booleans()):  # mostly valid codes: one corrupt byte at most
        ref = tn.pack(np.zeros(shape, np.int8), fmt, device="numpy")
        raw = np.asarray(ref.data).tobytes() or raw
        if data.draw(st.booleans()) and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:]
    d = _packed_buffer(fmt, shape, raw, data.draw(st.sampled_from(LAYOUTS)))
    got = outcome(lambda: tn.PackedTrits(d, shape, fmt))
    want = outcome(lambda: tn.PackedTrits(native(d), shape, fmt))
    if isinstance(want, BaseException):
        same(got, want)
        return
    assert isinstance(got, tn.PackedTrits)
    same(outcome(lambda: tn.unpack(got, device=device)),
         outcome(lambda: tn.unpack(want, device="numpy")))
    to = data.draw(st.sampled_from(tn.FORMATS))
    same(outcome(lambda: got.to(to, device=device)), outcome(lambda: want.to(to, device="numpy")))


@settings(max_examples=20)
@given(data=st.data())
def test_packed_trits_wrong_buffers(data):
    """Wrong dtypes, sizes and shapes of the buffer: a typed error, never a crash."""
    fmt = data.draw(st.sampled_from((*tn.FORMATS, "3bit")))
    dtype = data.draw(st.sampled_from(("uint8", "uint64", "int8", "float32", ">u8", "uint16")))
    dshape = data.draw(shapes(max_side=6))
    shape = data.draw(st.one_of(shapes(max_side=30), st.just(()),
                                st.tuples(st.integers(-3, 3))))
    d = make_layout(np.zeros(dshape, dtype), data.draw(st.sampled_from(LAYOUTS)))
    p = outcome(lambda: tn.PackedTrits(d, shape, fmt))
    if isinstance(p, tn.PackedTrits):
        same(outcome(lambda: tn.unpack(p, device="cpu")), outcome(lambda: tn.unpack(p,
                                                                                device="numpy")))


# -- quantize / quantize_activations / linear ------------------------------------------------

FLOATS = ("float16", "float32", "float64")


@st.composite
def float_inputs(draw: st.DrawFn, shape: Any = None, dtypes: tuple[str, ...] = FLOATS,
                 nonfinite: bool = True, max_side: int = 20) -> np.ndarray:
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes(max_side=max_side) if shape is None else st.just(shape))
    # values the drawn dtype holds, at its full precision; float64 until the cast, so that a
    # 1e300 below overflows to infinity in float16/float32
    width = 8 * np.dtype(dtype).itemsize
    a = draw(hnp.arrays(np.float64, shape, elements=st.floats(-4, 4, width=width)))
    if nonfinite and a.size and draw(st.integers(0, 9)) == 0:
        a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([np.nan, np.inf,
                                                                         -np.inf, 1e300]))
    with np.errstate(over="ignore"):
        return draw(hostile(a.astype(dtype)))


def _scale_mode(data: st.DataObject, n: int) -> dict[str, Any]:
    mode = data.draw(st.sampled_from(["tensor", "row", "group", "bad-group", "bad-axis"]))
    if mode == "row":
        return {"axis": -1}
    if mode == "group":
        return {"group_size": data.draw(st.sampled_from([g for g in range(1, n + 1)
                                                         if n % g == 0] or [1]))}
    if mode == "bad-group":
        return {"group_size": data.draw(st.sampled_from([0, -1, n + 1, 3]))}
    if mode == "bad-axis":
        return {"axis": data.draw(st.sampled_from([0, 1, -2, 5]))}
    return {}


@given(data=st.data())
def test_quantize(device, data):
    w = data.draw(float_inputs())
    kw = _scale_mode(data, w.shape[-1])
    fmt = data.draw(st.sampled_from(tn.FORMATS))
    check(tn.quantize, (w,), device, format=fmt, **kw)


@given(data=st.data())
def test_quantize_activations(device, data):
    x = data.draw(float_inputs())
    check(tn.quantize_activations, (x,), device)


@settings(max_examples=40)
@given(data=st.data())
def test_linear(device, data):
    out_f = data.draw(st.integers(0, 9))
    in_f = data.draw(st.integers(0, 40))
    lead = data.draw(st.sampled_from([(), (1,), (3,), (2, 3), (0,)]))
    x = data.draw(float_inputs((*lead, in_f), dtypes=("float32", "float64", "float16"),
                               nonfinite=data.draw(st.integers(0, 5)) == 0))
    if data.draw(st.integers(0, 7)) == 0:  # hostile dtypes: a TypeError or a result
        finite = np.where(np.isfinite(native(x)), native(x), 0)
        with np.errstate(invalid="ignore", over="ignore"):  # 1e300 as int8: any value will do
            x = make_layout(finite.astype(data.draw(st.sampled_from(
                ("int8", "int32", "bool", "complex64", "uint8", ">f8")))), "plain")
    w_float = data.draw(hnp.arrays(np.float32, (out_f, in_f), elements=st.floats(-2, 2,
                                                                                 width=32)))
    w = tn.quantize(w_float, axis=-1 if in_f and data.draw(st.booleans()) else None,
                    format=data.draw(st.sampled_from(tn.FORMATS)), device="numpy")
    bias = None
    if data.draw(st.booleans()):
        bias = data.draw(float_inputs((out_f,), dtypes=("float32", "float64"),
                                      nonfinite=False))
    acts = data.draw(st.sampled_from(["float", "int8"]))
    got = check(tn.linear, (x, w, bias), device, exact=False, activations=acts)
    with np.errstate(over="ignore"):  # the float path computes in float32 (documented)
        x32 = native(x).astype(np.float32) if native(x).dtype.kind == "f" else None
    if (acts == "float" and not isinstance(got, BaseException) and x32 is not None
            and np.isfinite(x32).all()):
        want = x32.astype(np.float64) @ tn.dequantize(w).astype(np.float64).T  # plain NumPy
        if bias is not None:
            want = want + native(bias)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)


# -- vsa -------------------------------------------------------------------------------------

@st.composite
def hypervectors(draw: st.DrawFn, shape: tuple[int, ...], packed: bool) -> Any:
    """Dense trits (int8 mostly, sometimes another dtype or a non-trit) in a hostile layout,
    or "bitplane" PackedTrits."""
    a = draw(hnp.arrays(np.int8, shape, elements=st.sampled_from([-1, 0, 1])))
    if packed:
        return tn.pack(a, "bitplane", device="numpy")
    if draw(st.integers(0, 7)) == 0:
        if a.size and draw(st.booleans()):
            a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([2, -2, 127]))
        a = a.astype(draw(st.sampled_from(TRIT_DTYPES)))
    return draw(hostile(a))


def _pair_shapes(data: st.DataObject) -> tuple[tuple[int, ...], tuple[int, ...]]:
    d = data.draw(st.integers(0, 140))
    a = data.draw(st.sampled_from([(), (1,), (3,), (2, 3), (0,)]))
    b = data.draw(st.sampled_from([a, (1,) * len(a), ()]))
    return (*a, d), (*b, d)


@given(data=st.data())
def test_bind_unbind(device, data):
    packed = data.draw(st.booleans())
    sa, sb = _pair_shapes(data)
    a, b = data.draw(hypervectors(sa, packed)), data.draw(hypervectors(sb, packed))
    rule = data.draw(st.sampled_from(["mul", "mod3"]))
    c = check(tn.vsa.bind, (a, b), device, rule=rule)
    if not isinstance(c, BaseException):
        check(tn.vsa.unbind, (c, b), device, rule=rule)


@given(data=st.data())
def test_bundle(device, data):
    packed = data.draw(st.booleans())
    shape = data.draw(shapes(max_side=20 if not packed else 70))
    vs = data.draw(hypervectors(shape, packed))
    axis = 0 if packed else data.draw(st.integers(-len(shape), len(shape) - 1))
    weights = None
    if data.draw(st.booleans()) and shape:
        weights = data.draw(float_inputs((shape[axis],), dtypes=("float32", "float64"),
                                         nonfinite=True))
    check(tn.vsa.bundle, (vs,), device, axis=axis, weights=weights)


@given(data=st.data())
def test_permute(device, data):
    packed = data.draw(st.booleans())
    v = data.draw(hypervectors(data.draw(shapes(min_dims=2 if data.draw(st.booleans()) else 1,
                                                max_side=70)), packed))
    shifts: Any = data.draw(st.integers(-200, 200))
    if len(v.shape) > 1 and data.draw(st.integers(0, 2)):  # one shift per row, hostile
        shifts = data.draw(hostile(data.draw(hnp.arrays(
            data.draw(st.sampled_from(("int64", "int8", ">i4", "float64"))),
            v.shape[:-1], elements=st.integers(-100, 100)))))
    check(tn.vsa.permute, (v, shifts), device)


@given(data=st.data())
def test_similarity(device, data):
    packed = data.draw(st.booleans())
    sa, sb = _pair_shapes(data)
    a, b = data.draw(hypervectors(sa, packed)), data.draw(hypervectors(sb, packed))
    metric = data.draw(st.sampled_from(["dot", "cosine", "hamming"]))
    check(tn.vsa.similarity, (a, b), device, exact=metric == "dot", metric=metric)


@given(data=st.data())
def test_search(device, data):
    packed = data.draw(st.booleans())
    d = data.draw(st.integers(0, 140))
    q = data.draw(hypervectors((*data.draw(st.sampled_from([(), (1,), (4,), (2, 3)])), d),
                               packed))
    m = data.draw(hypervectors((data.draw(st.integers(0, 12)), d), packed))
    k = data.draw(st.integers(-1, 14))
    metric = data.draw(st.sampled_from(["dot", "cosine", "hamming"]))
    check(tn.vsa.search, (q, m), device, exact=metric == "dot", k=k, metric=metric)


# -- GGUF blocks ------------------------------------------------------------------------------

QTYPES = ("TQ2_0", "TQ1_0", "I2_S")
BLOCK_BYTES = {"TQ2_0": 66, "TQ1_0": 54}


@FEW
@given(data=st.data())
def test_to_gguf_blocks(device, data):
    qtype = data.draw(st.sampled_from(QTYPES))
    lead = data.draw(st.sampled_from([(), (1,), (2,), (2, 1)]))
    n = data.draw(st.sampled_from([0, 128, 256, 512, 100]))
    x = data.draw(float_inputs((*lead, n), dtypes=("float32", "float64", "float16")))
    check(tn.io.to_gguf_blocks, (x, qtype), device)


@FEW
@given(data=st.data())
def test_from_gguf_blocks_corrupt(device, data):
    qtype = data.draw(st.sampled_from(QTYPES))
    lead = data.draw(st.sampled_from([(), (1,), (2,)]))
    n = data.draw(st.sampled_from([0, 128, 256, 512]))
    shape = (*lead, n)
    size = int(np.prod(shape))
    if qtype == "I2_S":
        nbytes = size // 4 + 32
    else:
        nbytes = int(np.prod(lead)) * (n // 256) * BLOCK_BYTES[qtype]
    nbytes += data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    raw = data.draw(st.binary(min_size=1, max_size=64))
    buf = np.frombuffer((raw * (max(nbytes, 0) // len(raw) + 1))[:max(nbytes, 0)], np.uint8)
    if qtype != "I2_S" and data.draw(st.booleans()):  # finite fp16 scales, corrupt codes
        nb = BLOCK_BYTES[qtype]
        if nbytes % nb == 0 and nbytes:
            b = buf.copy().reshape(-1, nb)
            b[:, -2:] = np.full((len(b), 1), 0.5, np.float16).view(np.uint8)
            buf = b.ravel()
    buf = make_layout(buf, data.draw(st.sampled_from(LAYOUTS)))
    ternary = data.draw(st.booleans())
    fmt = data.draw(st.sampled_from(tn.FORMATS))
    with warnings.catch_warnings():  # NaN/infinite scales decode to NaN without a warning
        warnings.simplefilter("error")
        got = check(tn.io.from_gguf_blocks, (buf, qtype, shape), device, ternary=ternary,
                    format=fmt)
        if not ternary and data.draw(st.booleans()):  # a hostile out=: a result or TypeError
            out = make_layout(np.zeros(shape, data.draw(st.sampled_from(
                ("float32", "float64", ">f4")))), data.draw(st.sampled_from(LAYOUTS)))
            out = out.copy() if out.flags.writeable and out.base is None else out
            res = outcome(lambda: tn.io.from_gguf_blocks(buf, qtype, shape, out=out,
                                                         device=device))
            if isinstance(got, BaseException):
                assert isinstance(res, tn.TritnumError | TypeError | ValueError)
            elif not isinstance(res, BaseException):
                assert res is out
                same(np.asarray(res), got)
    if not ternary and not isinstance(got, BaseException) and qtype != "I2_S" and size:
        from gguf import quants

        with np.errstate(all="ignore"):
            want = quants.dequantize(native(buf).reshape(*lead, -1),
                                     quants.GGMLQuantizationType[qtype]).reshape(shape)
        np.testing.assert_array_equal(got, want)


def test_to_gguf_blocks_nan_raises_value_error_under_warnings_as_errors():
    """Regression: the NumPy reference cast NaN codes to int8 before the finiteness check, so
    with warnings as errors a RuntimeWarning escaped instead of the ValueError."""
    x = np.zeros(256, np.float32)
    x[3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for qtype in QTYPES:
            with pytest.raises(ValueError, match=r"x\[3\] = nan is not finite"):
                tn.io.to_gguf_blocks(x, qtype, device="numpy")


@pytest.mark.parametrize("qtype", QTYPES)
def test_to_gguf_blocks_names_a_value_beyond_float32(qtype, device):
    """Regression: a finite float64 beyond float32 was reported as "x[..] = inf is not
    finite" (after a RuntimeWarning from the cast, which escaped under warnings as errors)."""
    x = np.zeros((2, 256))
    x[1, 5] = -1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"x\[1, 5\] = -1e\+300 overflows float32"):
            tn.io.to_gguf_blocks(x, qtype, device=device)


def test_linear_reference_propagates_infinity_without_a_warning(device):
    """Regression: on the float path NaN and infinity in x propagate (documented); the NumPy
    reference also warned "invalid value encountered in matmul" (an error under warnings as
    errors) where the CPU kernels return quietly. Every backend returns quietly."""
    w = tn.quantize(np.array([[1.0, 0.0, -1.0], [0.0, 0.0, 1.0]]), device="numpy")
    x = np.array([[np.inf, 1.0, 2.0], [1.0, 2.0, 3.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tn.linear(x, w, np.ones(2, np.float32), device=device)
    np.testing.assert_array_equal(got[1], tn.dequantize(w, device="numpy") @ x[1] + 1)
    assert np.isinf(got[0, 0]) and np.isnan(got[0, 1])  # inf - 2 and 0 * inf
    # and a float64 beyond float32 becomes infinite (the float path computes in float32)
    x = np.array([[1e300, 1.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(tn.linear(x, w, device=device), [[np.inf, np.nan]])


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
def test_from_gguf_blocks_nan_scale_decodes_without_a_warning(qtype, device):
    """Regression: the NumPy reference warned "invalid value encountered in multiply" on a
    NaN fp16 scale (bytes 0x7c 0x7c), where the CPU kernels return NaN quietly."""
    buf = np.full(BLOCK_BYTES[qtype], 0x7C, np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(tn.io.from_gguf_blocks(buf, qtype, (256,), device=device)).all()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_is_exercised(layout):
    """Each hostile layout keeps the values and has the property it is named after."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    h = make_layout(a, layout)
    want = np.broadcast_to(a[:1], a.shape) if layout == "broadcast" else a
    np.testing.assert_array_equal(h, want)
    flag = {"reversed": h.strides[-1] < 0, "broadcast": 0 in h.strides,
            "unaligned": not h.flags.aligned, "readonly": not h.flags.writeable,
            "memmap": isinstance(h, np.memmap), "subclass": type(h) is Sub,
            "fortran": h.flags.f_contiguous and not h.flags.c_contiguous,
            "bigendian": h.dtype.byteorder == ">", "plain": True}[layout]
    assert flag

"""Ternary matmul on packed weights: ``linear``, ``x @ w.T`` and the ``BitLinear`` layer.

``y = x @ dequantize(w).T + bias`` is computed from the packed trits, never from
a dense float copy of ``w``: one row of activations (GEMV) reads the packed bytes
once; many rows (GEMM) decode tiles of weight rows once per call and multiply
them with BLAS. The activations are used as floats, or quantized first as
bitnet.cpp does (``"int8"``) or as llama.cpp does (``"q8_k"``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._dispatch import call, host_cpu, implements, kernel, place, resolve_device
from ._interop import (
    as_rows,
    contiguous,
    copy_into,
    dask_layer,
    is_contiguous,
    is_cuda_array,
    is_dask,
    native,
    origin,
    to_host,
)
from ._kernels.shared.q8k import QK_K
from ._validate import choice, native_order
from .errors import ShapeMismatchError
from .packing import ensure_valid
from .quantize import (
    TernaryTensor,
    TransposedTernaryTensor,
    _raise_not_finite,
    quantize,
)
from .typing import Activations, Device, Format

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# the Dask layer's linear (_dask/matmul.py).
_INTERNAL_API = ("_vector",)

__all__ = ["BitLinear", "linear"]

ACTIVATIONS = ("float", "int8", "q8_k", "q8_k_unfused")
Q8K_MODES = ("q8_k", "q8_k_unfused")  # llama.cpp's Q8_K path: lane updates fused (FMA) or not


def _weights(w: Any) -> TernaryTensor:
    if isinstance(w, TransposedTernaryTensor):
        raise TypeError("linear takes the (out, in) TernaryTensor w itself, not w.T "
                        "(x @ w.T is the same as linear(x, w))")
    if not isinstance(w, TernaryTensor):
        raise TypeError(f"w must be a tn.TernaryTensor (from tn.quantize), got {type(w).__name__}")
    if w.ndim != 2:
        raise ShapeMismatchError(f"w must be 2-D (out, in), got shape {w.shape}",
                                 expected="ndim == 2", actual=w.shape)
    return w


def _q8k_blocks(w: TernaryTensor) -> None:
    """Refuse weights whose inputs or scales do not fall into whole Q8_K blocks of 256."""
    n = w.shape[1]
    if n % QK_K:
        raise ShapeMismatchError(
            f"activations='q8_k' quantizes x in blocks of {QK_K} values, as llama.cpp does "
            f"before a TQ1_0/TQ2_0 matmul: w's {n} inputs are not a multiple of {QK_K} "
            "(activations='int8' takes any size)", expected=f"a multiple of {QK_K}", actual=n)
    if w.group_size is not None and w.group_size % QK_K:
        raise ValueError(
            f"activations='q8_k' needs one weight scale per {QK_K}-input block or coarser "
            f"(per tensor, per row, or a group_size that is a multiple of {QK_K}), got "
            f"group_size={w.group_size} (activations='int8' takes any group size)")


def _activations(x: Any, x_scale: Any, activations: str, n: int) -> tuple[Any, str]:
    """``x`` checked, and the path it takes: ``"float"``, ``"int8"`` or one of ``Q8K_MODES``."""
    choice(activations, "activations", ACTIVATIONS)
    a = native(x)
    if not (is_cuda_array(a) or is_dask(a)):
        a = native_order(np.asarray(a))
    kind = a.dtype.kind
    if a.dtype == np.int8 and x_scale is not None:
        if activations in Q8K_MODES:
            raise TypeError(f"activations={activations!r} quantizes float x per 256-value "
                            "block itself; an int8 x with x_scale is per-row int8 "
                            "(activations='int8')")
        mode = "int8"
    elif a.dtype == np.int8:
        raise TypeError("an int8 x is quantized activations: pass its scale as x_scale "
                        "(x ≈ x_int8 * x_scale), or pass float activations")
    elif kind == "f":
        if x_scale is not None:
            raise TypeError("x_scale goes with int8 activations; float x needs none")
        mode = activations
    else:
        raise TypeError(f"x must be a float16/32/64 array (or int8 with x_scale), "
                        f"got dtype {a.dtype}")
    if a.ndim == 0:
        raise ShapeMismatchError("x must have at least one dimension, got a scalar",
                                 expected=f"(..., {n})", actual=())
    features = tuple(a.shape)[-1]  # GPU arrays' shapes may refuse negative indices
    if features != n:
        raise ShapeMismatchError(
            f"x has {features} features on its last axis but w has {n} inputs",
            expected=n, actual=features)
    return a, mode


def _vector(v: Any, name: str, shape: tuple[int, ...]) -> Any:
    """A float32 array of ``shape`` from a real-valued ``v`` (scalars broadcast for x_scale).

    A GPU array of the right shape stays where it is (a contiguous float32 one is
    checked, not copied; others are converted on the GPU).
    """
    a = native(v)
    if is_cuda_array(a) and tuple(a.shape) == shape and a.dtype.kind in "fiu":
        return contiguous(a, np.float32)
    a = to_host(a)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be real numbers, got dtype {a.dtype}")
    try:
        return np.ascontiguousarray(np.broadcast_to(a, shape), dtype=np.float32)
    except ValueError:
        raise ShapeMismatchError(f"{name} must have shape {shape}, got {a.shape}",
                                 expected=shape, actual=a.shape) from None


def _bias(bias: Any, out: int) -> Any:
    if bias is None:
        return None
    b = native(bias)
    if tuple(np.shape(b)) != (out,):
        raise ShapeMismatchError(f"bias must have shape ({out},), got {tuple(np.shape(b))}",
                                 expected=(out,), actual=tuple(np.shape(b)))
    return _vector(b, "bias", (out,))


def _scale_rows(w: TernaryTensor) -> np.ndarray:
    """The weight scales as ``(out, groups)`` float32 (one group for per-tensor scales).

    Made once per tensor and kept with it, read-only (the kernels only read it).
    """

    def make() -> np.ndarray:
        out = w.shape[0]
        if w.group_size is None:
            rows = np.full((out, 1), w.scales, np.float32)
        else:
            rows = np.array(w.scales.reshape(out, -1), np.float32, order="C")
        rows.flags.writeable = False
        return rows

    return w._cached("scale_rows", make)


def _resident(w: TernaryTensor, dev: str) -> tuple[Any, np.ndarray]:
    """``w``'s packed data and :func:`_scale_rows` as ``dev``'s kernels take them.

    Made once per tensor (and GPU) and kept with it (``linear_weights``): on CUDA
    later calls copy and look up nothing.
    """
    return kernel("linear_weights", dev)(w.packed.data, _scale_rows(w), w.packed._format,
                                         w.shape[1], w._cache)


def _out(out: Any, shape: tuple[int, ...], dev: str) -> Any:
    """``out`` checked: float32, C-contiguous, ``shape``, on the GPU exactly when ``dev`` is."""
    o = native(out)
    if dev == "cuda" if not is_cuda_array(o) else dev != "cuda":
        where = "a GPU array" if dev == "cuda" else "a NumPy array"
        raise TypeError(f"out must be {where} for device={dev!r}, got {type(out).__name__}")
    if o.dtype != np.float32:
        raise TypeError(f"out must be float32, got dtype {o.dtype}")
    if tuple(o.shape) != shape:
        raise ShapeMismatchError(f"out must have shape {shape}, got {tuple(o.shape)}",
                                 expected=shape, actual=tuple(o.shape))
    if not is_contiguous(o) or (dev != "cuda" and not o.flags.writeable):
        raise ValueError("out must be C-contiguous and writeable")
    return o


@implements("matmul")
def linear(x: Any, w: TernaryTensor, bias: Any = None, *, activations: Activations = "float",
           x_scale: Any = None, device: Device = "auto", out: Any = None,
           check_finite: bool = True) -> Any:
    """``x @ dequantize(w).T + bias`` from packed ternary weights.

    Parameters
    ----------
    x : array_like, shape (in,) or (..., in)
        float16/32/64 activations (computed in float32), or int8 activations
        already quantized, with ``x_scale``.
    w : TernaryTensor, shape (out, in)
        Weights from :func:`tritnum.quantize` (or read from a GGUF file) in any
        format, with per-tensor, per-row or per-group scales.
    bias : array_like, shape (out,), optional
        Added to every output row.
    activations : {"float", "int8", "q8_k", "q8_k_unfused"}
        How ``x`` enters the products (see Notes for how each relates to
        bitnet.cpp and llama.cpp):

        - ``"float"`` (the default here; :class:`BitLinear` defaults to
          ``"int8"``): float32 arithmetic on ``x`` as given.
        - ``"int8"``: BitNet b1.58 W1.58A8, bitnet.cpp's I2_S path: ``x`` is
          quantized per row (token) with :func:`tritnum.quantize_activations`,
          the products ``trit * q`` are summed exactly in integers (per scale
          group) and rescaled by the weight and activation scales.
        - ``"q8_k"``: llama.cpp's CPU path for TQ1_0/TQ2_0 weights: ``x`` is
          quantized to Q8_K (one float32 scale per 256 values, int8 quants, as
          ggml's ``quantize_row_q8_K``), each 256-value block's products are
          summed exactly in integers and rescaled by the block's weight and
          activation scales, in float32 and in ggml's order, each lane update
          ``acc + lane * scale`` one fused multiply-add (one rounding), as a
          default llama.cpp build (GCC contracts ggml's multiply and add). Needs
          ``in`` a multiple of 256 and one weight scale per 256-input block or
          coarser.
        - ``"q8_k_unfused"``: the same with the product and the sum rounded
          each, as a build whose compiler does not fuse them
          (``-ffp-contract=off``).
    x_scale : array_like, optional
        For int8 ``x`` only: the scale of each row (shape ``x.shape[:-1]``, or a
        scalar), ``x ≈ x_int8 * x_scale``. An int8 ``x`` with ``x_scale``
        always takes the int8 path.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; ``"auto"`` follows the data.
    out : array, optional
        A C-contiguous float32 array of the result's shape, where the result lives
        (NumPy for the CPU devices, a GPU array on CUDA): the result is written
        there and ``out`` returned. On CUDA this saves the allocation of each call.
    check_finite : bool
        ``"int8"`` with float ``x`` only: raise ValueError on NaN or infinity in
        ``x`` (the default). On CUDA the check reads the row scales back from the
        GPU, one synchronization per call; ``check_finite=False`` skips it (on
        every device) and a CUDA call only launches kernels: a row of ``x``
        holding NaN or infinity then gives NaN in every output of that row, never
        a silently wrong number.

    Returns
    -------
    numpy.ndarray, GPU array or Dask array of float32, shape (out,) or (..., out)
        A lazy Dask array for Dask activations, chunked as ``x`` along the
        leading axes; the weights go to the workers once (see ``tritnum._dask``).

    Raises
    ------
    ShapeMismatchError
        ``x.shape[-1]`` is not ``in``, ``bias`` is not ``(out,)``, or ``w`` is not 2-D;
        with ``"q8_k"`` (or ``"q8_k_unfused"``), ``in`` is not a multiple of 256.
    TypeError
        ``x`` is integer (other than int8 with ``x_scale``, which ``"q8_k"`` does
        not take either), bool, complex or object.
    InvalidTritsError
        ``w`` wraps packed bytes holding a corrupt code (checked on first use).
    ValueError
        NaN or infinity in ``x`` on the int8 and q8_k paths (it cannot be
        quantized); with ``"q8_k"``, a ``w.group_size`` that is not a multiple of 256.

    Notes
    -----
    On CUDA the weights' scales (and packed data held on the host) are copied to
    the GPU on first use and kept with ``w``, with the kernels' layouts of them,
    until ``w`` is freed; ``BitLinear`` keeps its bias there too. A steady call
    on GPU data with ``out=`` then allocates and copies nothing, and with
    ``check_finite=False`` (or float activations) does not synchronize.

    Small calls. Plain NumPy arguments (a C-contiguous float ``x``, a float32 ``bias``
    and ``out`` if any, any activation mode but a given ``x_scale``, on the CPU) go
    straight to the CPU kernels, each argument classified once; what the kernels read of ``w``
    (packed data and scale rows) is kept with ``w`` after its first call, so repeated
    calls on the same ``w`` (as :class:`BitLinear` makes them) prepare nothing again.
    Other arguments (lists, float64 bias, torch tensors, GPU or Dask arrays) take the
    general route to the same kernels: the same bits, a few microseconds more per call.
    On the CPU a layer of at most 2**20 weights with one scale per tensor or row is
    prepared on its first call (its codes in rows of whole SIMD blocks, kept with
    ``w``: at most 1 MiB with the padding of narrow rows), and then a call of a few
    rows (up to 2**22 products with int8 activations, 2**20 with float ones, and always
    up to 4 rows) is one compiled step (quantization, products, rescale and bias); the
    int8 results are the same bits. So is a call of up to 16 rows on a layer in scale
    groups whose packed codes take less than 1 MiB (float activations on rows of whole
    SIMD blocks; int8 where the CPU has VNNI and GFNI), and one row in ``"q8_k"`` on such
    weights where it has VNNI: the general route's kernels, so its bits. A call that
    raises writes nothing into ``out``; a ``bias`` sharing memory with ``out`` is read
    as it was before the call.

    On the float path NaN and infinity in ``x`` propagate as they do in BLAS:
    every output that reads them is NaN or infinite. Values beyond float32's range
    become infinite (the float path computes in float32).

    The three modes and the peers. bitnet.cpp runs BitNet models with int8
    activations quantized per token by absmax (``quantize_row_i8_s``) against
    I2_S weights (one scale per tensor) and sums ``trit * q`` exactly in
    integers: that is ``"int8"``. llama.cpp's CPU backend runs TQ1_0/TQ2_0
    weights (one fp16 scale per 256 weights) against Q8_K activations: that is
    ``"q8_k"``. For a ``w`` as read from a TQ1_0 or TQ2_0 file
    (``tn.io.from_gguf_blocks(..., ternary=True)``: ``group_size=256``, fp16
    scales) it returns the float32 result of a NumPy transcription of ggml's x86
    AVX2 code bit for bit (the tests' oracle): the quants are those of
    ``quantize_row_q8_K_ref`` (which x86 builds run; ``nearest_int`` rounds the
    float32 product half to even), each block's sum ``trit * q`` is exact, split
    over the eight int32 lanes of ggml's AVX2 kernel (``ggml_vec_dot_tq2_0_q8_K``;
    the TQ1_0 kernel has the same lanes), and every lane is rescaled by
    ``float32(d_q8 * d_w)`` and accumulated in float32 block by block, then the
    lanes are added as ``hsum_float_8`` adds them; a ``bias`` is added in float32
    after, as a separate ``ggml_add``. ggml writes the lane update as a multiply
    then an add; GCC with ``-march=native`` (llama.cpp's default build) contracts
    them into one FMA, which ``"q8_k"`` does; ``"q8_k_unfused"`` rounds twice, as
    a build that keeps them apart. ggml's generic C kernel (builds without AVX2)
    sums whole blocks in sequence instead. Any two of these sum the same exact
    integers in float32 in another order, so the difference stays within
    ``(blocks + 5) * 2**-23 * sum_b |d_q8 d_w| * 3 * sum_(e in b) |q_e|`` (the
    recursive-summation bound of each, on lane terms at most three times the
    block's ``sum |q|``). Other weights take the same arithmetic with their own
    scale standing for each block's ``d_w`` (per tensor, per row, or per group of
    a multiple of 256 inputs).
    ``"float"`` is neither peer: it multiplies the unquantized activations.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> w = tn.quantize(np.array([[1.0, -1.0, 0.0], [0.0, 1.0, 1.0]]))
    >>> x = np.array([[2.0, 1.0, 4.0]], dtype=np.float32)
    >>> tn.linear(x, w)
    array([[0.6666667, 3.3333335]], dtype=float32)
    >>> x @ w.T
    array([[0.6666667, 3.3333335]], dtype=float32)
    >>> tn.linear(x, w, activations="int8")  # x quantized to int8 per row
    array([[0.671916 , 3.3385828]], dtype=float32)
    >>> w256 = tn.quantize(np.tile([[1.0, -1.0, 0.0, 1.0]], (2, 64)), group_size=256)
    >>> x256 = np.linspace(-1, 1, 256, dtype=np.float32)
    >>> tn.linear(x256, w256, activations="q8_k")  # as llama.cpp, Q8_K blocks of 256
    array([0.18897533, 0.18897533], dtype=float32)
    """
    fast = _host_call(x, w, bias, activations, x_scale, device, out, check_finite)
    if fast is not None:
        return fast
    like = origin(x)
    w = _weights(w)
    nout, n = w.shape
    a, mode = _activations(x, x_scale, activations, n)
    if mode in Q8K_MODES:
        _q8k_blocks(w)
    b = _bias(bias, nout)
    if is_dask(a) or is_dask(w.packed.data):  # lazy in, lazy out: weights shared by all tasks
        if out is not None:
            raise TypeError("out= does not take Dask arrays (the result is lazy)")
        return dask_layer().linear(a, w, b, mode, x_scale, device)
    lead = tuple(a.shape)[:-1]
    dev = resolve_device(device, a, w.packed.data)
    ensure_valid(w.packed, dev)
    target = None if out is None else _out(out, (*lead, nout), dev)
    b = _unshared(b, target)
    rows = as_rows(a)
    m = rows.shape[0]
    given_scale = None if x_scale is None else _vector(x_scale, "x_scale", lead).reshape(m)
    if m == 0 or nout == 0 or n == 0:
        y = np.zeros((m, nout), np.float32) + (0 if b is None else to_host(b))
    else:
        # CUDA's q8_k kernels take the packed data as it is (copied per call)
        data, scales = (_resident(w, dev) if mode not in Q8K_MODES or dev != "cuda"
                        else (w.packed.data, _scale_rows(w)))
        weights = (data, w.packed._format, n, scales, b)
        # int8 with the check: written into out once the check passed, as Q8_K
        checked = mode in Q8K_MODES or (mode == "int8" and x_scale is None and check_finite)
        into = {} if target is None or checked else {"out": target.reshape(m, nout)}
        y = _product(a, rows, given_scale, mode, dev, weights, into, check_finite)
        if into:
            return out
    if target is not None:
        copy_into(target, y)
        return out
    return place(y, like, (*lead, nout))


def _host_call(x: Any, w: Any, bias: Any, activations: str, x_scale: Any, device: str,
               out: Any, check_finite: bool) -> np.ndarray | None:
    """:func:`linear`'s fast route, or None when the arguments need the general route.

    Taken by plain NumPy arguments that pass every check as they are: a C-contiguous
    float ``x`` (native byte order, ``in`` features, at least one row), a 2-D host
    ``TernaryTensor`` whose codes are checked, a float32 ``(out,)`` bias, a float32
    C-contiguous writeable ``out``, float, int8 or Q8_K activations without ``x_scale``,
    on the CPU. Each argument is classified once here; anything else (and every bad
    input) takes the general route, which raises the typed errors. Same kernels, same
    arguments, so the same bits.
    """
    if (type(x) is not np.ndarray or type(w) is not TernaryTensor or x_scale is not None
            or activations not in _HOST_MODES):
        return None
    if not host_cpu(device):
        return None  # as resolve_device: "auto" runs on the CPU for host data
    kept = w._cache.get("cpu_linear") or _host_weights(w)
    if kept is None:
        return None
    data, fmt, scales, nout, n, small = kept
    shape, dt = x.shape, x.dtype
    if (not shape or shape[-1] != n or not x.size or not x.flags.c_contiguous
            or (dt is not _FLOAT32 and (dt.kind != "f" or not dt.isnative))
            or not (bias is None or _host_vector(bias, (nout,)))):
        return None
    if out is not None and not (_host_vector(out, (*shape[:-1], nout))
                                and out.flags.writeable):
        return None
    rows = x if len(shape) == 2 else x.reshape(-1, n)
    target = None  # out as rows, where the kernels write into it
    if out is not None:
        bias = _unshared(bias, out)
        if not (check_finite and activations == "int8"):  # else written once checked
            target = out.reshape(rows.shape[0], nout)
    if activations in Q8K_MODES:
        return _host_q8k(x, rows, w, kept, bias, out, target, activations)
    route = small.get(activations) if dt is _FLOAT32 else None
    if route is not None and rows.shape[0] <= route[1]:  # a small layer's, or in groups
        y = _routed(route[0], x, rows, bias, nout, target, check_finite)
        return _finished(y, shape, out, target)
    into = {} if target is None else {"out": target}
    if activations == "int8":
        y, xs = kernel("linear_int8_fused", "cpu")(rows, data, fmt, n, scales, bias, **into)
        if check_finite and not _all_finite(xs):
            _raise_not_finite(x, "x", in_float32=True)
    else:
        if dt != np.float32:
            with np.errstate(over="ignore"):  # as _float32_rows
                rows = rows.astype(np.float32)
        y = kernel("linear_float", "cpu")(rows, data, fmt, n, scales, bias, **into)
    return _finished(y, shape, out, target)


def _routed(run: Any, x: np.ndarray, rows: np.ndarray, bias: np.ndarray | None, nout: int,
            target: np.ndarray | None, check: bool) -> np.ndarray:
    """``rows`` through a one-call ``run`` (``linear_small``) into ``target`` or a new array.

    A row of ``x`` holding NaN or infinity raises where ``check``.
    """
    y = np.empty((rows.shape[0], nout), np.float32) if target is None else target
    if run(rows, _NO_BIAS if bias is None else bias, y) and check:
        _raise_not_finite(x, "x", in_float32=True)
    return y


def _one_step(w: TernaryTensor, bias: Any, mode: str) -> tuple[Any, ...]:
    """The one-call route :func:`_host_call` takes for ``w``, ``bias`` and ``mode``, or ``()``.

    ``(run, most rows, in, out, whether rows holding NaN or infinity raise whatever
    check_finite says, whether they get NaN outputs)``, which :class:`BitLinear` keeps
    with the objects it was made for once a call has checked them: a call of one row at
    64 x 64 took 2.4 µs through :func:`_host_call`, 2.0 so (3.5 and 2.3-2.7 into ``out``).
    The route reads the bias on each call, as :func:`_host_call` does.
    """
    kept = w._cache.get("cpu_linear")
    route = None if kept is None else kept[-1].get(mode)
    if route is None or not (bias is None or _host_vector(bias, (kept[3],))):
        return ()
    return (*route, kept[4], kept[3], mode in Q8K_MODES, mode == "int8")


def _unshared(bias: Any, out: Any) -> Any:
    """``bias``, or a copy of it where it may share memory with ``out``.

    The kernels write each output row in turn and read the bias for every one: a bias
    that is a row of ``out`` would change under them.
    """
    if (bias is not None and type(bias) is np.ndarray and type(out) is np.ndarray
            and np.may_share_memory(bias, out)):
        return bias.copy()
    return bias


def _finished(y: np.ndarray, shape: tuple[int, ...], out: np.ndarray | None,
              target: np.ndarray | None) -> np.ndarray:
    """:func:`_host_call`'s result: ``y`` in ``x``'s ``shape`` of rows, or ``out``.

    ``out`` holds it already where the kernel wrote into it (``target``, its rows);
    else it is copied.
    """
    if out is None:
        return y if len(shape) == 2 else y.reshape((*shape[:-1], y.shape[-1]))
    if target is None:
        out.reshape(y.shape)[...] = y
    return out


def _host_q8k(x: np.ndarray, rows: np.ndarray, w: TernaryTensor, kept: tuple[Any, ...],
              bias: np.ndarray | None, out: np.ndarray | None, target: np.ndarray | None,
              mode: str) -> np.ndarray | None:
    """:func:`_host_call` in a Q8_K ``mode``: :func:`_product`'s two kernels, or None.

    One row on small weights takes their one-call route (into ``target``, given: it
    writes nothing when it refuses ``x``). None for weights the Q8_K blocks do not
    fit (the general route refuses them). ``x`` holding NaN or infinity raises whatever
    ``check_finite`` says, as the general route does, before any output.
    """
    data, fmt, scales, _, n, small = kept
    if n % QK_K or (w.group_size is not None and w.group_size % QK_K):
        return None
    if rows.dtype != np.float32:
        with np.errstate(over="ignore"):  # as _float32_rows
            rows = rows.astype(np.float32)
    route = small.get(mode)
    if route is not None and rows.shape[0] <= route[1]:  # raises whatever check_finite says
        y = _routed(route[0], x, rows, bias, kept[3], target, True)
    else:
        q, d, bsums = kernel("quantize_q8k", "cpu")(rows)
        if not _all_finite(d.reshape(-1)):
            _raise_not_finite(x, "x", in_float32=True)
        y = kernel("linear_q8k", "cpu")(q, d, bsums, data, fmt, n, scales, bias, mode == "q8_k")
        target = None  # a new array: copied into out
    return _finished(y, x.shape, out, target)


def _host_weights(w: TernaryTensor) -> tuple[Any, ...] | None:
    """What the CPU kernels read of ``w``, or None.

    Packed data, format, scale rows, out, in, and the one-call routes of a small layer or
    one in scale groups by activation mode (``linear_small``).

    Kept with ``w`` once its codes are checked (the general route checks them on first
    use): a 2-D tensor of at least one weight whose packed data is a NumPy array.
    """
    if (not w.packed._valid or w.ndim != 2 or type(w.packed.data) is not np.ndarray
            or not w.packed.size):
        return None
    data, scales = _resident(w, "cpu")
    return w._cached("cpu_linear", lambda: (
        data, w.packed._format, scales, *w.shape,
        kernel("linear_small", "cpu")(data, scales, w.packed._format, w.shape[1])))


_HOST_MODES = ("float", "int8", *Q8K_MODES)
_FLOAT32 = np.dtype(np.float32)  # the dtype of float32 arrays NumPy makes (others compare equal)
_NO_BIAS = np.zeros(0, np.float32)  # a one-call route's bias where there is none


def _all_finite(v: np.ndarray) -> bool:
    """No NaN or infinity in the 1-D ``v`` (a few values: read in Python, no ufunc call)."""
    return all(map(math.isfinite, v.tolist())) if v.size <= 64 else bool(np.isfinite(v).all())


def _host_vector(a: Any, shape: tuple[int, ...]) -> bool:
    """``a`` is a float32 C-contiguous NumPy array of ``shape``, taken as it is."""
    return (type(a) is np.ndarray and a.dtype == np.float32 and a.shape == shape
            and a.flags.c_contiguous)


def _product(a: Any, rows: Any, x_scale: Any, mode: str, dev: str, weights: tuple[Any, ...],
             into: dict[str, Any], check_finite: bool) -> Any:
    """The ``(m, out)`` rows of :func:`linear` (into ``into["out"]`` when given, on CUDA)."""
    if mode in Q8K_MODES:
        q, d, bsums = call("quantize_q8k", dev, _float32_rows(rows))
        if not np.isfinite(to_host(d)).all():
            _raise_not_finite(a, "x", in_float32=True)
        return call("linear_q8k", dev, q, d, bsums, *weights, mode == "q8_k")
    if mode == "int8" and x_scale is None:  # quantized and multiplied, no host round trip
        y, xs = call("linear_int8_fused", dev, rows, *weights, **into)
        if check_finite and not np.isfinite(to_host(xs)).all():
            _raise_not_finite(a, "x", in_float32=True)
        return y
    if mode == "int8":
        return call("linear_int8", dev, rows, x_scale, *weights, **into)
    return call("linear_float", dev, _float32_rows(rows), *weights, **into)


def _float32_rows(rows: Any) -> Any:
    """C-contiguous float32 rows, where they live (converted on the GPU for GPU rows)."""
    with np.errstate(over="ignore"):  # beyond float32: infinite, and propagates (documented)
        return contiguous(rows, np.float32)


class BitLinear:
    """A ternary linear layer: quantize a float weight once, apply :func:`linear` on call.

    This one, NumPy's, takes a weight matrix for inference; :class:`tritnum.torch.BitLinear`,
    PyTorch's ``nn.Module`` of the same name, takes sizes as ``nn.Linear`` and trains.

    Parameters
    ----------
    weight : array_like of float, shape (out_features, in_features), or TernaryTensor
        Float weights are quantized with BitNet b1.58 absmean (:func:`tritnum.quantize`).
    bias : array_like, shape (out_features,), optional
    group_size : int, optional
        One weight scale per ``group_size`` inputs (default: one per tensor, as BitNet).
    activations : {"int8", "float", "q8_k", "q8_k_unfused"}
        ``"int8"`` (default, as bitnet.cpp runs, and unlike :func:`linear`, whose
        default is ``"float"``; the two differ by the activations' rounding, about
        1 %): W1.58A8 inference as bitnet.cpp; ``"float"``: float32; ``"q8_k"``:
        llama.cpp's Q8_K activations (needs 256-value blocks, see :func:`linear`;
        ``"q8_k_unfused"`` without the FMA of its lane updates).
    format : {"2bit", "base3", "bitplane"}
        Packed format of the weights.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where the layer runs.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> rng = np.random.default_rng(0)
    >>> layer = tn.BitLinear(rng.standard_normal((64, 256)), bias=np.zeros(64))
    >>> layer.in_features, layer.out_features, layer.nbytes, round(layer.sparsity, 2)
    (256, 64, 4356, 0.31)
    >>> layer(rng.standard_normal((2, 256))).shape
    (2, 64)
    """

    def __init__(self, weight: Any, bias: Any = None, *, group_size: int | None = None,
                 activations: Activations = "int8", format: Format = "2bit",
                 device: Device = "auto") -> None:
        choice(activations, "activations", ACTIVATIONS)
        if not isinstance(weight, TernaryTensor) and np.ndim(weight) == 0:
            raise TypeError(
                f"tritnum.BitLinear takes a weight matrix of shape (out_features, "
                f"in_features), not sizes (got weight={weight!r}); the layer made from sizes, "
                f"as torch.nn.Linear, is tritnum.torch.BitLinear(in_features, out_features)")
        if isinstance(weight, TernaryTensor):
            if group_size is not None and group_size != weight.group_size:
                raise ValueError("group_size is fixed by a TernaryTensor weight")
            w = weight
        else:
            w = quantize(weight, group_size=group_size, format=format, device=device)
        self.weight = _weights(w)
        if activations in Q8K_MODES:
            _q8k_blocks(self.weight)
        self.bias = _bias(bias, self.weight.shape[0])
        if isinstance(self.bias, np.ndarray):  # the layer's own, read-only: GPU copies stay right
            self.bias = self.bias.copy()
            self.bias.flags.writeable = False
        self.activations = activations
        self.device = device
        self._sparsity: float | None = None
        self._kept: dict[Any, Any] = {}  # the bias where the kernels read it (see ``keep``)
        self._step: tuple[Any, ...] | None = None  # the one-call route (see ``_one_step``)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_step": None}  # kernels and closures: made again

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_step": None, **state})

    @property
    def in_features(self) -> int:
        """Inputs per row of activations."""
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        """Outputs per row."""
        return self.weight.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes held: packed weights, scales and bias."""
        return self.weight.nbytes + (0 if self.bias is None else self.bias.nbytes)

    @property
    def sparsity(self) -> float:
        """Fraction of weights that are zero."""
        if self._sparsity is None:
            zeros = 0
            rows = max(1, (1 << 22) // max(self.in_features, 1))
            for r0 in range(0, self.out_features, rows):
                trits = self.weight.packed[r0:r0 + rows].unpack(device=self.device)
                zeros += int(np.count_nonzero(to_host(trits) == 0))
            self._sparsity = zeros / max(self.weight.packed.size, 1)
        return self._sparsity

    def __call__(self, x: Any, *, out: Any = None, check_finite: bool = True) -> Any:
        """``linear(x, weight, bias)`` with the layer's activations and device.

        ``out`` and ``check_finite`` as in :func:`linear`. On CUDA the bias goes to
        the GPU once, with the weights (see :func:`linear`).
        """
        weight, bias, mode, step = self.weight, self.bias, self.activations, self._step
        current = step is not None and step[0] is weight and step[1] is bias and step[2] is mode
        if (current and step[3] and type(x) is np.ndarray and x.dtype is _FLOAT32
                and x.ndim == 2 and host_cpu(self.device)):
            run, most, n, nout, strict, int8 = step[3]
            m = x.shape[0]
            if (0 < m <= most and x.shape[1] == n and x.flags.c_contiguous
                    and (out is None or (_host_vector(out, (m, nout)) and out.flags.writeable))):
                # _routed and _finished written out: their frames and out's reshape took
                # 0.16 of 2.1 µs a call at 64 x 64 (0.4 of 2.9 into out)
                if out is None:
                    y = np.empty((m, nout), np.float32)
                else:  # as _host_call: int8 rows are checked before anything is in out
                    y = np.empty((m, nout), np.float32) if int8 and check_finite else out
                    bias = _unshared(bias, out)
                if run(x, _NO_BIAS if bias is None else bias, y) and (check_finite or strict):
                    _raise_not_finite(x, "x", in_float32=True)
                if y is not out and out is not None:
                    out[...] = y
                    return out
                return y
        fast = _host_call(x, weight, bias, mode, None, self.device, out, check_finite)
        if fast is not None:  # plain NumPy in, on the CPU: the layer's weights and bias as kept
            if not current:  # made from what this call read (another thread may change them)
                self._step = (weight, bias, mode, _one_step(weight, bias, mode))
            return fast
        if bias is not None:  # on CUDA: copied to the GPU once
            dev = resolve_device(self.device, native(x), self.weight.packed.data)
            bias = kernel("keep", dev)(bias, self._kept, "bias")
        return linear(x, self.weight, bias, activations=self.activations,
                      device=self.device, out=out, check_finite=check_finite)

    def __repr__(self) -> str:
        return (f"BitLinear(in_features={self.in_features}, out_features={self.out_features}, "
                f"activations={self.activations!r}, format={self.weight.format!r}, "
                f"group_size={self.weight.group_size}, {self.nbytes / 1024:.1f} KiB, "
                f"sparsity={self.sparsity:.2f})")

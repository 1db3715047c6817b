"""Gradient compression by random ternary projection, with error feedback.

:func:`compress` keeps ``m = ceil(n / ratio)`` float32 numbers of an ``n``-element
gradient ``g``: the sketch ``s = P g``, where ``P`` is an ``(m, n)`` ternary matrix with
one non-zero per column: column ``j`` holds a random sign at row ``j mod m``. The signs
come from tritnum's counter-based generator (the hash of :func:`tritnum.vsa.random`,
in a stream of its own): a hash of ``(seed, j // 64)`` gives the signs of 64 columns, the
same on every device. ``P`` is never stored; the kernels regenerate it from the seed. In
VSA terms the gradient is cut into ``r = ceil(n / m)`` stripes of ``m`` values, each
stripe is bound to a random bipolar key of its own and the stripes are bundled by
summation; decompressing unbinds. Bucket ``i`` sums the ``c_i`` elements ``i, i + m, ...``
(``c_i`` is ``r`` or ``r - 1``).

:func:`decompress` gives one of two estimates of ``g``:

- ``"unbiased"``: ``P^T s``. Over seeds ``E[P^T P g] = g`` (the signs are independent with
  zero mean), with ``E||P^T s - g||^2 = sum_i (c_i - 1) ||g_i||^2 <= (r - 1) ||g||^2``
  (``g_i``: the elements of bucket ``i``).
- ``"projection"``: ``P^T D^-1 s`` with ``D = P P^T = diag(c)``: the orthogonal projection
  of ``g`` onto the row space of ``P`` (the least-squares reconstruction), so
  ``||g - est||^2 = ||g||^2 - ||est||^2`` and ``E||est||^2 = sum_i ||g_i||^2 / c_i >=
  ||g||^2 / r``: a contraction, which is what error feedback needs.

:class:`ErrorFeedback` carries the residual ``e`` of one gradient from step to step:
it compresses ``x = g + e`` with a fresh seed per step, applies the projection ``p`` of
``x`` and keeps ``e = x - p``. The updates applied then add up to the true gradients
less the last residual (``sum p_t = sum g_t - e_T``), and the residual stays bounded
(for a constant gradient, ``E||e||^2`` settles near ``r (r - 1) ||g||^2``).

Sketches are linear: the sketches of several gradients with one seed add up to the
sketch of their sum, so workers can all-reduce sketch values instead of gradients.

Cost: compressing reads each element once and writes ``4 m`` bytes; decompressing reads
``4 m`` bytes and writes ``4 n``. A float16 gradient is widened to float32 (exactly) 64
values at a time on the CPU, never copied whole. NaN and infinity propagate into their
bucket.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from ._dispatch import call, place, resolve_device
from ._interop import (
    HOST,
    copy_of,
    flat,
    for_device,
    is_contiguous,
    is_cuda_array,
    native,
    origin,
)
from ._kernels.shared.vsa import GOLDEN
from ._validate import choice, float_array, shape_tuple
from .errors import ShapeMismatchError
from .typing import Device, Estimate
from .vsa.generation import Seed, draw_seed, seed_key

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# tritnum.torch.compress (seeds, ratio) and the bench (_bench/compress.py: the key).
_INTERNAL_API = ("_child_seed", "_key", "_ratio")

GRAD_HINT = "; cast integer gradients to a float dtype first"

__all__ = ["ErrorFeedback", "Sketch", "compress", "decompress"]

_ESTIMATES = ("unbiased", "projection")


def _ratio(ratio: Any) -> Fraction:
    """``ratio`` (a real number >= 1) exactly, as a fraction."""
    if not isinstance(ratio, numbers.Real) or isinstance(ratio, bool):
        raise TypeError(f"ratio must be a real number >= 1, got {ratio!r}")
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(f"ratio must be a finite number >= 1, got {ratio!r}")
    return Fraction(ratio)


def _length(n: int, ratio: Fraction) -> int:
    """Buckets of a sketch of ``n`` elements: ``ceil(n / ratio)``."""
    return math.ceil(n / ratio)


def _int_seed(seed: Any, name: str = "seed") -> int:
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise TypeError(f"{name} must be an integer, got {seed!r}")
    return int(seed) % 2**64


def _key(seed: int) -> int:
    """The generator key of the signs of a projection."""
    return seed_key(seed, "compress")


def _child_seed(seed: int, index: int) -> int:
    """A seed for member ``index`` (a parameter, a bucket) of a run seeded ``seed``."""
    return _key(_key(seed) + index * int(GOLDEN))


def _shape(shape: Any) -> tuple[int, ...]:
    return () if shape == () else shape_tuple(shape)


class Sketch:
    """A gradient compressed by random ternary projection (made by :func:`compress`).

    Holds the float32 bucket values, the gradient's shape and the seed of the
    projection: all :func:`decompress` needs. The values are kept as given (a NumPy
    array, a GPU array or a torch tensor), not copied: an in-place all-reduce of
    ``sketch.values`` sums the sketches of several workers. Sketches of NumPy arrays
    and torch tensors pickle.

    Parameters
    ----------
    values : array_like of float32
        The ``m`` bucket values, 1-D.
    shape : int or tuple of int
        Shape of the gradient (``n`` elements, ``1 <= m <= n``, or both 0).
    seed : int
        The projection's seed (taken mod 2**64).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> s = tn.compress(np.arange(8, dtype=np.float32), ratio=4, seed=1)
    >>> s
    Sketch(shape=(8,), ratio=4, seed=1, 2 values)
    >>> s.values  # the signed sums of elements 0, 2, 4, 6 and 1, 3, 5, 7
    array([-4., -2.], dtype=float32)
    >>> tn.Sketch(s.values * 2, (8,), 1)  # the sketch of twice the gradient
    Sketch(shape=(8,), ratio=4, seed=1, 2 values)
    """

    __slots__ = ("_seed", "_shape", "_values")

    def __init__(self, values: Any, shape: int | tuple[int, ...], seed: int) -> None:
        v = native(values)
        if not is_cuda_array(v):
            v = np.asarray(v)
        if v.dtype != np.float32:
            raise TypeError(f"sketch values must be float32, got dtype {v.dtype}")
        if v.ndim != 1:
            raise ShapeMismatchError(f"sketch values must be 1-D, got shape {tuple(v.shape)}",
                                     expected="ndim == 1", actual=tuple(v.shape))
        shape = _shape(shape)
        n, m = math.prod(shape), v.shape[0]
        if not (1 <= m <= n or m == n == 0):
            raise ShapeMismatchError(
                f"a sketch of shape {shape} ({n} elements) holds 1 to {n} values, got {m}",
                expected=f"1..{n}" if n else 0, actual=m)
        self._values = values
        self._shape = shape
        self._seed = _int_seed(seed)

    @property
    def values(self) -> Any:
        """The float32 bucket values, 1-D, as given (not a copy)."""
        return self._values

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the compressed gradient."""
        return self._shape

    @property
    def seed(self) -> int:
        """Seed of the projection (in [0, 2**64))."""
        return self._seed

    @property
    def size(self) -> int:
        """Elements of the compressed gradient."""
        return math.prod(self._shape)

    @property
    def ratio(self) -> float:
        """Elements per value, ``size / len(values)`` (1 for an empty gradient)."""
        m = native(self._values).shape[0]
        return self.size / m if m else 1.0

    @property
    def nbytes(self) -> int:
        """Bytes of the values."""
        return 4 * native(self._values).shape[0]

    def __repr__(self) -> str:
        m = native(self._values).shape[0]
        return (f"Sketch(shape={self._shape}, ratio={self.ratio:g}, seed={self._seed}, "
                f"{m} values)")


def compress(grad: Any, ratio: float, seed: Seed = None, *, device: Device = "auto") -> Sketch:
    """Compress a gradient to ``ceil(size / ratio)`` float32 values by random ternary projection.

    Parameters
    ----------
    grad : array_like of float16, float32 or float64
        The gradient, any shape (NumPy, GPU array or torch tensor; read, never written).
    ratio : float
        Elements per sketch value, >= 1 (16: a sixteenth of the float32 bytes).
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        The projection's seed (as :func:`tritnum.vsa.random`'s); ``None`` draws one.
        The sketch keeps it as an int. Workers summing sketches must share it.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; on ``"cuda"`` the values stay on the GPU.

    Returns
    -------
    Sketch
        Values in the framework of ``grad`` (a torch tensor for a tensor).

    Raises
    ------
    TypeError
        ``grad`` is not a float array, ``ratio`` not a real number, or a bad ``seed``.
    ValueError
        ``ratio`` below 1 or not finite.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> g = np.linspace(-1, 1, 1000, dtype=np.float32)
    >>> s = tn.compress(g, ratio=16, seed=0)
    >>> s.values.shape, s.nbytes
    ((63,), 252)
    """
    like = origin(grad)
    a = float_array(grad, "grad", scalar=True, hint=GRAD_HINT)
    r = _ratio(ratio)
    seed = draw_seed(seed) % 2**64
    n = int(a.size)
    dev = resolve_device(device, a)
    s = call("compress.sketch", dev, flat(a), None, _length(n, r), _key(seed))
    return Sketch(place(s, like), tuple(a.shape), seed)


def _out_buffer(out: Any, shape: tuple[int, ...], dev: str, values: Any) -> Any:
    """``out`` as the flat float32 buffer the kernel of ``dev`` writes into."""
    o = native(out)
    host = not is_cuda_array(o)
    ok = (o.dtype == np.float32 and tuple(o.shape) == shape
          and is_contiguous(o) and (not host or o.flags.writeable))
    if not ok or host != (dev != "cuda"):
        raise TypeError(f"out must be a writeable, C-contiguous float32 array of shape {shape} "
                        f"on the {'GPU' if dev == 'cuda' else 'host'}")
    if host and np.may_share_memory(o, values):
        raise ValueError("out shares memory with the sketch values it is computed from")
    return o.reshape(math.prod(shape))


def decompress(sketch: Sketch | Any, shape: int | tuple[int, ...] | None = None,
               seed: int | None = None, *, estimate: Estimate = "unbiased", out: Any = None,
               device: Device = "auto") -> Any:
    """The gradient a :class:`Sketch` estimates: ``P^T s`` or its projection.

    Parameters
    ----------
    sketch : Sketch or array_like of float32
        A sketch, or its bare values (summed over workers, say) with ``shape`` and ``seed``.
    shape : int or tuple of int, optional
        Shape of the result: the sketch's by default (another one of the same size
        reshapes); required with bare values.
    seed : int, optional
        Required with bare values; with a Sketch it must be the sketch's.
    estimate : {"unbiased", "projection"}
        ``"unbiased"``: ``P^T s``, equal to the gradient on average over seeds.
        ``"projection"``: ``P^T (P P^T)^-1 s``, the orthogonal projection of the gradient
        on the row space of ``P``: never longer than it (what :class:`ErrorFeedback` applies).
    out : array, optional
        A float32 C-contiguous array of the result's shape, where the kernel runs, to write
        the result into (returned).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    array of float32
        In the framework of the values (a torch tensor for tensor values).

    Raises
    ------
    ShapeMismatchError
        ``shape`` of another size than the sketch's, or values that cannot be a sketch of it.
    TypeError
        Bare values without ``shape`` and ``seed``, a non-integer seed, or a bad ``out``.
    ValueError
        A ``seed`` other than the sketch's, an unknown ``estimate``, or an ``out`` that
        shares memory with the values.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> g = np.array([1.0, -2.0, 0.5, 4.0], dtype=np.float32)
    >>> s = tn.compress(g, ratio=2, seed=7)
    >>> tn.decompress(s)  # each element plus or minus the other one of its bucket
    array([ 0.5, -6. , -0.5,  6. ], dtype=float32)
    >>> tn.decompress(s.values, (2, 2), seed=7, estimate="projection")
    array([[ 0.25, -3.  ],
           [-0.25,  3.  ]], dtype=float32)
    >>> runs = [tn.decompress(tn.compress(g, 2, seed=k)) for k in range(4000)]
    >>> bool(np.allclose(np.mean(runs, axis=0), g, atol=0.2))  # unbiased over seeds
    True
    """
    if isinstance(sketch, Sketch):
        if seed is not None and _int_seed(seed) != sketch.seed:
            raise ValueError(f"seed {seed} is not the sketch's ({sketch.seed}); leave it out")
        if shape is None:
            shape = sketch.shape
        elif math.prod(_shape(shape)) != sketch.size:
            raise ShapeMismatchError(
                f"shape {_shape(shape)} does not hold the sketch's {sketch.size} elements",
                expected=sketch.size, actual=_shape(shape))
    elif shape is None or seed is None:
        raise TypeError("decompress(values, shape, seed): bare sketch values need the "
                        "gradient's shape and the seed (a tn.Sketch holds both)")
    else:
        sketch = Sketch(sketch, shape, _int_seed(seed))
    shape = _shape(shape)
    project = choice(estimate, "estimate", _ESTIMATES) == "projection"
    like = origin(sketch.values)
    values = native(sketch.values)
    dev = resolve_device(device, values)
    buffer = None if out is None else _out_buffer(out, shape, dev, values)
    result = call("compress.expand", dev, values, sketch.size, _key(sketch.seed), project,
                  out=buffer)
    return out if out is not None else place(result, like, shape)


class ErrorFeedback:
    """Compression with error feedback for one gradient tensor, step after step.

    Each call compresses ``x = grad + residual`` with the seed of the step
    (``seed + step``, mod 2**64), and keeps ``residual = x - p``, where ``p`` is
    the projection estimate of ``x`` (see :func:`decompress`). Calling it returns ``p``,
    the update to apply; :meth:`compress` returns the sketch to send instead (the
    receiver decompresses the sum with ``estimate="projection"``).

    A NaN or infinity in a gradient stays in the residual for every later step: skip
    such steps before compressing (as PyTorch's ``GradScaler`` does before the step).

    Parameters
    ----------
    ratio : float
        Elements per sketch value, >= 1.
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        Seed of the series of projections (workers that sum sketches must share it).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; the residual lives there.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> ef = tn.ErrorFeedback(ratio=4, seed=0)
    >>> g = np.ones(64, np.float32)
    >>> applied = sum(ef(g) for _ in range(200))   # 200 steps of the same gradient
    >>> bool(np.allclose(applied + ef.residual, 200 * g, rtol=1e-5))
    True
    >>> ef.step
    200
    """

    __slots__ = ("_device", "_like", "_ratio", "_residual", "_seed", "_shape", "_step")

    def __init__(self, ratio: float, seed: Seed = None, *, device: Device = "auto") -> None:
        self._ratio = _ratio(ratio)
        self._seed = draw_seed(seed) % 2**64
        self._device = device
        resolve_device(device)  # a bad name or an unusable explicit device fails here
        self._step = 0
        self._residual: Any = None
        self._shape: tuple[int, ...] = ()
        self._like = HOST

    @property
    def seed(self) -> int:
        """Seed of the series of projections."""
        return self._seed

    @property
    def step(self) -> int:
        """Steps taken."""
        return self._step

    @property
    def size(self) -> int | None:
        """Elements of the gradient it carries a residual for (None before the first step)."""
        return None if self._residual is None else int(self._residual.size)

    @property
    def residual(self) -> Any:
        """A copy of the residual, shaped as the gradient (None before the first step)."""
        if self._residual is None:
            return None
        return place(copy_of(self._residual), self._like, self._shape)

    def _advance(self, grad: Any) -> tuple[Sketch, Any]:
        """Sketch of ``grad + residual`` and its projection; the residual moves on."""
        like = origin(grad)
        a = float_array(grad, "grad", scalar=True, hint=GRAD_HINT)
        n, shape = int(a.size), tuple(a.shape)
        dev = resolve_device(self._device, a)
        if self._residual is None:
            self._residual = np.zeros(n, np.float32)
        elif int(self._residual.size) != n:
            raise ShapeMismatchError(
                f"grad has {n} elements, the residual of the earlier steps {self._residual.size}",
                expected=int(self._residual.size), actual=n)
        self._residual = for_device(self._residual, dev)  # moved only if the device changed
        self._like, self._shape = like, shape
        seed = (self._seed + self._step) % 2**64
        key = _key(seed)
        x = flat(a)
        s = call("compress.sketch", dev, x, self._residual, _length(n, self._ratio), key)
        p = call("compress.expand", dev, s, n, key, True, x, residual=self._residual)
        self._step += 1
        return Sketch(place(s, like), shape, seed), place(p, like, shape)

    def __call__(self, grad: Any) -> Any:
        """The update to apply for ``grad`` this step (the projection of grad + residual)."""
        return self._advance(grad)[1]

    def compress(self, grad: Any) -> Sketch:
        """The sketch of ``grad + residual`` for this step (to send; the residual moves on).

        Parameters
        ----------
        grad : array_like of float, or GPU array
            This step's gradient; the same number of elements at every step.

        Returns
        -------
        Sketch
            The sketch to send, with the step's seed.

        Raises
        ------
        ShapeMismatchError
            A gradient whose size differs from the earlier steps'.
        """
        return self._advance(grad)[0]

    def __repr__(self) -> str:
        return (f"ErrorFeedback(ratio={float(self._ratio):g}, seed={self._seed}, "
                f"step={self._step})")

"""Packing trits into the formats of docs/formats.md, and back.

``pack`` works along the last axis and keeps the logical shape; each row is
padded on its own to a whole storage unit:

============  ======================================  =============
format        storage                                 bits per trit
============  ======================================  =============
``"2bit"``    uint8, 4 trits per byte, code t + 1     2
``"base3"``   uint8, 5 trits per byte (GGUF TQ1_0)    1.6
``"bitplane"`` uint64 plus and minus planes            2
============  ======================================  =============
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _formats
from ._dispatch import call, host_cpu, kernel, place, resolve_device
from ._formats import FORMATS, Format, get_format
from ._interop import (
    HOST,
    Origin,
    as_rows,
    contiguous,
    dask_layer,
    is_cuda_array,
    is_dask,
    native,
    origin,
    take,
    to_host,
)
from ._kernels.shared.packing import bad_unit
from ._validate import (
    leading_key,
    native_order,
    owned,
    raise_invalid_trits,
    shape_tuple,
    trit_array,
)
from .errors import FormatError, InvalidTritsError
from .typing import Device
from .typing import Format as FormatName

# Internal API: the private names other modules use (tests/test_architecture_seams.py):
# quantize, matmul, vsa/, io/gguf/blocks.py and the Dask layer (_dask/) read a PackedTrits' encoded
# buffer, its Format, the framework its results go back to and whether its bytes were checked;
# vsa/_hv.py wraps a host kernel's bit-plane rows (_host_result); vsa/algebra.py reads two
# PackedTrits' buffers and shapes and wraps a one-vector op's result (_result_like).
_INTERNAL_API = ("PackedTrits._data", "PackedTrits._encoded", "PackedTrits._format",
                 "PackedTrits._host_result", "PackedTrits._like", "PackedTrits._result_like",
                 "PackedTrits._shape", "PackedTrits._valid")

__all__ = ["FORMATS", "PackedTrits", "nbytes", "pack", "unpack"]

_CORRUPT = {
    "2bit": "2bit codes are 0, 1 or 2, and padding is code 1",
    "base3": "not a canonical base-3 byte, or padding that is not trit 0",
    "bitplane": "a trit with both its plus and minus bit set, or padding bits set",
}


class PackedTrits:
    """Trits packed along the last axis: a buffer, a logical shape and a format.

    Build one with :func:`pack`, or wrap bytes from elsewhere with
    ``PackedTrits(data, shape, format)``; the buffer's dtype and shape are
    checked here, its codes when it is unpacked or converted.

    Parameters
    ----------
    data : array_like, GPU array or Dask array
        ``(..., nbytes)`` uint8 for "2bit" and "base3", ``(..., 2, nwords)``
        uint64 (plus plane, then minus plane) for "bitplane". A Dask array makes
        a lazy PackedTrits (what :func:`pack` returns for Dask input): its packed
        axes are made one chunk each (rechunked when split) and its codes are
        checked in the tasks that read them.
    shape : int or tuple of int
        The logical shape of the trits (rank >= 1).
    format : {"2bit", "base3", "bitplane"}
        The packed format.
    copy : bool, optional
        The object owns the bytes its kernels read, read-only (``p.data`` cannot
        be written): by default a host buffer that could still be written
        through another reference (the caller's array) is copied, and one that
        cannot (read-only all the way down, e.g. over ``bytes`` or a read-only
        memmap) is wrapped. ``copy=False`` wraps without copying and trusts the
        caller never to change the bytes (they are checked on first use only);
        ``copy=True`` always copies. GPU buffers are wrapped as they are (a strided
        one is copied C-contiguous, on the GPU).

    Raises
    ------
    FormatError
        An unknown format, or a buffer whose dtype or shape does not fit ``shape``.
    ShapeMismatchError
        A shape of rank 0 or with a negative size.
    TypeError
        A shape that is not made of integers.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> p = tn.pack(np.array([[1, 0, -1, 1, 1]], dtype=np.int8))
    >>> p
    PackedTrits(shape=(1, 5), format='2bit', nbytes=2, device='cpu')
    >>> p.data
    array([[134,  86]], dtype=uint8)
    >>> tn.PackedTrits(p.data, (1, 5), "2bit").unpack()
    array([[ 1,  0, -1,  1,  1]], dtype=int8)
    """

    __slots__ = ("_data", "_format", "_like", "_shape", "_valid")

    def __init__(self, data: Any, shape: tuple[int, ...] | int, format: FormatName = "2bit", *,
                 copy: bool | None = None) -> None:
        fmt = get_format(format)
        shape = shape_tuple(shape)
        like = origin(data)
        data = native(data)
        if is_dask(data):
            data = data.rechunk({ax: -1 for ax in range(data.ndim - fmt.planes, data.ndim)})
        elif is_cuda_array(data):
            data = contiguous(data)  # a strided GPU buffer is copied on the GPU
        else:
            src = np.asarray(data)
            data = owned(native_order(np.ascontiguousarray(src)), copy, source=src)
        expected = fmt.data_shape(shape)
        if data.dtype != fmt.dtype or tuple(data.shape) != expected:
            raise FormatError(
                f"a {fmt.name!r} buffer for shape {shape} must be {fmt.dtype} of shape "
                f"{expected}, got {data.dtype} of shape {tuple(data.shape)}"
            )
        self._fill(data, shape, fmt, valid=False, like=like)

    def _fill(self, data: Any, shape: tuple[int, ...], fmt: Format, *, valid: bool,
              like: Origin) -> None:
        self._data = data
        self._shape = shape
        self._format = fmt
        self._valid = valid  # codes checked (see ensure_valid), or written by an encoder
        self._like = like  # the framework results of unpack() come back in

    @classmethod
    def _encoded(cls, data: Any, shape: tuple[int, ...], format: str,
                 like: Origin = HOST) -> PackedTrits:
        """A PackedTrits of data that tritnum's encoders just wrote: known to be valid.

        ``data`` (the kernel's rows) is placed where ``like`` lives and shaped for
        ``shape``; :func:`unpack` hands trits back in ``like``'s kind.
        """
        fmt = get_format(format)
        if like is not HOST or type(data) is not np.ndarray:
            if not is_dask(data):
                data = like.native(data)
        if type(data) is np.ndarray and data.dtype == fmt.dtype and data.flags.c_contiguous:
            # tritnum's own buffer: nothing to check or copy
            return cls._host_result(data, tuple(map(int, shape)), fmt, like)
        if not is_dask(data):
            data = data.reshape(fmt.data_shape(shape))
        packed = cls(data, shape, format, copy=False)
        packed._valid, packed._like = True, like
        return packed

    @classmethod
    def _host_result(cls, rows: np.ndarray, shape: tuple[int, ...], fmt: Format,
                     like: Origin = HOST) -> PackedTrits:
        """:meth:`_encoded` of a kernel's fresh C-contiguous NumPy rows of ``fmt``'s dtype.

        Called directly by the one-vector ops, whose ``shape`` holds Python ints and
        whose rows need no check or conversion (a bit-plane bind at d = 256 spent 1.5 of
        its 4.2 µs in the checks of :meth:`_encoded`).
        """
        data = rows.reshape(fmt.data_shape(shape))  # a view only this object holds
        data.setflags(write=False)
        packed = cls.__new__(cls)
        packed._fill(data, shape, fmt, valid=True, like=like)
        return packed

    def _result_like(self, rows: np.ndarray) -> PackedTrits:
        """A host PackedTrits of this one's shape and format over a kernel's fresh ``rows``.

        ``rows``: C-contiguous, this buffer's dtype and size, as ``(R, ...)`` rows or
        in the buffer's shape already. The one-vector ops' result: 0.3-0.4 µs less than
        :meth:`_host_result`, which computes the buffer's shape again and reshapes.
        """
        data = self._data
        if rows.ndim != data.ndim:
            rows = rows.reshape(data.shape)
        rows.setflags(write=False)  # a buffer only the result holds
        packed = PackedTrits.__new__(PackedTrits)  # _fill's slots, without a call
        packed._data, packed._shape, packed._format = rows, self._shape, self._format
        packed._valid, packed._like = True, HOST
        return packed

    @classmethod
    def _restore(cls, data: Any, shape: tuple[int, ...], format: str, valid: bool,
                 like: Origin) -> PackedTrits:
        """Unpickle: a PackedTrits owning the unpickled buffer, read-only, where it lived."""
        packed = cls(data if is_dask(data) else like.native(data), shape, format, copy=False)
        packed._valid, packed._like = valid, like
        return packed

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the packed buffer (host bytes of a GPU one), not trits: compact for Dask."""
        data = self._data if is_dask(self._data) else to_host(self._data)
        return PackedTrits._restore, (data, self._shape, self.format, self._valid, self._like)

    # Dask's collection protocol, for a PackedTrits over a Dask array (others are not
    # collections: ``__dask_graph__`` is None). ``dask.compute``/``client.compute`` give an
    # in-memory PackedTrits, ``dask.persist``/``client.persist`` a lazy one over the persisted
    # chunks; both keep what is known of the codes (written by tritnum's encoders, or checked),
    # so that the tasks of a search of a persisted memory do not check them again.
    def __dask_graph__(self) -> Any:
        return self._data.__dask_graph__() if is_dask(self._data) else None

    def __dask_keys__(self) -> Any:
        return self._data.__dask_keys__()

    def __dask_layers__(self) -> Any:
        return self._data.__dask_layers__()

    def __dask_tokenize__(self) -> Any:
        return dask_layer().packed_token(self._data, self._shape, self.format, self._valid)

    @property
    def __dask_optimize__(self) -> Any:
        return self._data.__dask_optimize__

    @property
    def __dask_scheduler__(self) -> Any:
        return self._data.__dask_scheduler__

    def __dask_postcompute__(self) -> tuple[Any, tuple[Any, ...]]:
        finalize, args = self._data.__dask_postcompute__()
        return _computed, (finalize, args, self._shape, self.format, self._valid)

    def __dask_postpersist__(self) -> tuple[Any, tuple[Any, ...]]:
        rebuild, args = self._data.__dask_postpersist__()
        return _persisted, (rebuild, args, self._shape, self.format, self._valid, self._like)

    @property
    def data(self) -> Any:
        """The packed buffer (NumPy array, numba device array on the GPU, or Dask array)."""
        return self._data

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape of the trits."""
        return self._shape

    @property
    def format(self) -> str:
        """The format name."""
        return self._format.name

    @property
    def ndim(self) -> int:
        """Number of logical dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of trits."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed buffer."""
        return int(self._data.nbytes)

    @property
    def device(self) -> str:
        """``"cuda"`` when the buffer lives on the GPU, else ``"cpu"``."""
        return "cuda" if is_cuda_array(self._data) else "cpu"

    def unpack(self, *, device: Device = "auto") -> Any:
        """The trits as int8 of :attr:`shape`; see :func:`unpack`.

        Parameters
        ----------
        device : {"auto", "cpu", "cuda", "numpy"}
            Where to run; ``"auto"`` follows the default device and the data.

        Returns
        -------
        numpy.ndarray or GPU array
            int8 trits of :attr:`shape`, where the packed buffer lives.
        """
        return unpack(self, device=device)

    def to(self, format: FormatName, *, device: Device = "auto") -> PackedTrits:
        """The same trits in another format, re-encoded without unpacking to int8.

        Parameters
        ----------
        format : {"2bit", "base3", "bitplane"}
            The format to re-encode into.
        device : {"auto", "cpu", "cuda", "numpy"}
            Where to run; ``"auto"`` follows the default device and the data.

        Returns
        -------
        PackedTrits
            ``self`` when ``format`` is already the format, else a new one, on
            the same device.

        Raises
        ------
        InvalidTritsError
            Corrupt codes in the buffer.
        FormatError
            An unknown format.

        Examples
        --------
        >>> import numpy as np, tritnum as tn
        >>> p = tn.pack(np.array([1, -1, 0], dtype=np.int8)).to("bitplane")
        >>> p.data
        array([[1],
               [2]], dtype=uint64)
        """
        dst = get_format(format)
        if dst is self._format:
            return self
        if is_dask(self._data):
            return dask_layer().convert(self, dst, device)
        dev = resolve_device(device, self._data)
        data = as_rows(self._data, self._format.planes)
        out, ok = call("convert", dev, data, self._format, dst, self._shape[-1])
        if not (self._valid or ok):  # known-good codes: the GPU's flag is never read
            _raise_corrupt(self, dev)
        return PackedTrits._encoded(out, self._shape, dst.name, self._like)

    def __repr__(self) -> str:
        return (
            f"PackedTrits(shape={self._shape}, format={self.format!r}, "
            f"nbytes={self.nbytes}, device={self.device!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackedTrits):
            return NotImplemented
        return (
            self._shape == other._shape
            and self._format is other._format
            and np.array_equal(to_host(self._data), to_host(other._data))
        )

    __hash__ = None  # type: ignore[assignment]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            "a PackedTrits is not an array of trits: call tn.unpack(p) (or p.unpack()) for "
            "the int8 trits, or use p.data for the packed buffer"
        )

    def __len__(self) -> int:
        return self._shape[0]

    def __getitem__(self, key: Any) -> PackedTrits:
        """Rows on the leading axes, still packed: ``p[0]``, ``p[2:5]``, ``p[idx]``.

        The last (packed) axis cannot be indexed; unpack first. Index arrays
        (NumPy, torch or GPU integer arrays, e.g. search hits) gather rows where
        the buffer lives: on the GPU for a GPU buffer.
        """
        lead = self._shape[:-1]
        key = leading_key(key, lead, "PackedTrits")
        new_lead = np.broadcast_to(np.empty((), np.bool_), lead)[key].shape
        tail = tuple(self._data.shape)[len(lead):]  # GPU shapes may refuse negative indices
        data = take(self._data, key, len(lead))
        packed = PackedTrits(data.reshape((*new_lead, *tail)), (*new_lead, self._shape[-1]),
                             self.format, copy=False)  # rows of a buffer this object owns
        packed._valid = self._valid
        packed._like = self._like
        return packed


def _computed(results: Any, finalize: Any, args: tuple[Any, ...], shape: tuple[int, ...],
              format: str, valid: bool) -> PackedTrits:
    """A computed lazy PackedTrits: its buffer in memory, the codes known as before."""
    return PackedTrits._restore(finalize(results, *args), shape, format, valid, HOST)


def _persisted(dsk: Any, rebuild: Any, args: tuple[Any, ...], shape: tuple[int, ...],
               format: str, valid: bool, like: Origin, rename: Any = None) -> PackedTrits:
    """A persisted lazy PackedTrits: over the persisted chunks, the codes known as before."""
    return PackedTrits._restore(rebuild(dsk, *args, rename=rename), shape, format, valid, like)


CHECK_BLOCK_TRITS = 1 << 22  # rows checked at a time by ensure_valid and the error path


def _first_bad_block(packed: PackedTrits, device: str) -> int | None:
    """The first row of the first block of rows holding a corrupt unit (the fast kernel's scan)."""
    fmt = packed._format
    rows = as_rows(packed.data, fmt.planes)
    n = packed.shape[-1]
    step = max(1, CHECK_BLOCK_TRITS // max(n, 1))
    for r0 in range(0, rows.shape[0], step):
        if not call("unpack", device, rows[r0:r0 + step], fmt, n)[1]:
            return r0
    return None


def _raise_corrupt(packed: PackedTrits, device: str, r0: int | None = None) -> None:
    """Name the first corrupt unit, decoding only the row that holds it.

    The fast kernel finds the first bad block of rows (``r0``, when the caller
    has not already) and halves it down to one row; only that row is decoded
    in NumPy to name the unit, a window of it at a time (:func:`bad_unit`).
    """
    fmt = packed._format
    n = packed.shape[-1]
    rows = as_rows(packed.data, fmt.planes)
    step = max(1, CHECK_BLOCK_TRITS // max(n, 1))
    if r0 is None:  # one block (a single long row...): it is the bad one, no second decode
        r0 = 0 if rows.shape[0] <= step else _first_bad_block(packed, device)
    lo, hi = r0, min(rows.shape[0], r0 + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if call("unpack", device, rows[lo:mid], fmt, n)[1]:
            lo = mid
        else:
            hi = mid
    row = to_host(rows[lo:lo + 1])
    unit = bad_unit(row, fmt, n)[1]
    lead = packed.shape[:-1]
    where = (*np.unravel_index(lo, lead), unit) if lead else (unit,)
    where = tuple(int(i) for i in where)
    if fmt.planes == 2:
        plus, minus = row[0, 0, unit], row[0, 1, unit]
        found = f"word {where} has plus={plus:#018x}, minus={minus:#018x}"
    else:
        found = f"byte {where} = {row[0, unit]:#04x}"
    raise InvalidTritsError(f"corrupt {fmt.name!r} data: {found}: {_CORRUPT[fmt.name]}")


def nbytes(shape: tuple[int, ...] | int, format: FormatName = "2bit") -> int:
    """Bytes that trits of ``shape`` take packed in ``format`` (plan before packing).

    Parameters
    ----------
    shape : int or tuple of int
        The logical shape of the trits (rank >= 1).
    format : {"2bit", "base3", "bitplane"}
        The packed format.

    Returns
    -------
    int
        Bytes of the packed buffer, as :attr:`PackedTrits.nbytes` would report.

    Raises
    ------
    ShapeMismatchError
        A shape of rank 0 or with a negative size (TypeError: not integers).

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.nbytes((4096, 11008)), tn.nbytes((4096, 11008), "base3")
    (11272192, 9019392)
    >>> tn.nbytes(65, "bitplane")  # two uint64 words per plane
    32
    """
    fmt = get_format(format)
    return math.prod(fmt.data_shape(shape_tuple(shape))) * fmt.dtype.itemsize


def pack(trits: Any, format: FormatName = "2bit", *, device: Device = "auto") -> PackedTrits:
    """Pack trits along the last axis into ``format``.

    Parameters
    ----------
    trits : array_like of int, or GPU array
        Values in {-1, 0, +1}, any integer dtype, rank >= 1; read-only and
        non-contiguous arrays are read in place where possible.
    format : {"2bit", "base3", "bitplane"}
        The storage format (docs/formats.md).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; ``"auto"`` follows the default device and the data.

    Returns
    -------
    PackedTrits
        On the GPU when ``trits`` was, else on the host. For a Dask array, a lazy
        PackedTrits: its ``data`` is a Dask array of the packed buffer, chunked as
        ``trits`` along the leading axes (the last axis whole in each chunk: a
        rechunk when it was split); values are checked as the tasks run.

    Raises
    ------
    InvalidTritsError
        A value outside {-1, 0, 1}; the message names the first one.
    TypeError
        Float, complex, bool or object input (use :func:`tritnum.quantize`).
    FormatError
        An unknown format.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> t = np.array([-1, 0, 1, 1, 0, -1, 0], dtype=np.int8)
    >>> tn.pack(t).data  # codes t + 1, four per byte, low bits first
    array([164,  81], dtype=uint8)
    >>> tn.pack(t, "base3").data
    array([55, 43], dtype=uint8)
    >>> tn.unpack(tn.pack(t, "bitplane"))
    array([-1,  0,  1,  1,  0, -1,  0], dtype=int8)
    """
    fmt = _formats.FORMATS.get(format) if type(format) is str else None
    if (type(trits) is np.ndarray and trits.dtype == _INT8 and fmt is not None
            and trits.ndim and trits.size and trits.flags.c_contiguous and host_cpu(device)):
        # a NumPy int8 array on the CPU, classified once (1024 trits: 6.0 -> 3.3 µs)
        data, ok = kernel("pack", "cpu")(trits.reshape(-1, trits.shape[-1]), fmt)
        if not ok:
            raise_invalid_trits(trits)
        return PackedTrits._host_result(data, trits.shape, fmt)
    fmt = get_format(format)
    a = trit_array(trits)
    if is_dask(a):
        return dask_layer().pack(a, fmt, device)
    dev = resolve_device(device, a)
    data, ok = call("pack", dev, as_rows(a), fmt)
    if not ok:
        raise_invalid_trits(a)
    return PackedTrits._encoded(data, a.shape, fmt.name, origin(trits))


_INT8 = np.dtype(np.int8)


def ensure_valid(packed: PackedTrits, device: str) -> None:
    """Check the codes of ``packed`` once (kernels that read codes directly need it).

    Buffers that tritnum's encoders wrote are valid already; a wrapped buffer is
    checked on first use, a block of rows at a time, and remembered as checked.
    Raises :class:`~tritnum.errors.InvalidTritsError` naming the first bad unit.
    """
    if packed._valid:
        return
    r0 = _first_bad_block(packed, device)
    if r0 is not None:
        _raise_corrupt(packed, device, r0)
    packed._valid = True


def unpack(packed: PackedTrits, *, device: Device = "auto") -> Any:
    """Unpack to an int8 array of the original shape (the exact inverse of :func:`pack`).

    Parameters
    ----------
    packed : PackedTrits
        From :func:`pack`, or wrapping a buffer from elsewhere.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run; ``"auto"`` follows the default device and the data.

    Returns
    -------
    numpy.ndarray, GPU array or Dask array
        int8 trits of ``packed.shape``, where ``packed.data`` lives (a lazy Dask
        array, chunked as the buffer, for a lazy PackedTrits).

    Raises
    ------
    InvalidTritsError
        A code no encoder writes (2bit code 3, a non-canonical base3 byte, both
        bitplane bits set, non-zero padding), naming the first bad unit.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.unpack(tn.PackedTrits(np.array([[86]], dtype=np.uint8), (1, 2), "2bit"))
    array([[1, 0]], dtype=int8)
    """
    if not isinstance(packed, PackedTrits):
        raise TypeError(
            f"unpack takes a tn.PackedTrits (from tn.pack, or tn.PackedTrits(data, shape, "
            f"format) for a buffer from elsewhere), got {type(packed).__name__}"
        )
    data = packed._data
    if type(data) is np.ndarray and packed._like is HOST and data.size and host_cpu(device):
        # host data handed back as NumPy, classified once (1024 trits: 3.8 -> 2.0 µs)
        fmt = packed._format
        rows = data.reshape(-1, *data.shape[data.ndim - fmt.planes:])
        out, ok = kernel("unpack", "cpu")(rows, fmt, packed._shape[-1])
        if not (packed._valid or ok):
            _raise_corrupt(packed, "cpu")
        return out.reshape(packed._shape)
    if is_dask(packed.data):
        return dask_layer().unpack(packed, device)
    return place(unpack_native(packed, device), packed._like)


def unpack_native(packed: PackedTrits, device: str = "auto") -> Any:
    """:func:`unpack` as kernels hold arrays: NumPy, or numba where ``packed.data`` lives."""
    out = unpack_rows(packed, resolve_device(device, packed.data))
    return packed._like.native(out).reshape(packed.shape)


def unpack_rows(packed: PackedTrits, dev: str) -> Any:
    """The int8 trits ``(rows, n)`` of ``packed`` where the kernel of ``dev`` leaves them."""
    fmt: Format = packed._format
    out, ok = call("unpack", dev, as_rows(packed.data, fmt.planes), fmt, packed.shape[-1])
    if not (packed._valid or ok):  # known-good codes: the GPU's flag is never read
        _raise_corrupt(packed, dev)
    return out


FORMATS = tuple(FORMATS)

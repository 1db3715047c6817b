"""Hand-written LLVM IR for the CPU kernels: every numba ``@intrinsic`` of tritnum lives here.

One module per job:

- :mod:`.gemv`: the 2bit GEMV's SIMD dot products and decoder (LLVM vector IR), built from
  :mod:`.gemv_target` (the block layout and each level's target), :mod:`.dot_float` (float
  trits times float32 activations) and :mod:`.dot_int8` (codes times int8 activations).
- :mod:`.dot_q8k`: llama.cpp's TQ2_0 x Q8_K dots on the GEMV's blocks, bit for bit.
- :mod:`.popcount`: popcounts, of one word and of tiles of query x memory bit-plane rows.
- :mod:`.bundle`: bit-sliced counts of a column block over many bit-plane rows (bundling).
- :mod:`.planes`: int8 trits to bit-plane words, 64 at a time.
- :mod:`.packing`: int8 trits to "2bit" and "base3" bytes and back, bit-plane words back to
  trits, and the checked copy of int8 trits (dense ``permute``), a vector at a time.
- :mod:`.gguf`: the TQ2_0/TQ1_0 block encoders (float32 values to code bytes).
- :mod:`.unaligned`: word loads and stores at any byte offset, and loads of a word's first bytes.
- :mod:`.cache`: cache control, prefetching rows and streaming (non-temporal) stores.
- :mod:`.spin`: atomic loads and stores, ``pause``, ``sched_yield`` and the cycle counter,
  for the thread pool's spin-waits (``cpu._parallel``).
- :mod:`.pool`: the pool's steps inside compiled kernels, built from them: a claimed
  call's chunk claims and its helper's last wait, a native call's opening and closing.
- :mod:`.calls`: an address as a pointer, and calls at an address of a C function or of a
  compiled numba function (the pool's helpers running the GEMV's C functions, which call
  the GEMV kernels, ``cpu.gemv_native``).

This module holds the IR helpers they share: the scalar types, :func:`vector`,
:func:`splat` constants and :func:`broadcast` of a run-time scalar, the one pointer
helper :func:`pointer`, :func:`load`, :func:`store`, :func:`masked_load` and
:func:`horizontal_sum`. Nothing here is bounds-checked: the callers keep every access in
bounds.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()


def vector(t: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(t, n)


def splat(t: ir.Type, n: int, v: int) -> ir.Constant:
    return ir.Constant(vector(t, n), [ir.Constant(t, v)] * n)


def broadcast(builder, value, n: int):
    """The run-time scalar ``value`` in every lane of an ``n``-lane vector."""
    one = builder.insert_element(ir.Constant(vector(value.type, n), None), value,
                                 ir.Constant(I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(vector(I32, n), [0] * n))


def pointer(context, builder, arrty, arr, offset, elt):
    """Pointer to element ``offset`` of array ``arr`` (numba type ``arrty``) seen as ``elt``.

    With ``elt = I8`` the offset is in bytes; bitcast the result for a wider access.
    """
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(builder.bitcast(data, elt.as_pointer()), [offset])


def load(builder, base, offset, ty, align):
    return builder.load(builder.bitcast(builder.gep(base, [offset]), ty.as_pointer()),
                        align=align)


def store(builder, value, base, offset, align):
    """Store ``value`` at element ``offset`` of pointer ``base``: :func:`load`'s counterpart."""
    builder.store(value, builder.bitcast(builder.gep(base, [offset]), value.type.as_pointer()),
                  align=align)


def masked_load(builder, ptr, mask):
    """Load the vector at ``ptr`` (a vector pointer), only the lanes ``mask`` (``<n x i1>``) sets.

    The other lanes read as 0 and never touch memory (``llvm.masked.load``: a masked
    ``vmovdqu64`` on AVX-512, ``vpmaskmov`` on AVX2), so a partial vector at the end of
    an array is read without reading past it.
    """
    vt = ptr.type.pointee
    name = f"v{vt.count}i{vt.element.width}"
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vt, [ptr.type, I32, mask.type, vt]),
        f"llvm.masked.load.{name}.p0{name}")
    return builder.call(fn, [ptr, ir.Constant(I32, 1), mask, ir.Constant(vt, None)])  # any address


def horizontal_sum(builder, v, add):
    n = v.type.count
    while n > 1:
        n //= 2
        lo = builder.shuffle_vector(v, v, ir.Constant(vector(I32, n), list(range(n))))
        hi = builder.shuffle_vector(v, v, ir.Constant(vector(I32, n), list(range(n, 2 * n))))
        v = add(lo, hi)
    return builder.extract_element(v, ir.Constant(I32, 0))

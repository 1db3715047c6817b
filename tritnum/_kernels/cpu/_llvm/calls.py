"""Arrays and calls by address: what a helper thread needs to run a kernel without Python.

:func:`describe` writes arrays' addresses and shapes into int64 words, and
:func:`described_array` makes an array of them again; :func:`call_address` calls a C
function ``int64 f(int64 *words)`` (a ``numba.cfunc``) at an address with the data of
an int64 array; :func:`call_compiled` calls a compiled numba function returning an int64
through its C wrapper (which numba makes for every function it compiles, and at whose
address numba's first-class functions call it too). None checks anything: the callers
(``cpu._parallel``'s hand-off and the GEMV's C functions) keep the addresses, shapes and
the functions' signatures right.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from . import I64, pointer


def _placed(placed: types.Type) -> bool:
    return isinstance(placed, types.BaseTuple) and all(
        isinstance(pair, types.BaseTuple) and len(pair) == 2
        and isinstance(pair[0], types.Integer) and isinstance(pair[1], types.Array)
        for pair in placed)


@intrinsic
def describe(typingctx, words, placed):
    """For each ``(k, a)`` of the tuple ``placed``: ``a``'s address in ``words[k]``, its shape next.

    What ``a.ctypes.data`` and ``a.shape`` would give, in one intrinsic: the same lines
    in numba (one ``literal_unroll`` over the arrays of a GEMV call) took 0.5-0.6 s to
    compile, of the 0.9 s of the first 2-thread GEMV's entry point.
    """
    if not (isinstance(words, types.Array) and words.dtype == types.int64 and _placed(placed)):
        return None
    sig = types.none(words, placed)

    def codegen(context, builder, sig, args):
        for i, (kind, arrty) in enumerate(sig.args[1]):
            pair = builder.extract_value(args[1], i)
            k = context.cast(builder, builder.extract_value(pair, 0), kind, types.int64)
            array = context.make_array(arrty)(context, builder, builder.extract_value(pair, 1))
            values = [builder.ptrtoint(array.data, I64),
                      *cgutils.unpack_tuple(builder, array.shape, arrty.ndim)]
            for j, value in enumerate(values):
                at = builder.add(k, ir.Constant(I64, j))
                builder.store(value, pointer(context, builder, sig.args[0], args[0], at, I64))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic(prefer_literal=True)
def described_array(typingctx, words, k, dtype, ndim):
    """The C-contiguous array of ``dtype`` and ``ndim`` dimensions :func:`describe` put at ``k``.

    Its address in ``words[k]``, its shape in the ``ndim`` words after (``words`` an int64
    pointer, as a C function gets them, ``dtype`` a NumPy scalar type, ``ndim`` a literal
    integer). What ``numba.carray`` of that address and shape gives, less its compiling:
    ``carray`` is an overload, compiled apart for each dtype and rank (0.02 s each, six of
    them at the first 2-thread GEMV).
    """
    if not (words == types.CPointer(types.int64) and isinstance(k, types.Integer)
            and isinstance(dtype, types.NumberClass)
            and isinstance(ndim, types.IntegerLiteral) and ndim.literal_value >= 1):
        return None
    arrty = types.Array(dtype.instance_type, ndim.literal_value, "C")
    sig = arrty(words, k, dtype, ndim)

    def codegen(context, builder, sig, args):
        at = context.cast(builder, args[1], sig.args[1], types.int64)

        def word(j):
            return builder.load(builder.gep(args[0], [builder.add(at, ir.Constant(I64, j))]))

        shape = [word(j + 1) for j in range(arrty.ndim)]
        itemsize = context.get_abi_sizeof(context.get_data_type(arrty.dtype))
        strides = [ir.Constant(I64, itemsize)]
        for extent in reversed(shape[1:]):
            strides.insert(0, builder.mul(strides[0], extent))
        array = context.make_array(arrty)(context, builder)
        data = builder.inttoptr(word(0), array.data.type)
        populate_array(array, data=data, shape=cgutils.pack_array(builder, shape),
                       strides=cgutils.pack_array(builder, strides),
                       itemsize=ir.Constant(I64, itemsize), meminfo=None)
        return array._getvalue()

    return sig, codegen


@intrinsic
def call_address(typingctx, function, words):
    """``f(words.data)`` for the C function ``int64 f(int64 *)`` at the address ``function``."""
    if not (isinstance(function, types.Integer) and isinstance(words, types.Array)
            and words.dtype == types.int64):
        return None
    sig = types.int64(function, words)

    def codegen(context, builder, sig, args):
        kind = ir.FunctionType(I64, [I64.as_pointer()])
        target = builder.inttoptr(args[0], kind.as_pointer())
        return builder.call(target, [pointer(context, builder, sig.args[1], args[1],
                                             ir.Constant(I64, 0), I64)])

    return sig, codegen


@intrinsic
def call_compiled(typingctx, function, arguments):
    """``f(*arguments)``: the C wrapper of a compiled ``int64 f(...)`` at address ``function``.

    The wrapper takes each argument as numba's value of its type (an array's structure by
    value), as ``numba.core.cpu.CPUContext.create_cfunc_wrapper`` declares it: the types of
    ``arguments`` (a tuple) must be those the function was compiled for.
    """
    if not (isinstance(function, types.Integer) and isinstance(arguments, types.BaseTuple)):
        return None
    sig = types.int64(function, arguments)

    def codegen(context, builder, sig, args):
        kinds = sig.args[1].types
        kind = ir.FunctionType(I64, [context.get_value_type(t) for t in kinds])
        target = builder.inttoptr(args[0], kind.as_pointer())
        return builder.call(target, [builder.extract_value(args[1], i)
                                     for i in range(len(kinds))])

    return sig, codegen

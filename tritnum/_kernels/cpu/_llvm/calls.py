"""Arrays and calls by address: what a helper thread needs to run a kernel without Python.

:func:`describe` writes arrays' addresses and shapes into int64 words;
:func:`address_pointer` turns such an address back into a ``void*`` that
``numba.carray`` makes an array of; :func:`call_address` calls a C
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


@intrinsic
def address_pointer(typingctx, address):
    """The ``void*`` at ``address`` (an integer)."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.voidptr(address)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

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

"""Arrays and calls by address: what a helper thread needs to run a kernel without Python.

:func:`address_pointer` turns an address (an int64, as ``a.ctypes.data`` gives it) into
a ``void*`` that ``numba.carray`` makes an array of; :func:`call_address` calls a C
function ``int64 f(int64 *words)`` (a ``numba.cfunc``) at an address with the data of
an int64 array. Neither checks anything: the callers (``cpu._parallel``'s hand-off and the
GEMV's entry points) keep the addresses, shapes and the function's signature right.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import I64, pointer


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

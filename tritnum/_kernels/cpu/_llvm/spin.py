"""What threads sharing work without the GIL need, as LLVM IR: atomics, pause, yield, a clock.

numba has no atomics of its own. :func:`load_acquire` reads an int64 element that
another thread writes (the compiler may neither cache it in a register nor move
later loads before it), :func:`store_release` writes one (after every earlier
write), :func:`fetch_add` adds to one and returns what it held (threads taking
chunks of work from one counter), :func:`compare_exchange` sets one where it holds a
given value (a call taking the thread pool); :func:`emit_pause` writes ``pause`` on x86
(the spinning core yields its pipeline to a sibling hyperthread and saves power),
nothing elsewhere;
:func:`cycles` reads the time-stamp counter on x86 (``rdtsc``: constant rate, cheap,
readable in user mode), 0 elsewhere (the other targets' cycle counters may trap);
:func:`rest` is a round of a spin-wait: ``pause``, or each so many rounds ``sched_yield``
on POSIX systems (from the C library the process has loaded), which gives the core to another
runnable thread, if any; :func:`settle_until` spins until a word is set, for at most so many ticks.
"""

from __future__ import annotations

import os
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import I32, I64, pointer

X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def load_acquire(typingctx, a, i):
    """Element ``i`` of the int64 array ``a``, as an atomic load with acquire order."""
    if not (isinstance(a, types.Array) and a.dtype == types.int64):
        return None
    sig = types.int64(a, types.intp)

    def codegen(context, builder, sig, args):
        at = pointer(context, builder, sig.args[0], args[0], args[1], I64)
        return builder.load_atomic(at, "acquire", 8)

    return sig, codegen


def emit_pause(builder) -> None:
    """``pause`` at the builder's position on x86 (nothing elsewhere)."""
    if X86:
        builder.call(cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause"), [])


@intrinsic
def store_release(typingctx, a, i, v):
    """Element ``i`` of the int64 array ``a`` set to ``v``: an atomic store, release order."""
    if not (isinstance(a, types.Array) and a.dtype == types.int64):
        return None
    sig = types.void(a, types.intp, types.int64)

    def codegen(context, builder, sig, args):
        at = pointer(context, builder, sig.args[0], args[0], args[1], I64)
        builder.store_atomic(args[2], at, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fetch_add(typingctx, a, i, v):
    """Element ``i`` of the int64 array ``a`` before adding ``v`` to it, atomically.

    ``atomicrmw add`` (``lock xadd`` on x86), sequentially consistent: of threads
    adding at once, each reads a different value.
    """
    if not (isinstance(a, types.Array) and a.dtype == types.int64
            and isinstance(v, types.Integer)):
        return None
    sig = types.int64(a, types.intp, types.int64)

    def codegen(context, builder, sig, args):
        at = pointer(context, builder, sig.args[0], args[0], args[1], I64)
        return builder.atomic_rmw("add", at, args[2], "seq_cst")

    return sig, codegen


@intrinsic
def compare_exchange(typingctx, a, i, expected, new):
    """Element ``i`` of the int64 array ``a`` set to ``new`` where it is ``expected``, atomically.

    ``cmpxchg``, sequentially consistent; what the element held (``expected``: it was set).
    """
    if not (isinstance(a, types.Array) and a.dtype == types.int64
            and isinstance(expected, types.Integer) and isinstance(new, types.Integer)):
        return None
    sig = types.int64(a, types.intp, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        at = pointer(context, builder, sig.args[0], args[0], args[1], I64)
        return builder.extract_value(
            builder.cmpxchg(at, args[2], args[3], "seq_cst", "seq_cst"), 0)

    return sig, codegen


@intrinsic
def cycles(typingctx):
    """The time-stamp counter (``llvm.readcyclecounter``) on x86; 0 elsewhere."""
    sig = types.int64()

    def codegen(context, builder, sig, args):
        return emit_cycles(builder)

    return sig, codegen


def emit_cycles(builder) -> ir.Value:
    """:func:`cycles`' code at the builder's position: the counter's value (0 off x86)."""
    if not X86:
        return ir.Constant(I64, 0)
    read = cgutils.get_or_insert_function(builder.module, ir.FunctionType(I64, []),
                                          "llvm.readcyclecounter")
    return builder.call(read, [])


def emit_yield(builder) -> None:
    """``sched_yield()`` on POSIX systems (a ``pause`` elsewhere) at the builder's position."""
    if os.name == "posix":
        builder.call(cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(I32, []), "sched_yield"), [])
    else:
        emit_pause(builder)


def emit_rest(builder, r, every) -> None:
    """:func:`rest`'s code: round ``r`` of a wait (int64 IR values) yields or pauses."""
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    on = builder.icmp_signed("!=", every, zero)
    turn = builder.and_(on, builder.icmp_signed(
        "==", builder.srem(r, builder.select(on, every, one)), builder.sub(every, one)))
    with builder.if_else(turn) as (then, otherwise):
        with then:
            emit_yield(builder)
        with otherwise:
            emit_pause(builder)


@intrinsic
def rest(typingctx, r, every):
    """Round ``r`` of a spin-wait: ``sched_yield`` each ``every`` rounds (0: never), else pause."""
    if not (isinstance(r, types.Integer) and isinstance(every, types.Integer)):
        return None
    sig = types.void(types.int64, types.int64)

    def codegen(context, builder, sig, args):
        emit_rest(builder, args[0], args[1])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def settle_until(typingctx, ready, ticks):
    """Spin (``pause``) until ``ready[0]`` is not 0, for at most ``ticks`` of :func:`cycles`.

    The loop written out here: inlined into the pool's two waits as a numba function,
    it took each 0.03-0.04 s more to compile.
    """
    if not (isinstance(ready, types.Array) and ready.dtype == types.int64
            and isinstance(ticks, types.Integer)):
        return None
    sig = types.void(ready, types.int64)

    def codegen(context, builder, sig, args):
        at = pointer(context, builder, sig.args[0], args[0], ir.Constant(I64, 0), I64)
        start = emit_cycles(builder)
        check = builder.append_basic_block("settle.check")
        wait = builder.append_basic_block("settle.wait")
        done = builder.append_basic_block("settle.done")
        builder.branch(check)
        builder.position_at_end(check)
        late = builder.icmp_signed(">=", builder.sub(emit_cycles(builder), start), args[1])
        with builder.if_then(late):
            builder.branch(done)
        builder.cbranch(builder.icmp_signed("!=", builder.load_atomic(at, "acquire", 8),
                                            ir.Constant(I64, 0)), done, wait)
        builder.position_at_end(wait)
        emit_pause(builder)
        builder.branch(check)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen

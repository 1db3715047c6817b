"""The thread pool's steps inside compiled kernels, as LLVM IR (``cpu._parallel``).

A claimed call's kernel takes its chunks with :func:`claim` and ends with :func:`leave`;
a native call's entry point opens it with :func:`open_native` and closes it with
:func:`close_native`. They were numba functions (inlined or compiled apart): as
intrinsics they compile nothing of their own, and cut 0.4-0.5 s from the first 2-thread
GEMV of a process (issue 29, empty cache). The words they read and write, and their
layout, are defined here; :mod:`.spin` gives the atomics, ``pause``, ``sched_yield`` and
the cycle counter they are built from.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import I64, pointer
from .spin import emit_cycles, emit_pause, emit_rest

# A claimed call's control words: the next task, the chunk size; for helpers only (the
# caller's view stops before them): the caller waits for the helpers, and how long a
# helper waits for that (cycle ticks, spin rounds) before it returns anyway.
NEXT, STEP, CALLER_WAITS, LINGER_TICKS, LINGER_ROUNDS = range(5)
# A native call's words (``_parallel.run_native``): what the call is (NATIVE, or 0 for a
# Python job), the generation it is open for (0 once closed), the helpers inside it, the
# helpers that joined it while more than the caller's share was left, the address of its C
# function, the helpers that may join (slots below it), its tasks; and the token of the call
# that holds the pool (0: none; the pool's ``owner``, ``_parallel._own``).
KIND, OPEN, ACTIVE, JOINED, FUNCTION, HELPERS, TASKS, OWNER = range(8)
NATIVE = 1
YIELD_EVERY = 64  # rounds of pause between two sched_yield (0: never)


def _word(context, builder, arrty, arr, k):
    """In an intrinsic's code: a pointer to int64 element ``k`` (an IR value) of array ``arr``."""
    return pointer(context, builder, arrty, arr, k, I64)


def _at(k: int) -> ir.Constant:
    return ir.Constant(I64, k)


@intrinsic
def open_native(typingctx, words, generation, function, helpers, tasks):
    """A native call's first step, in its entry point: ``helpers`` helpers may run ``function``.

    The call's description and control words are written before; its generation is
    returned. An intrinsic, as :func:`close_native` (each store atomic, release order):
    numba code inlined into the entry points took 0.1-0.2 s of the first 2-thread GEMV.
    """
    arrays = (words, generation)
    if not (all(isinstance(a, types.Array) and a.dtype == types.int64 for a in arrays)
            and all(isinstance(v, types.Integer) for v in (function, helpers, tasks))):
        return None
    sig = types.int64(words, generation, types.int64, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        def release(array, k, value):
            builder.store_atomic(value, _word(context, builder, sig.args[array], args[array],
                                              _at(k)), "release", 8)

        for k, value in ((JOINED, _at(0)), (HELPERS, args[3]), (TASKS, args[4]),
                         (FUNCTION, args[2]), (KIND, _at(NATIVE))):
            release(0, k, value)
        g = builder.add(builder.load_atomic(_word(context, builder, sig.args[1], args[1],
                                                  _at(0)), "acquire", 8), _at(1))
        release(0, OPEN, g)
        release(1, 0, g)
        return g

    return sig, codegen


@intrinsic
def close_native(typingctx, words, g, late):
    """A native call's last step: close it, wait until no helper is inside it, free the pool.

    The helpers that joined it, or 0 when the wait took more than ``late`` ticks (a
    helper's core was taken from it while it held a chunk, of a few µs otherwise: a sign
    of a busy machine, counted as a helper that did not come). The caller yields its core
    every :data:`YIELD_EVERY` rounds while it waits (``pause`` between). The pool is given
    back here, where no signal handler runs: given back in Python, in ``_parallel.run_native``'s
    ``finally``, an interrupt that came just before it left the pool held (a storm of
    signals on a busy machine did), and every later call on one thread.
    """
    if not (isinstance(words, types.Array) and words.dtype == types.int64
            and isinstance(g, types.Integer) and isinstance(late, types.Integer)):
        return None
    sig = types.int64(words, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        def word(k):
            return _word(context, builder, sig.args[0], args[0], _at(k))

        builder.atomic_rmw("add", word(OPEN), builder.neg(args[1]), "seq_cst")
        start = emit_cycles(builder)
        rounds = cgutils.alloca_once_value(builder, _at(0))
        test, wait, done = (builder.append_basic_block(name)
                            for name in ("helpers_inside", "rest", "closed"))
        builder.branch(test)
        builder.position_at_end(test)
        inside = builder.atomic_rmw("add", word(ACTIVE), _at(0), "seq_cst")
        builder.cbranch(builder.icmp_signed("!=", inside, _at(0)), wait, done)
        builder.position_at_end(wait)
        r = builder.load(rounds)
        emit_rest(builder, r, _at(YIELD_EVERY))
        builder.store(builder.add(r, _at(1)), rounds)
        builder.branch(test)
        builder.position_at_end(done)
        in_time = builder.icmp_signed("<=", builder.sub(emit_cycles(builder), start), args[2])
        joined = builder.select(in_time, builder.load_atomic(word(JOINED), "acquire", 8), _at(0))
        builder.store_atomic(_at(0), word(OWNER), "release", 8)
        return joined

    return sig, codegen


@intrinsic
def claim(typingctx, ctl, t1):
    """The next chunk ``[a, b)`` of a claimed call's tasks ``[.., t1)``; none left when ``a >= t1``.

    ``ctl[0]`` is the first task not yet taken, ``ctl[1]`` the chunk size: threads
    claiming at once each get a chunk of their own (an ``atomicrmw add``).
    An intrinsic: as a function (and its ``min``) it took 0.08 s of the first GEMV's
    compile, inlined about as long.
    """
    if not (isinstance(ctl, types.Array) and ctl.dtype == types.int64
            and isinstance(t1, types.Integer)):
        return None
    sig = types.UniTuple(types.int64, 2)(ctl, types.int64)

    def codegen(context, builder, sig, args):
        step = builder.load(_word(context, builder, sig.args[0], args[0], _at(STEP)))
        a = builder.atomic_rmw("add", _word(context, builder, sig.args[0], args[0], _at(NEXT)),
                               step, "seq_cst")
        b = builder.add(a, step)
        b = builder.select(builder.icmp_signed("<", b, args[1]), b, args[1])
        return context.make_tuple(builder, sig.return_type, (a, b))

    return sig, codegen


@intrinsic
def leave(typingctx, ctl):
    """A thread's last step in a claimed call, after its last :func:`claim`.

    A helper (its ``ctl`` goes on past the caller's) waits without the GIL until
    the caller waits for the helpers, or ``_parallel.LINGER_SECONDS``. Returning earlier,
    it takes the GIL just as the caller's own kernel returns and needs it: the
    caller then sleeps on the GIL and wakes 15-50 µs later (measured: a 45 µs
    2-thread GEMV took 55-90 µs). An intrinsic, as :func:`claim` (a function: 0.06 s
    of the first GEMV's compile): at most ``ctl[LINGER_ROUNDS]`` rounds of ``pause``
    and ``ctl[LINGER_TICKS]`` ticks of :func:`.spin.cycles` while ``ctl[CALLER_WAITS]`` is 0.
    """
    if not (isinstance(ctl, types.Array) and ctl.dtype == types.int64 and ctl.ndim == 1):
        return None
    sig = types.void(ctl)

    def codegen(context, builder, sig, args):
        def word(k):
            return _word(context, builder, sig.args[0], args[0], _at(k))

        length = context.make_array(sig.args[0])(context, builder, args[0]).shape
        helper = builder.icmp_signed(">", builder.extract_value(length, 0),
                                     _at(CALLER_WAITS))
        with builder.if_then(helper):
            rounds = cgutils.alloca_once_value(builder, _at(0))
            start, ticks = emit_cycles(builder), builder.load(word(LINGER_TICKS))
            test, wait, done = (builder.append_basic_block(name)
                                for name in ("linger", "pause", "left"))
            builder.branch(test)
            builder.position_at_end(test)
            r = builder.load(rounds)
            stop = builder.or_(
                builder.icmp_signed(">=", r, builder.load(word(LINGER_ROUNDS))),
                builder.icmp_signed("!=", builder.load_atomic(word(CALLER_WAITS), "acquire", 8),
                                    _at(0)))
            late = builder.icmp_signed(">", builder.sub(emit_cycles(builder), start), ticks)
            builder.cbranch(builder.or_(stop, late), done, wait)
            builder.position_at_end(wait)
            emit_pause(builder)
            builder.store(builder.add(r, _at(1)), rounds)
            builder.branch(test)
            builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen

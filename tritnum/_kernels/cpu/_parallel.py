"""Split a kernel's tasks across threads.

The CPU kernels are serial ``nogil`` loops over a range of tasks, cached on
disk, and run here on a small pool of helper threads. They do not use ``prange``:
numba's parallel kernels loaded from its disk cache run about 1.7x slower than
freshly compiled ones (numba issue #8085; measured on these machines: 2bit unpack
of 65 M trits 4.7 ms fresh, 8-10 ms from the cache, 5.3-6.5 ms on this pool), and
a cache that makes every later process slower defeats its purpose.

The hand-off, and why it is built so. On these 2-core KVM guests every sleep costs:
a thread woken from a futex (a condition variable, or the GIL when another thread
holds it) runs 15-50 µs later, against 0.06 ms for half an int8 GEMV at 4096x4096.
A ``concurrent.futures`` pool (a sleeping worker, chunks taken under the GIL) made
2 threads slower than 1. So nothing on the hot path sleeps:

- helpers spin between calls, for :data:`SPIN_SECONDS` after the last one (a
  ``nogil`` loop on an atomic generation counter, ``pause`` between reads,
  ``sched_yield`` every :data:`YIELD_EVERY` rounds), then sleep on a condition;
- a helper that sees a call spins until the caller has released the GIL before it
  takes it (taking it earlier, the helper blocks on the GIL and wakes too late:
  1.07x at 0-2 µs, 1.5x at 4 µs): in a claimed call (below) until the caller's
  kernel claims its first chunk, at most :data:`SETTLE_SECONDS`, by when a caller
  is in its first chunk; in others that long;
- chunks are taken in turn under the GIL, largest first (:func:`_guided`): the
  caller takes the first (half), so it never waits for a helper to start, and a
  helper's GIL hand-offs fall while the caller is in that chunk;
- a helper says it is done (``inside[slot] = 0``) from compiled code after it has
  released the GIL, and the caller spins on that (:data:`WAIT_SECONDS`, then
  sleeps): done from Python, the caller blocked on the GIL the helper still held
  and woke 20 µs late;
- on a loaded machine a helper that comes after the caller's first chunk stays
  out (it would likely be descheduled holding a chunk: median 0.4-16 ms calls at
  load 23), and after :data:`MISSES` calls in a row that no spinning helper joined
  the next :data:`ALONE_CALLS` run on the calling thread alone (no chunking cost;
  a helper woken from its sleep comes late anywhere, so its misses do not count).

The GEMVs go further (:func:`run_claimed`): their kernels take chunks themselves,
from an atomic counter (:func:`._llvm.pool.claim`), so each thread calls its kernel once and
takes the GIL only to enter and to leave it; a helper leaves only once the caller
waits for it without the GIL (:func:`._llvm.pool.leave`). Measured on the int8 GEMV at 4096 x
4096 (quiet: ``chrt -f 1``, medians): ``tn.linear`` on 2 threads 61-62 -> 57-60 µs
(1 thread 85-89 µs: 1.37-1.40x -> 1.45-1.51x), the kernel alone 44 µs against 72.
A helper that settles until the caller's first claim, not a fixed 4 µs, enters
its kernel 2.2 µs after the call starts instead of 5.2 (one process, the two ways
in turn, 1 vs 2 threads: int8 4096 x 4096 1.45 -> 1.48x, 6912 x 2560 1.48 -> 1.65x,
2560 x 2560 1.17 -> 1.27x). What was left is serial: the caller waits 3.8 µs for
the helper to leave (its return to Python, then to its spin), and ``tn.linear``
spends 9-10 µs per call in Python and in the quantizer before the kernel starts
and after it ends.

The 2bit GEMV's kernels go further still (:func:`run_native`): their helpers never
return to Python. A C function (``gemv_native``) rebuilds a call's arrays from addresses
and calls its kernel at another; the caller's one compiled entry point writes those addresses,
opens the call, runs its own share and waits for the helpers, and a helper spinning
between calls (:func:`_idle`) runs the C function where it spins. No thread takes the
GIL inside the call: a helper starts as soon as the call opens (before the caller's
own share), and leaves without waiting for anything. Timeline of a 2-thread int8
kernel call at 4096 x 4096 on the claimed route (Zen 4, medians, µs after
``run_claimed`` is called): caller in its kernel at 5.9, helper at 12.9, helper out
at 100.2, call back at 105.8; the same kernel on 1 thread 165.

Measured (AMD EPYC Zen 5 KVM guest, 2 vCPUs, other sessions' load 10-14; medians,
1 vs 2 threads in one process; "quiet" = this process under ``chrt -f 1`` above
the load): int8 GEMV 4096x4096 kernel 123 -> 74 µs (1.66x; the old pool 1.19x),
``tn.linear`` 144 -> 101 µs (1.43x: its 20 µs of Python before the kernel stay
serial); float GEMV kernel 1.84x, ``tn.linear`` 1.75x (old 1.62x, 1.52x). Under
the load as it is: 0.98-1.00x (old pool 0.80-0.88x); with a spinning process
beside it, 0.98-0.99x (old 0.68-0.80x). numba's own threading layer was not taken:
``prange`` kernels from the cache are slower (above), and its OpenMP pool slows
torch (:func:`tritnum._threads.available`).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ... import _blas
from ..._threads import threads
from ._jit import jit
from ._llvm.calls import call_address
from ._llvm.pool import (
    ACTIVE,
    CALLER_WAITS,
    FUNCTION,
    HELPERS,
    JOINED,
    KIND,
    NATIVE,
    NEXT,
    OPEN,
    OWNER,
    STEP,
    TASKS,
    YIELD_EVERY,
)
from ._llvm.spin import (
    compare_exchange,
    cycles,
    fetch_add,
    load_acquire,
    rest,
    settle_until,
    store_release,
)

# Below this many bytes of input per call, handing work to a thread costs more than it saves.
MIN_PARALLEL_BYTES = 1 << 20
# The same for kernels doing a few instructions per byte (elementwise bit-plane ops). Bind
# of 10,000-trit bit-plane rows on 1 / 2 threads (Zen 5, medians): 200 pairs (1.5 MB moved)
# 27 / 51 µs, 500 pairs (3.8 MB) 51 / 46 µs, 1,000 pairs (7.5 MB) 87 / 64 µs.
MIN_PARALLEL_BYTES_LIGHT = 1 << 22
CHUNKS_PER_THREAD = 4
# How long an idle helper spins before it sleeps, and a caller waiting for a helper's chunk.
SPIN_SECONDS = 200e-6
WAIT_SECONDS = 50e-6
# How long a helper that sees a call waits before it takes the GIL: long enough for the
# caller to be in its first chunk (see the module docstring).
SETTLE_SECONDS = 4e-6
# After MISSES calls in a row that no spinning helper joined in time (a loaded machine),
# the next ALONE_CALLS calls run on the calling thread alone, without the hand-off's cost.
MISSES = 3
ALONE_CALLS = 16
# A claimed call (run_claimed) is cut into about this many chunks per thread, each a
# multiple of CLAIM_MULTIPLE tasks (the GEMVs take 4 weight rows a dot).
CLAIMS_PER_THREAD = 12
CLAIM_MULTIPLE = 8
LINGER_SECONDS = 50e-6  # how long a helper waits for the caller to wait for it (leave)
WORDS = 8  # a native call's words (their layout: ._llvm.pool)
CLOSED = -1  # the owner of a closed pool
DESCRIPTION_WORDS = 32  # a native call's arguments, as its entry point writes them


@jit()
def _spin(flags, value, ticks, rounds, settle, ready, yield_every, words, slot, word):
    """``words[slot] = word``, then spin while some of ``flags`` equals ``value``, for a while.

    For ``ticks`` of :func:`cycles` (where it counts) and at most ``rounds`` rounds;
    then, once none does, until ``ready[0]`` is not 0, at most ``settle`` ticks;
    ``sched_yield`` every ``yield_every`` rounds (0: never). -1 when none does any
    more, else (time ran out) the ticks it spun. A flag, once it differs, is not read
    again: the callers' flags never change back. The store comes first and without
    the GIL, which the caller has released.

    Every wait of the pool but a helper's between calls once native calls came
    (:func:`_idle`, which also runs them) is this one kernel (a caller waiting for its
    helpers, the clock's rate, a helper's wait until then):
    where it replaced four kernels, the first parallel call compiled it in 0.19-0.25 s
    against their 0.54-0.57 s (empty cache, load 3.6).
    """
    i = 0
    store_release(words, slot, word)
    start = cycles()
    for r in range(rounds):
        while i < flags.shape[0] and load_acquire(flags, i) != value:
            i += 1
        if i == flags.shape[0]:
            settle_until(ready, settle)
            return -1
        if cycles() - start > ticks:
            break
        rest(r, yield_every)
    return cycles() - start


_NOWHERE = np.zeros(1, np.int64)  # the word :func:`_spin` stores to when nothing is to be said


def _spin_while_any(flags: np.ndarray, value: int, ticks: int, rounds: int, settle: int = 0,
                    yield_every: int = 0) -> bool:
    """:func:`_spin` with nothing to store: True when no flag equals ``value`` any more."""
    return _spin(flags, value, ticks, rounds, settle, _NOWHERE, yield_every, _NOWHERE, 0,
                 0) < 0


_RATES: tuple[float, float] | None = None  # cycles and spin rounds per second, measured once


def _bound(seconds: float) -> tuple[int, int]:
    """:func:`_spin`'s bound (ticks, rounds) for ``seconds``.

    Where the cycle counter runs (x86), its rate against ``perf_counter``: right
    even when the thread is descheduled while it measures, unlike a count of rounds,
    which is the bound elsewhere.
    """
    cycles_per_second, rounds_per_second = _rates()
    if cycles_per_second > 0:
        return int(cycles_per_second * seconds), 1 << 62
    return 1 << 62, max(1, int(rounds_per_second * seconds))


def _settle() -> int:
    """:func:`_spin`'s ``settle`` for ``SETTLE_SECONDS``: 0 without a cycle counter."""
    return int(_rates()[0] * SETTLE_SECONDS)


def _rates() -> tuple[float, float]:
    global _RATES
    if _RATES is None:
        flag = np.zeros(1, np.int64)
        _spin_while_any(flag, 0, 1 << 62, 1)  # compiled or loaded from the cache
        n = 20000
        t = time.perf_counter()
        c = _spin(flag, 0, 1 << 62, n, 0, _NOWHERE, 0, _NOWHERE, 0, 0)  # the ticks of n rounds
        t = max(time.perf_counter() - t, 1e-9)
        _RATES = c / t, n / t
    return _RATES


@jit()
def _idle(generation, seen, ticks, rounds, settle, ready, yield_every, inside, slot, words,
          description, claims):
    """A helper between calls: ``inside[slot] = 0`` once the GIL is released, then wait for one.

    A native call (:func:`run_native`) it runs here, without the GIL, and waits on for
    the next; a Python call it returns for, ``(True, its generation)``, once ``ready[0]``
    is not 0 or after ``settle`` ticks (:func:`_spin`'s settle); ``(False, the last
    generation seen)`` when ``ticks`` (or ``rounds``) went by without a call. A native
    call still open when it comes (``seen``: it woke for the call, or its spin ran out
    in one) it joins; where it has taken its chunks there already, it finds none left.

    A native call's arrays exist while it is open: the helper says it is ``ACTIVE``
    before it looks whether the call is open, and the caller closes it before it looks
    whether any helper is active (both by atomic read-modify-writes, so neither read is
    taken early), then waits for none to be. ``claims`` are the native calls' control
    words (``NEXT``: how far the threads have claimed).
    """
    store_release(inside, slot, 0)
    if load_acquire(words, KIND) == NATIVE and fetch_add(words, OPEN, 0) == seen:
        seen -= 1  # a native call is open (the helper was woken for it): join it
    start = cycles()
    r = 0
    while r < rounds:
        g = load_acquire(generation, 0)
        if g != seen:
            if load_acquire(words, KIND) != NATIVE:
                settle_until(ready, settle)
                return True, g
            fetch_add(words, ACTIVE, 1)
            helpers = load_acquire(words, HELPERS)
            if fetch_add(words, OPEN, 0) == g and slot < helpers:
                if load_acquire(claims, NEXT) * (helpers + 1) < load_acquire(words, TASKS):
                    fetch_add(words, JOINED, 1)  # in time: more than the caller's share left
                call_address(load_acquire(words, FUNCTION), description)
            fetch_add(words, ACTIVE, -1)
            seen, start, r = g, cycles(), 0
            continue
        if cycles() - start > ticks:
            break
        rest(r, yield_every)
        r += 1
    return False, seen


@jit(inline="always")
def alone(tasks):
    """The control words of a claimed call run alone: its ``tasks`` as one chunk.

    For a kernel that calls a claimed kernel itself (as :func:`run_claimed` calls it alone).
    """
    ctl = np.empty(2, np.int64)
    ctl[NEXT], ctl[STEP] = 0, tasks
    return ctl


def _wait_for_helpers(ctl: np.ndarray, inside: np.ndarray, generation: int, ticks: int,
                      rounds: int) -> bool:
    """The caller of a claimed call: tell its helpers, then wait while any is ``inside`` it.

    Both without the GIL (:func:`_spin`), so a helper leaving (:func:`._llvm.pool.leave`)
    finds it free.
    """
    return _spin(inside, generation, ticks, rounds, 0, _NOWHERE, 0, ctl, CALLER_WAITS, 1) < 0


class _Job:
    """One call's chunks, and their sums in ``results``.

    ``bounds`` None: a claimed call, whose kernel takes ``tasks`` itself, a chunk at a time.
    """

    def __init__(self, kernel: Callable[..., int], args: tuple, bounds: list[int] | None,
                 helpers: int, tasks: int = 0) -> None:
        self.kernel, self.args, self.bounds, self.helpers = kernel, args, bounds, helpers
        self.tasks = tasks
        self.ctl: np.ndarray | None = None  # a claimed call's control words (the last argument)
        self.chunks = 0 if bounds is None else len(bounds) - 1
        self.order = itertools.count()  # next() on it is atomic under the GIL
        self.results = [0] * self.chunks  # a claimed call: each thread's sum, appended
        self.error: BaseException | None = None
        self.waiting = False  # the caller sleeps on the pool's condition
        self.generation = 0
        # the caller is past its first chunk (a claimed call: its kernel returned): helpers
        # coming now stay out
        self.late = False
        self.helped = False  # a helper took a chunk

    def work(self, caller: bool) -> None:
        """Take chunks until none are left."""
        if self.bounds is None:  # the kernel claims them itself: one call on each thread
            # a helper counts as come in time only with more than the caller's share left
            self.helped |= not caller and self.ctl[NEXT] * (self.helpers + 1) < self.tasks
            ctl = self.ctl[:STEP + 1] if caller else self.ctl
            try:
                self.results.append(self.kernel(*self.args, ctl, self.tasks))
            except BaseException as e:  # the caller raises it
                self.error = e
            self.late |= caller
            return
        for i in iter(self.order.__next__, None):
            if i >= self.chunks:
                return
            self.helped |= not caller
            if self.error is None:
                try:
                    self.results[i] = self.kernel(*self.args, self.bounds[i], self.bounds[i + 1])
                except BaseException as e:  # the caller raises it
                    self.error = e
            self.late |= caller


class _Pool:
    """Helper threads that spin on ``generation[0]`` between calls, then sleep on ``cond``.

    ``inside[slot]`` is the generation of the call whose chunks helper ``slot`` is
    taking, 0 when it takes none.
    """

    def __init__(self, helpers: int) -> None:
        self.generation = np.zeros(1, np.int64)
        self.inside = np.zeros(helpers, np.int64)
        # the control words of every claimed call (one at a time); ``claimed[NEXT]`` is
        # reset for each call, so a helper sees the caller's first claim (``_idle``)
        self.claimed = np.array([0, 0, 0, *_bound(LINGER_SECONDS)], np.int64)
        # a native call's words, arguments and control words (run_native)
        self.words = np.zeros(WORDS, np.int64)
        self.description = np.zeros(DESCRIPTION_WORDS, np.int64)
        self.native = np.zeros(STEP + 1, np.int64)
        self.cond = threading.Condition()
        self.sleepers = 0
        self.misses = 0  # calls in a row that no helper took a chunk of
        self.alone = 0  # calls left to run on the calling thread alone
        self.job: _Job | None = None
        # the token of the call that holds the pool (0: none); others run on their own thread.
        # A word of the native calls' words, which a native call frees in compiled code
        self.owner = self.words[OWNER:OWNER + 1]
        self.tokens = itertools.count(1)  # next() on it is atomic under the GIL
        self.closed = False
        # helpers wait in _idle, which runs native calls, once the first one compiled it
        # (run_native); in _spin before (the first parallel call compiles less)
        self.serving = False
        self.helpers = [threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                         name=f"tritnum-{slot}") for slot in range(helpers)]
        for t in self.helpers:
            t.start()

    def close(self) -> None:
        """Stop the helpers (at exit: none may be spinning in compiled code that is freed).

        It waits up to a second for a call still running on another thread, and keeps
        the pool taken: later calls run on their own thread.
        """
        deadline = time.monotonic() + 1
        while _own(self.owner, 0, CLOSED) != 0 and time.monotonic() < deadline:
            time.sleep(1e-3)
        with self.cond:
            self.closed = True
            self.words[KIND] = 0
            self.generation[0] += 1
            self.cond.notify_all()
        for t in self.helpers:
            t.join(1)

    def _serve(self, slot: int) -> None:
        seen = 0
        while not self.closed:
            if self.serving:
                came, seen = _idle(self.generation, seen, *_bound(SPIN_SECONDS), _settle(),
                                   self.claimed, YIELD_EVERY, self.inside, slot, self.words,
                                   self.description, self.native)
            else:  # a native call coming now is joined from _idle at the next round
                came = _spin(self.generation, seen, *_bound(SPIN_SECONDS), _settle(),
                             self.claimed, YIELD_EVERY, self.inside, slot, 0) < 0
            if not came:
                with self.cond:
                    self.sleepers += 1
                    while self.generation[0] == seen:
                        self.cond.wait()
                    self.sleepers -= 1
            seen = int(self.generation[0])
            job = self.job
            if (job is not None and job.generation == seen and slot < job.helpers
                    and not job.late):
                self.inside[slot] = seen  # before it takes a chunk
                job.work(False)
                if job.waiting:  # the caller sleeps: wake it now
                    with self.cond:
                        self.inside[slot] = 0
                        self.cond.notify_all()
                # else _idle says so, with the GIL released: the caller does not wait for it

    def call(self, job: _Job) -> None:
        job.generation = int(self.generation[0]) + 1
        self.claimed[NEXT] = self.claimed[CALLER_WAITS] = 0  # before the helpers see the call
        self.words[KIND] = 0  # a Python job
        try:  # self.job is reset whatever happens once set
            self.job = job
            self.generation[0] = job.generation
            woken = self.sleepers > 0
            if woken:
                with self.cond:
                    self.cond.notify_all()
            job.work(True)
        finally:
            try:
                self._wait(job)
            except BaseException:  # interrupted while a helper is still inside the kernel:
                if job.ctl is not None:  # it claims on from these words, so the next calls
                    self.claimed = self.claimed.copy()  # get others (a stale claim took
                raise  # their rows, and their results kept whatever memory held)
            finally:
                self.job = None
        self.count(job.helped, woken)

    def count(self, helped: bool, woken: bool) -> None:
        """After a call: whether a helper ``helped``, and whether any had to be ``woken``."""
        if helped:
            self.misses = 0
        elif not woken:  # a helper woken from sleep comes late on any machine: no sign of load
            self.misses += 1
            if self.misses >= MISSES:  # the helpers come too late: the next calls go alone
                self.alone, self.misses = ALONE_CALLS, MISSES - 1

    def wake(self) -> bool:
        """Wake the helpers that sleep, for a native call (they join it if still open).

        Whether any slept.
        """
        if not self.sleepers:
            return False
        with self.cond:
            self.words[KIND] = 0
            self.generation[0] += 1
            self.cond.notify_all()
        return True

    def _wait(self, job: _Job) -> None:
        """Until no helper takes chunks of ``job`` (the caller took the last): spin, then sleep."""
        bound = _bound(WAIT_SECONDS)
        if (_spin_while_any(self.inside, job.generation, *bound) if job.ctl is None
                else _wait_for_helpers(job.ctl, self.inside, job.generation, *bound)):
            return
        with self.cond:
            job.waiting = True
            while (self.inside == job.generation).any():
                self.cond.wait(WAIT_SECONDS * 20)  # or a helper that missed ``waiting`` is done


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    """In a forked child: the parent's worker threads did not come along."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


@jit()
def _own(owner, expected, new):
    """``owner[0] = new`` where it holds ``expected``, atomically; what it held.

    A call takes the pool with its own token (``_own(owner, 0, token) == 0``) and gives
    it back with ``_own(owner, token, 0)`` in a ``finally``, which gives it back only if
    this call took it: a lock could not be given back safely there (an interrupt between
    its ``acquire`` and the ``try``, or before the result of ``acquire`` is kept, leaves it
    held, and every later call on one thread: measured under a storm of signals).
    """
    return compare_exchange(owner, 0, expected, new)


def warm_pool(native: bool = True) -> None:
    """Compile (or load from the cache) the pool's kernels, without starting its threads.

    With ``native``, the helpers' wait that runs native calls (:func:`_idle`, 0.2 s to
    compile), which the pool compiles at its first native call, not at its start.
    """
    _rates()
    _own(np.zeros(1, np.int64), 0, 0)
    if native:
        none = np.zeros(1, np.int64)
        _idle(none, 0, 0, 1, 0, none, 0, none, 0, np.zeros(WORDS, np.int64), none, none)


def _get_pool() -> _Pool:
    global _pool
    pool = _pool  # without the lock once made: a call nested on this thread (a signal
    if pool is not None:  # handler's) would wait forever for the lock its outer call holds
        return pool
    with _pool_lock:
        if _pool is None:
            # compiled (or loaded) here, never on a helper: a helper holding numba's compiler
            # lock when the process forks would leave the child's lock held forever
            warm_pool(native=False)
            _pool = _Pool(max(1, numba.config.NUMBA_NUM_THREADS - 1))
        return _pool


@atexit.register
def _close_pool() -> None:
    """Close the pool of this process (a forked child's own, not its parent's), if any."""
    if _pool is not None:
        _pool.close()


def blas_threads() -> int:
    """The BLAS threads for a tritnum call: :func:`threads`, the limit the user set.

    Not the machine's load: OpenBLAS sums in another order on each thread count, so a
    count chosen by load (one thread while other work wants every core: a 64-row float
    GEMM at 4096 x 4096 at load 3-7 took 270-1260 ms with 2 BLAS threads, 36-135 ms with
    1) gave the same call on the same data other bits from one moment to the next, and
    a Dask chunk computed in a worker thread other bits than the same rows in memory.
    On a busy machine, ``tn.set_num_threads(1)`` (or ``tn.limit_threads(1)``) gives
    the BLAS one thread, and fixed bits.
    """
    return threads()


def with_blas_limit(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` whose BLAS calls run on :func:`blas_threads` threads."""
    @functools.wraps(function)
    def limited(*args: Any, **kwargs: Any) -> Any:
        with _blas.limit(blas_threads()):
            return function(*args, **kwargs)

    return limited


def _guided(tasks: int, parts: int) -> list[int]:
    """Chunk bounds: each chunk ``1 / parts`` of the tasks left, down to a smallest size.

    The caller takes the first, largest chunk: a helper that comes a few µs late
    still ends with it, taking the smaller chunks meanwhile, and a helper that
    does not come costs the caller a few more calls (about 1 µs each).
    """
    smallest = max(1, tasks // (2 * parts * CHUNKS_PER_THREAD))
    bounds = [0]
    while bounds[-1] < tasks:
        rest = tasks - bounds[-1]
        bounds.append(bounds[-1] + min(rest, max(smallest, -(-rest // parts))))
    return bounds


def run(kernel: Callable[..., int], tasks: int, nbytes: int, *args: Any,
        light: bool = False) -> int:
    """Call ``kernel(*args, t0, t1)`` over tasks ``[0, tasks)`` and add up what it returns.

    With :func:`threads` threads (``NUMBA_NUM_THREADS``) when the
    input has at least ``MIN_PARALLEL_BYTES`` (``MIN_PARALLEL_BYTES_LIGHT`` for a
    ``light`` kernel). The tasks are cut into chunks (:func:`_guided`) that the
    threads (the calling one too) take in turn: when a core is busy elsewhere, or
    a virtual machine's core is stolen by its host, the other threads take over
    its share instead of waiting for it. While another thread's call holds the
    helpers, and while they keep coming too late (see the module docstring), the
    call runs on the calling thread alone. A kernel's exception is raised here,
    after every chunk a helper took has ended.
    """
    parts = _parts(tasks, nbytes, light)
    total = _share(lambda: _Job(kernel, args, _guided(tasks, parts), parts - 1)) if parts else None
    return kernel(*args, 0, tasks) if total is None else total


def run_claimed(kernel: Callable[..., int], tasks: int, nbytes: int, *args: Any,
                multiple: int = CLAIM_MULTIPLE) -> int:
    """Call ``kernel(*args, ctl, tasks)`` on the threads of :func:`run` and add up what it returns.

    The kernel takes chunks of tasks ``[0, tasks)`` with :func:`._llvm.pool.claim` until none
    are left: each thread calls it once, and takes its chunks without the GIL (a
    thread running a :func:`run` kernel takes the GIL between two chunks, and waits
    for it where another thread holds it). Chunks are ``multiple`` tasks or a multiple
    of it. On one thread one claim takes all.
    """
    parts = _parts(tasks, nbytes, False)

    def claimed() -> _Job:
        job = _Job(kernel, args, None, parts - 1, tasks)
        job.ctl = _get_pool().claimed
        job.ctl[STEP] = _step(tasks, parts, multiple)
        return job

    total = _share(claimed) if parts else None
    return kernel(*args, np.array([0, tasks], np.int64), tasks) if total is None else total


def _step(tasks: int, parts: int, multiple: int) -> int:
    """A claimed call's chunk: about ``CLAIMS_PER_THREAD`` a thread, a multiple of ``multiple``."""
    per_chunk = -(-tasks // (parts * CLAIMS_PER_THREAD))
    return -(-per_chunk // multiple) * multiple


def run_native(entry: Callable[..., int], target: Callable[[], Any],
               kernel: Callable[..., int], tasks: int, nbytes: int, *args: Any,
               multiple: int = CLAIM_MULTIPLE) -> bool:
    """:func:`run_claimed` for a kernel that the helpers run without returning to Python.

    ``kernel(*args, ctl, tasks)`` claims its chunks as there; ``target()`` gives the
    addresses (integers) by which ``entry`` calls it, among them a C function's that
    calls it with the arguments ``entry`` wrote into the pool's description words (called
    for a call on 2+ threads only: it may compile). ``entry(words, generation,
    description, ctl, step, tasks, target, helpers, late, *args)`` describes the
    arguments, opens the call to ``helpers`` helpers (:func:`._llvm.pool.open_native`), runs
    the C function on this thread and closes the call (:func:`._llvm.pool.close_native`,
    ``late`` its bound), all in one compiled call:
    the helpers, which spin in compiled code between calls (:func:`_idle`), start on it
    while this thread enters its own share, and never take the GIL (:func:`run_claimed`'s
    helpers take it to enter and to leave the kernel: 4096 x 4096 int8 GEMV kernel,
    1 -> 2 threads, 1.6x there, 1.9x here, Zen 4). An interrupt cannot leave a helper
    in the arrays: it is taken once the compiled call returns, after the last helper
    left. Alone (:func:`_parts`), the kernel is called here directly. False when
    ``entry`` refused the arguments (-1, before it opened the call): nothing ran.
    """
    parts = _parts(tasks, nbytes, False)
    joined = None
    if parts:
        addresses = target()  # compiled (or loaded) before the pool is taken
        pool = _get_pool()
        if not pool.serving:  # compiled here, never on a helper (see _get_pool)
            warm_pool()
            pool.serving = True
        token = next(pool.tokens)
        try:
            if _own(pool.owner, 0, token) == 0:
                woken = pool.wake()
                joined = entry(pool.words, pool.generation, pool.description, pool.native,
                               _step(tasks, parts, multiple), tasks, addresses, parts - 1,
                               _bound(WAIT_SECONDS)[0], *args)
        finally:
            _own(pool.owner, token, 0)
    if joined is None:  # alone
        kernel(*args, np.array([0, tasks], np.int64), tasks)
        return True
    if joined < 0:
        return False
    pool.count(joined > 0, woken)
    return True


def _parts(tasks: int, nbytes: int, light: bool) -> int:
    """Threads for a call, or 0: the caller runs it alone.

    Alone: small inputs, one thread, and while helpers keep coming too late (see the
    module docstring); also while another thread's call holds the pool (:func:`_share`).
    """
    if nbytes < (MIN_PARALLEL_BYTES_LIGHT if light else MIN_PARALLEL_BYTES):
        return 0
    parts = min(threads(), tasks)
    if parts <= 1:
        return 0
    pool = _get_pool()
    if pool.alone > 0:
        pool.alone -= 1
        return 0
    return parts


def _share(make: Callable[[], _Job]) -> int | None:
    """Run the job ``make()`` on the pool; the sum of its results.

    None when another thread's call holds the pool: nothing ran. The pool is given back
    whatever happens once taken (a ``KeyboardInterrupt`` while the job is made included):
    held, it would leave every later call on one thread (:func:`_own`).
    """
    pool = _get_pool()
    token = next(pool.tokens)
    job = None
    try:
        if _own(pool.owner, 0, token) == 0:
            job = make()
            pool.call(job)
    finally:
        _own(pool.owner, token, 0)
    if job is None:
        return None
    if job.error is not None:
        raise job.error
    return sum(job.results)

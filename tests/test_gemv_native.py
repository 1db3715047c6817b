"""The GEMV's native hand-off (tritnum/_kernels/cpu/gemv_native.py, ``_parallel.run_native``).

On 2 threads the GEMV's helpers run its kernel from compiled code: the results equal
one thread's bit for bit and a helper joins; arguments the C functions do not take go
the claimed route; a helper joins a call still open when it comes, and never a closed
one or one past the thread limit; the caller waits for the helpers inside a call; an
interrupt between calls leaves the pool working; a forked child computes the same. No
timing is asserted (speed is in ``python -m tritnum bench --family matmul``).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numba
import numpy as np
import pytest

import tritnum as tn
from tritnum import _threads
from tritnum._formats import FORMATS
from tritnum._kernels.cpu import _parallel, gemv_native, group_gemv, matmul, q8k
from tritnum._kernels.cpu._llvm import pool
from tritnum._kernels.cpu._llvm.gemv_target import BLOCK_BYTES
from tritnum._kernels.cpu.matmul import _gemv_kernel

P = _parallel
TIMEOUT = 60  # seconds a test calls for before it fails instead of hanging


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads, every call offered to the helper (none run alone after misses)."""
    monkeypatch.setattr(_threads, "available", lambda: 2)
    monkeypatch.setattr(P, "MISSES", 1 << 30)
    P._get_pool().alone = 0


@pytest.fixture
def joins(monkeypatch) -> list[bool]:
    """Whether a helper joined, for each parallel call from now on."""
    seen: list[bool] = []
    count = P._Pool.count

    def recorded(self, helped, woken):
        seen.append(helped)
        count(self, helped, woken)

    monkeypatch.setattr(P._Pool, "count", recorded)
    return seen


def _weights(rng, n, group_size):
    trits = rng.integers(-1, 2, (n, n), dtype=np.int8)
    if group_size is None:
        return tn.TernaryTensor(tn.pack(trits), np.float32(0.05))
    scales = rng.uniform(0.1, 1, (n, n // group_size)).astype(np.float32)
    return tn.TernaryTensor(tn.pack(trits), scales, group_size)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize(("activations", "group_size"),
                         [("int8", None), ("float", None), ("float", 64), ("int8", 128)])
def test_two_threads_equal_one_and_a_helper_joins(two_threads, joins, monkeypatch, rows,
                                                   activations, group_size):
    rng = np.random.default_rng(rows)
    w = _weights(rng, 2048, group_size)  # 1 MiB of codes: the pool's threshold
    x = rng.standard_normal((rows, 2048), dtype=np.float32)
    with _threads.limit(1):
        want = tn.linear(x, w, activations=activations)
    claimed = []
    monkeypatch.setattr(gemv_native, "run_claimed", lambda *a, **k: claimed.append(a))
    joins.clear()  # tn.pack's
    for _ in range(30):
        np.testing.assert_array_equal(tn.linear(x, w, activations=activations), want)
    _until_a_helper_joins(joins, lambda: tn.linear(x, w, activations=activations))
    assert not claimed


@pytest.mark.parametrize("int8", [True, False])
@pytest.mark.parametrize("size", [None, 20, 32, 48, 64, 96, 128, 256, 512])
def test_every_gemv_kernel_on_two_threads_equals_one(two_threads, joins, monkeypatch, int8,
                                                      size):
    """Each GEMV kernel of matmul.py (one scale, groups inside a block or of whole blocks,
    of whole lanes, segments that are not whole blocks) through its C function."""
    rng = np.random.default_rng(size or 1)
    n, rows = 7680, 560  # n a multiple of every size; 1 MiB of codes
    groups = 1 if size is None else n // size
    w = tn.pack(rng.integers(-1, 2, (rows, n), dtype=np.int8)).data
    scales = rng.uniform(0.1, 1, (rows, groups)).astype(np.float32)
    x = (rng.integers(-127, 128, (2, n)).astype(np.int8) if int8
         else rng.standard_normal((2, n), dtype=np.float32))
    xscale = np.float32([0.5, 0.25])
    fmt = FORMATS["2bit"]
    segment = matmul._gemv_segment(fmt, n, groups)
    assert segment and w.nbytes >= P.MIN_PARALLEL_BYTES
    with _threads.limit(1):
        want = matmul._gemv(x, xscale, w, fmt, n, scales, segment)
    claimed = []
    monkeypatch.setattr(gemv_native, "run_claimed", lambda *a, **k: claimed.append(a))
    joins.clear()
    for _ in range(5):
        np.testing.assert_array_equal(matmul._gemv(x, xscale, w, fmt, n, scales, segment), want)
    assert not claimed and len(joins) == 5


@pytest.mark.skipif(q8k.dot_q8k_vnni is None, reason="the CPU lacks the VNNI GEMV of Q8_K "
                    "activations (AVX-512 VNNI or AVX-VNNI)")
def test_q8k_gemv_on_two_threads_equals_one_and_a_helper_joins(two_threads, joins,
                                                                  monkeypatch):
    rng = np.random.default_rng(4)
    w = _weights(rng, 2048, None)  # 1 MiB of codes
    x = rng.standard_normal((1, 2048), dtype=np.float32)
    with _threads.limit(1):
        want = tn.linear(x, w, activations="q8_k")
    claimed = []
    monkeypatch.setattr(gemv_native, "run_claimed", lambda *a, **k: claimed.append(a))
    joins.clear()
    for _ in range(30):
        np.testing.assert_array_equal(tn.linear(x, w, activations="q8_k"), want)
    _until_a_helper_joins(joins, lambda: tn.linear(x, w, activations="q8_k"))
    assert not claimed
    # the last call was described for the helpers: the kernel word holds the q8k kernel
    assert P._get_pool().description[gemv_native.KERNEL] == gemv_native._kernel_address(
        gemv_native._call_q8k, q8k._q8k_gemv, np.int8)
    # arrays the C function does not take (float64 scales) are refused before the call opens
    xl, csum = q8k.laid_out_vnni(np.zeros((1, 256), np.int8), np.zeros((1, 16), np.int16))
    assert gemv_native._enter_q8k(np.zeros(8, np.int64), np.zeros(1, np.int64),
                                  np.zeros(P.DESCRIPTION_WORDS, np.int64),
                                  np.zeros(2, np.int64), 8, 8, (0, 0), 1, 0, xl, csum,
                                  np.ones((1, 1), np.float32), np.zeros((8, 64), np.uint8),
                                  np.ones((8, 1)), False, np.empty((1, 8), np.float32)) == -1


def _until_a_helper_joins(joins, call):
    """``call()`` until a helper joined one (on a loaded machine, not each time)."""
    deadline = time.monotonic() + TIMEOUT
    while not any(joins):
        assert time.monotonic() < deadline, "no helper joined"
        call()


def _problem(rows=64, units=BLOCK_BYTES, int8=True):
    """A small GEMV's arguments (one scale a row) and its result on one thread."""
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 3, (rows, units, 4), dtype=np.uint8)  # 2bit codes: trit + 1
    w = codes[..., 0] | codes[..., 1] << 2 | codes[..., 2] << 4 | codes[..., 3] << 6
    dtype = np.int8 if int8 else np.float32
    xl = rng.integers(-127, 128, (1, 4 * units)).astype(dtype)
    xneg = -xl.reshape(1, 1, -1).sum(axis=-1, dtype=np.int32) if int8 else np.zeros((1, 1),
                                                                                     np.int32)
    args = [xl, xneg, np.full(1, 0.5, np.float32), w, np.full((rows, 1), 0.25, np.float32),
            units, int8, np.zeros((1, rows), np.float32)]
    kernel = _gemv_kernel(units, units, 1, int8)
    kernel(*args, np.array([0, rows], np.int64), rows)
    want = args[-1].copy()
    args[-1][:] = 0
    return kernel, args, want


@pytest.mark.parametrize("int8", [True, False])
def test_refused_arguments_take_the_claimed_route(two_threads, monkeypatch, int8):
    """Arrays the C functions do not take (not C-contiguous, another dtype) are refused
    before the call opens, and the claimed route computes the same."""
    kernel, args, want = _problem(4096, int8=int8)
    claimed = []
    run = P.run_claimed
    monkeypatch.setattr(gemv_native, "run_claimed",
                        lambda *a, **k: claimed.append(run(*a, **k)))
    wide = np.zeros((1, 2 * want.shape[1]), np.float32)
    strided = [*args[:-1], wide[:, ::2]]  # y a view of every other element
    gemv_native.run_gemv(kernel, 4096, 1 << 30, *strided)
    np.testing.assert_array_equal(wide[:, ::2], want)
    assert len(claimed) == 1
    scales = args[4].astype(np.float64)  # another dtype of scales: refused, not misread
    assert gemv_native._enter(np.zeros(8, np.int64), np.zeros(1, np.int64),
                              np.zeros(P.DESCRIPTION_WORDS, np.int64), np.zeros(2, np.int64),
                              8, 4096, (0, 0), 1, 0, *args[:4], scales, *args[5:]) == -1


@pytest.mark.skipif(group_gemv.ROW_TILE is None, reason="the CPU lacks the GEMV of laid-out "
                    "rows (GFNI and VNNI)")
def test_refused_arguments_of_laid_out_rows_take_the_claimed_route(two_threads, monkeypatch):
    rng = np.random.default_rng(9)
    n, rows = 1024, 4096
    packed = tn.pack(rng.integers(-1, 2, (rows, n), dtype=np.int8)).data
    w = group_gemv.GroupPanel(packed, rng.uniform(0.1, 1, (rows, n // 128)).astype(np.float32),
                              n)
    q = rng.integers(-127, 128, (1, n)).astype(np.int8)
    with _threads.limit(1):
        want = group_gemv.gemv_int8(q, np.float32([0.5]), w)
    claimed = []
    run = P.run_claimed
    monkeypatch.setattr(gemv_native, "run_claimed",
                        lambda *a, **k: claimed.append(run(*a, **k)))
    np.testing.assert_array_equal(group_gemv.gemv_int8(q, np.float32([0.5]), w), want)
    assert not claimed
    got = group_gemv.gemv_int8(q, np.float64([0.5]), w)  # float64 scales: refused, not misread
    np.testing.assert_array_equal(got, want)
    assert len(claimed) == 1


def test_a_c_function_is_looked_up_for_calls_on_two_threads_only(two_threads, monkeypatch):
    """A call alone (one thread, small weights) neither compiles nor loads a C function,
    nor the kernel's compilation for it."""
    kernel, args, want = _problem(int8=False)
    looked_up = []
    target = gemv_native._target
    monkeypatch.setattr(gemv_native, "_target", lambda *a: looked_up.append(a) or target(*a))
    with _threads.limit(1):
        gemv_native.run_gemv(kernel, 64, 1 << 30, *args)
    gemv_native.run_gemv(kernel, 64, 1, *args)
    assert not looked_up
    np.testing.assert_array_equal(args[-1], want)
    gemv_native.run_gemv(kernel, 64, 1 << 30, *args)
    assert looked_up == [(gemv_native._call, kernel, np.float32)]
    np.testing.assert_array_equal(args[-1], want)


def test_one_compiled_entry_point_takes_int8_and_float_activations(two_threads):
    """The entry point gets the activations as bytes: int8 and float32 GEMVs on 2 threads
    share its one compilation (each dtype compiled its own, 0.25 s, before), and each
    runs its own dtype's C function on the activations' shape in elements."""
    compiled = []
    for int8 in (True, False):
        kernel, args, want = _problem(4096, int8=int8)
        gemv_native.run_gemv(kernel, 4096, 1 << 30, *args)
        np.testing.assert_array_equal(args[-1], want)
        compiled.append(set(gemv_native._enter_bytes.signatures))
    assert compiled[0] == compiled[1]
    assert all(signature[9] == numba.uint8[:, ::1] for signature in compiled[1])


def test_one_c_function_a_template_and_dtype_calls_every_kernel():
    """The kernels share their template's C function, which calls each at its own address
    (no kernel compiled into a C function: 0.6-0.7 s each, cold, when they were)."""
    one, other = (_gemv_kernel(BLOCK_BYTES, BLOCK_BYTES, groups, True) for groups in (1, 4))
    assert one is not other
    first, second = (gemv_native._target(gemv_native._call, k, np.int8) for k in (one, other))
    assert first[0] == second[0] and first[1] != second[1]
    assert gemv_native._target(gemv_native._call, one, np.float32)[0] != first[0]


def test_a_native_call_frees_the_pool_in_compiled_code():
    """The entry point gives the pool back itself: an interrupt just before
    ``run_native``'s ``finally`` can no longer leave it held."""
    kernel, args, want = _problem()
    words = np.zeros(P.WORDS, np.int64)
    words[P.OWNER] = 7  # a call's token: the pool is held
    target = gemv_native._target(gemv_native._call, kernel, np.int8)
    gemv_native._enter(words, np.zeros(1, np.int64), np.zeros(P.DESCRIPTION_WORDS, np.int64),
                       np.zeros(2, np.int64), 8, 64, target, 0, 1 << 62, *args)
    assert words[P.OWNER] == 0
    np.testing.assert_array_equal(args[-1], want)
    assert P._get_pool().owner.base is P._get_pool().words  # the pool's owner is that word


def _described(int8=True):
    """A small call described and run alone by ``_enter``, then reopened for a helper.

    Its arrays come back last: the description holds their addresses (the control words'
    too), and they must live while it is used.
    """
    kernel, args, want = _problem(int8=int8)
    words, generation = np.zeros(P.WORDS, np.int64), np.zeros(1, np.int64)
    description, ctl = np.zeros(P.DESCRIPTION_WORDS, np.int64), np.zeros(2, np.int64)
    target = gemv_native._target(gemv_native._call, kernel, args[0].dtype.type)
    gemv_native._enter(words, generation, description, ctl, 8, 64, target, 0, 1 << 62, *args)
    np.testing.assert_array_equal(args[-1], want)
    args[-1][:] = 0
    ctl[P.NEXT] = 0
    g = int(generation[0])
    words[[P.KIND, P.OPEN, P.HELPERS, P.TASKS]] = P.NATIVE, g, 1, 64
    return words, generation, description, args[-1], want, g, (args, ctl)


def _helper(words, generation, description, kept, seen, slot=0):
    """``_idle`` on this thread as helper ``slot``, spinning 1 ms after what it ran."""
    ticks, rounds = P._bound(1e-3)
    inside = np.zeros(slot + 1, np.int64)
    return P._idle(generation, seen, ticks, rounds, 0, np.zeros(1, np.int64), 0, inside, slot,
                   words, description, kept[1])


@pytest.mark.parametrize("int8", [True, False])
def test_a_helper_joins_a_call_open_when_it_comes(int8):
    words, generation, description, y, want, g, kept = _described(int8)
    assert _helper(words, generation, description, kept, g) == (False, g)  # woken: seen = g
    np.testing.assert_array_equal(y, want)
    assert words[P.JOINED] == 1 and words[P.ACTIVE] == 0


def test_a_helper_runs_a_new_call_once():
    words, generation, description, y, want, g, kept = _described()
    assert _helper(words, generation, description, kept, g - 1) == (False, g)
    np.testing.assert_array_equal(y, want)
    assert words[P.JOINED] == 1
    words[P.JOINED] = 0
    assert _helper(words, generation, description, kept, g) == (False, g)  # nothing left:
    assert words[P.JOINED] == 0 and words[P.ACTIVE] == 0  # came too late


@pytest.mark.parametrize("case", ["closed", "past the limit", "a Python call"])
def test_a_helper_stays_out_of_calls_not_for_it(case):
    words, generation, description, y, _, g, kept = _described()
    slot = 0
    if case == "closed":
        words[P.OPEN] = 0
    elif case == "past the limit":
        slot = 1  # HELPERS is 1: slot 0 only
    else:
        words[P.KIND] = 0
    came = _helper(words, generation, description, kept, g - 1, slot)
    assert came == ((True, g) if case == "a Python call" else (False, g))
    assert not y.any() and words[P.JOINED] == 0 and words[P.ACTIVE] == 0


@numba.njit(nogil=True)  # another thread writes what it waits on
def _close(words, g, late):
    return pool.close_native(words, g, late)


def test_the_caller_closes_then_waits_for_the_helpers_inside():
    words = np.zeros(P.WORDS, np.int64)
    words[[P.OPEN, P.ACTIVE, P.JOINED]] = 7, 1, 1

    def leave():
        time.sleep(0.02)
        words[P.ACTIVE] = 0

    _close(np.zeros(P.WORDS, np.int64), 0, 0)  # compiled (no helper inside)
    for late, joined in [(1 << 62, 1), (0, 0)]:  # a wait past ``late`` reads as no helper
        words[[P.OPEN, P.ACTIVE]] = 7, 1
        t = threading.Thread(target=leave)
        start = time.perf_counter()
        t.start()
        got = _close(words, 7, late)
        assert time.perf_counter() - start >= 0.015 and words[P.OPEN] == 0
        assert got == (joined if P._rates()[0] > 0 else 1)
        t.join()


class _Interrupt(Exception):
    pass


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_interrupts_between_calls_leave_the_pool_working(two_threads, joins):
    """A signal handler raising every 0.3 ms while 2-thread GEMVs run: every call that
    returns is right, and after the storm the pool is free, closed and helpers join."""
    rng = np.random.default_rng(11)
    w = _weights(rng, 2048, None)
    x = rng.standard_normal(2048, dtype=np.float32)
    with _threads.limit(1):
        want = tn.linear(x, w, activations="int8")
    tn.linear(x, w, activations="int8")  # compiled before the storm (numba's compiler
    # does not survive an exception thrown into it)

    armed = [False]  # raise only inside the try below, once

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise _Interrupt

    old = signal.signal(signal.SIGALRM, handler)
    interrupted = 0
    try:
        signal.setitimer(signal.ITIMER_REAL, 3e-4, 3e-4)
        for _ in range(300):
            try:
                armed[0] = True
                got = tn.linear(x, w, activations="int8")
                armed[0] = False
            except _Interrupt:
                interrupted += 1
                continue
            np.testing.assert_array_equal(got, want)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert interrupted
    pool = P._get_pool()
    assert pool.owner[0] == 0  # free
    assert pool.words[P.OPEN] == 0 and pool.words[P.ACTIVE] == 0
    joins.clear()
    for _ in range(20):
        np.testing.assert_array_equal(tn.linear(x, w, activations="int8"), want)
    _until_a_helper_joins(joins, lambda: tn.linear(x, w, activations="int8"))


def _child_linear(args):
    x, w = args
    with _threads.limit(2):
        return tn.linear(x, w, activations="int8")


def test_a_forked_child_computes_the_same(two_threads):
    rng = np.random.default_rng(13)
    w = _weights(rng, 2048, None)
    x = rng.standard_normal(2048, dtype=np.float32)
    want = tn.linear(x, w, activations="int8")  # the parent's helpers exist and spin
    with mp.get_context("fork").Pool(1) as pool:
        got = pool.map_async(_child_linear, [(x, w)]).get(timeout=120)[0]
    np.testing.assert_array_equal(got, want)


def test_helpers_past_the_thread_limit_stay_out():
    """A pool of 3 helpers (4 threads) under a limit of 2: one helper at most in a call."""
    code = textwrap.dedent("""
        import numpy as np, tritnum as tn
        from tritnum._kernels.cpu import _parallel as P
        rng = np.random.default_rng(0)
        w = tn.TernaryTensor(tn.pack(rng.integers(-1, 2, (2048, 2048), dtype=np.int8)),
                             np.float32(0.05))
        x = rng.standard_normal(2048, dtype=np.float32)
        most = 0
        with tn.limit_threads(2):
            for _ in range(200):
                tn.linear(x, w, activations="int8")
                most = max(most, int(P._get_pool().words[P.JOINED]))
        print(len(P._get_pool().helpers), most)
    """)
    import os

    env = {**os.environ, "NUMBA_NUM_THREADS": "4"}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    helpers, most = map(int, out.stdout.split())
    assert helpers == 3 and most <= 1

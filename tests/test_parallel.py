"""The CPU kernels' thread hand-off (tritnum/_kernels/cpu/_parallel.py).

Every task runs exactly once, on the threads asked for; a helper that slept wakes and
takes chunks; a kernel's exception reaches the caller and leaves the pool working; and
the int8 and float GEMV give the one-thread results while another process keeps a core
busy, and while a Python thread keeps the GIL busy. No timing is asserted (speed is in
``python -m tritnum bench --family matmul``).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import threading
import time
from collections.abc import Iterator

import numba
import numpy as np
import pytest

import tritnum as tn
from tritnum import _threads
from tritnum._kernels.cpu import _parallel
from tritnum._kernels.cpu._llvm import pool
from tritnum._kernels.cpu._llvm.spin import cycles, fetch_add, load_acquire

TIMEOUT = 60  # seconds a test waits for a helper before it fails instead of hanging


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads, and every call offered to the helper (none run alone after misses)."""
    monkeypatch.setattr(_threads, "available", lambda: 2)
    monkeypatch.setattr(_parallel, "MISSES", 1 << 30)
    _parallel._get_pool().alone = 0


def _recorder(calls: list, hold: threading.Event | None = None):
    """A kernel (any callable will do) that records its range and thread, and returns its size."""
    def kernel(tag, t0, t1):
        calls.append((t0, t1, threading.get_ident(), tag))
        if hold is not None and t0 == 0:  # the first chunk waits for a chunk on another thread
            assert hold.wait(TIMEOUT), "no helper thread took a chunk"
        elif hold is not None and threading.get_ident() != threading.main_thread().ident:
            hold.set()
        return t1 - t0
    return kernel


@pytest.mark.parametrize("tasks", [2, 3, 7, 8, 1000])
def test_every_task_once(two_threads, tasks):
    calls: list = []
    assert _parallel.run(_recorder(calls), tasks, 1 << 30, "x") == tasks
    covered = sorted((t0, t1) for t0, t1, _, _ in calls)
    assert covered[0][0] == 0 and covered[-1][1] == tasks
    assert all(a[0] < a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert 2 <= len(calls) <= max(2, 4 * _parallel.CHUNKS_PER_THREAD)


def test_small_inputs_and_one_thread_stay_on_the_caller(two_threads):
    calls: list = []
    assert _parallel.run(_recorder(calls), 100, _parallel.MIN_PARALLEL_BYTES - 1, "x") == 100
    with _threads.limit(1):
        assert _threads.threads() == 1
        assert _parallel.run(_recorder(calls), 100, 1 << 30, "x") == 100
    assert [c[:2] for c in calls] == [(0, 100), (0, 100)]
    assert _threads.threads() == 2


def test_a_sleeping_helper_wakes_and_takes_chunks(two_threads, monkeypatch):
    """Helpers that do not spin sleep at once; each call must wake one."""
    monkeypatch.setattr(_parallel, "SPIN_SECONDS", 0.0)
    for _ in range(3):
        calls: list = []
        hold = threading.Event()
        assert _parallel.run(_recorder(calls, hold), 64, 1 << 30, "x") == 64
        assert len({ident for _, _, ident, _ in calls}) == 2


def test_spin_bounds_without_a_cycle_counter(two_threads, monkeypatch):
    """Where no cycle counter counts (not x86), spins are bounded by rounds, settle by none."""
    monkeypatch.setattr(_parallel, "_RATES", (0.0, 1e7))
    assert _parallel._settle() == 0 and _parallel._bound(1e-3) == (1 << 62, 10_000)
    flag = np.zeros(1, np.int64)
    assert not _parallel._spin_while_any(flag, 0, *_parallel._bound(1e-3), _parallel._settle())
    for _ in range(3):
        calls: list = []
        assert _parallel.run(_recorder(calls, threading.Event()), 64, 1 << 30, "x") == 64
        assert len({ident for _, _, ident, _ in calls}) == 2


def test_the_caller_waits_for_a_helper_s_chunk(two_threads):
    """A helper's chunk that ends long after the caller's: the call returns after it."""
    calls: list = []
    hold = threading.Event()
    record = _recorder(calls, hold)

    def kernel(tag, t0, t1):
        n = record(tag, t0, t1)
        if threading.get_ident() != threading.main_thread().ident:
            time.sleep(0.05)
            calls.append("late")
        return n

    for _ in range(3):
        calls.clear()
        hold.clear()
        assert _parallel.run(kernel, 64, 1 << 30, "x") == 64
        assert "late" in calls


def test_calls_go_alone_while_helpers_come_too_late(two_threads, monkeypatch):
    monkeypatch.setattr(_parallel, "MISSES", 2)
    monkeypatch.setattr(_parallel, "ALONE_CALLS", 3)
    monkeypatch.setattr(_parallel, "SPIN_SECONDS", 0.5)  # helpers spin: their misses count
    make = _parallel._Job.__init__

    def too_late(self, *args):
        make(self, *args)
        self.late = True  # as if the caller were past its first chunk: no helper joins

    monkeypatch.setattr(_parallel._Job, "__init__", too_late)
    pool = _parallel._get_pool()
    _parallel.run(_recorder([]), 64, 1 << 30, "x")  # wakes a sleeping helper: it spins now
    deadline = time.monotonic() + TIMEOUT
    while pool.sleepers and time.monotonic() < deadline:
        time.sleep(0.001)
    pool.alone = pool.misses = 0
    split = []
    for _ in range(12):
        calls: list = []
        assert _parallel.run(_recorder(calls), 64, 1 << 30, "x") == 64
        assert {ident for _, _, ident, _ in calls} == {threading.main_thread().ident}
        split.append(len(calls) > 1)
    assert any(split) and not all(split)  # offered to the helpers, and run alone after misses
    pool.alone = 0


def test_a_kernel_error_reaches_the_caller(two_threads):
    def kernel(t0, t1):
        if t0 > 0:
            raise ZeroDivisionError(f"chunk at {t0}")
        return 1

    for _ in range(3):  # on whichever thread it is raised
        with pytest.raises(ZeroDivisionError, match="chunk at"):
            _parallel.run(kernel, 100, 1 << 30)
    calls: list = []
    assert _parallel.run(_recorder(calls), 100, 1 << 30, "x") == 100  # the pool still works


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@pytest.fixture(params=["process", "gil"])
def busy(request) -> Iterator[str]:
    """A second core kept busy by a spinning process, or the GIL by a spinning Python thread."""
    if request.param == "process":
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        p = ctx.Process(target=_spin, args=(stop,), daemon=True)
        p.start()
        yield request.param
        stop.set()
        p.join(10)
        if p.is_alive():
            p.kill()
    else:
        stop = threading.Event()
        t = threading.Thread(target=_spin, args=(stop,), daemon=True)
        t.start()
        yield request.param
        stop.set()
        t.join(10)


@pytest.mark.parametrize("group_size", [None, 128])
@pytest.mark.parametrize("activations", ["int8", "float"])
def test_gemv_on_two_threads_beside_a_busy_core(busy, two_threads, activations, group_size):
    """Per tensor and in groups (int8: the laid-out rows' GEMV where the CPU has it)."""
    rng = np.random.default_rng(7)
    trits = rng.integers(-1, 2, (4096, 1024), dtype=np.int8)  # 1 MiB of 2bit codes
    scales = (np.float32(0.5) if group_size is None
              else rng.uniform(0.1, 1, (4096, 1024 // group_size)).astype(np.float32))
    w = tn.TernaryTensor(tn.pack(trits, "2bit"), scales, group_size)
    assert w.packed.nbytes >= _parallel.MIN_PARALLEL_BYTES
    x = rng.standard_normal(1024, dtype=np.float32)
    with _threads.limit(1):
        want = tn.linear(x, w, activations=activations)
    amax = np.abs(x).max()
    xq = x if activations == "float" else np.rint(x * (np.float32(127) / amax)) * (amax / 127)
    weights = trits * np.repeat(np.reshape(scales, (-1, 1)) if group_size is None else scales,
                                group_size or 1024, axis=1).astype(np.float64)
    np.testing.assert_allclose(want, weights @ xq.astype(np.float64), rtol=1e-4, atol=1e-3)
    for _ in range(50):
        np.testing.assert_array_equal(tn.linear(x, w, activations=activations), want)


@numba.njit(nogil=True)
def _claimed_marks(marks, done, ticks, ctl, t1):
    """A claimed kernel: ``marks[i] += 1`` for every task it claims; the claimer of the
    chunk at 0 waits (``ticks`` at most) until another chunk is done, necessarily on
    another thread. Returns tasks marked, plus ``t1 + 1`` from the thread that saw that."""
    total = 0
    a, b = pool.claim(ctl, t1)
    while a < t1:
        for i in range(a, b):
            marks[i] += 1
        total += b - a
        if a == 0:
            start = cycles()
            while load_acquire(done, 0) == 0 and cycles() - start < ticks:
                pass
            if load_acquire(done, 0) > 0:
                total += t1 + 1
        else:
            fetch_add(done, 0, 1)
        a, b = pool.claim(ctl, t1)
    pool.leave(ctl)
    return total


@numba.njit(nogil=True)
def _claimed_error(ctl, t1):
    a = pool.claim(ctl, t1)[0]
    while a < t1:
        if a > 0:
            raise ZeroDivisionError("a claimed chunk failed")
        a = pool.claim(ctl, t1)[0]
    pool.leave(ctl)
    return 0


@pytest.mark.parametrize("tasks", [1, 8, 9, 1000, 4096])
def test_claimed_tasks_run_once_on_two_threads(two_threads, tasks):
    chunks = tasks > _parallel.CLAIM_MULTIPLE  # more than one (each a multiple of it)
    ticks = _parallel._bound(TIMEOUT)[0] if chunks and _parallel._rates()[0] > 0 else 0
    for _ in range(3):
        marks = np.zeros(tasks, np.int64)
        got = _parallel.run_claimed(_claimed_marks, tasks, 1 << 30, marks,
                                    np.zeros(1, np.int64), ticks)
        assert (marks == 1).all()
        # with ticks, the chunk at 0 saw another thread's chunk done
        assert got == tasks + (tasks + 1 if ticks else 0)


@numba.njit(nogil=True)
def _raises_before_claiming(ctl, t1):
    if t1 > 0:
        raise ZeroDivisionError("before its first claim")
    return 0


def test_back_to_back_claimed_calls_and_failed_ones_between(two_threads):
    """Back-to-back calls of changing sizes each get a helper and every task once; a call
    whose kernel raises before its first claim leaves the next calls as they were."""
    ticks = _parallel._bound(2.0)[0] if _parallel._rates()[0] > 0 else 0
    rng = np.random.default_rng(3)
    for i in range(100):
        tasks = int(rng.integers(_parallel.CLAIM_MULTIPLE + 1, 5000))  # two chunks or more
        marks = np.zeros(tasks, np.int64)
        got = _parallel.run_claimed(_claimed_marks, tasks, 1 << 30, marks, np.zeros(1, np.int64),
                                    ticks)
        assert (marks == 1).all() and got == tasks + (tasks + 1 if ticks else 0)
        if i % 2:
            with pytest.raises(ZeroDivisionError, match="first claim"):
                _parallel.run_claimed(_raises_before_claiming, 64, 1 << 30)


def test_claimed_calls_alone_take_every_task_in_one_claim(two_threads):
    marks = np.zeros(100, np.int64)
    for nbytes, threads in [(_parallel.MIN_PARALLEL_BYTES - 1, 2), (1 << 30, 1)]:
        with _threads.limit(threads):
            assert _parallel.run_claimed(_claimed_marks, 100, nbytes, marks,
                                         np.zeros(1, np.int64), 0) == 100
    assert (marks == 2).all()


def test_a_claimed_kernel_error_reaches_the_caller(two_threads):
    for _ in range(3):
        with pytest.raises(ZeroDivisionError, match="claimed chunk"):
            _parallel.run_claimed(_claimed_error, 4096, 1 << 30)
    marks = np.zeros(64, np.int64)
    _parallel.run_claimed(_claimed_marks, 64, 1 << 30, marks, np.zeros(1, np.int64), 0)
    assert (marks == 1).all()  # the pool still works


@numba.njit(nogil=True)  # another thread writes what it waits on
def _leave(ctl):
    pool.leave(ctl)


def test_a_helper_leaves_when_the_caller_waits_or_after_its_bound():
    ctl = np.array([0, 8, 0, *_parallel._bound(1e-3)], np.int64)
    _leave(ctl.copy())  # compiled
    start = time.perf_counter()
    _leave(ctl)  # nobody waits: back after its bound
    assert time.perf_counter() - start >= 0.5e-3 or _parallel._rates()[0] == 0
    ctl[pool.LINGER_TICKS] = 1 << 62  # and after its rounds, wherever no clock runs
    ctl[pool.LINGER_ROUNDS] = 1000
    _leave(ctl)
    ctl[_parallel.CALLER_WAITS] = 1
    ctl[pool.LINGER_ROUNDS] = 1 << 62
    _leave(ctl)  # the caller waits: back at once (a hang here fails by timeout)
    ctl[_parallel.CALLER_WAITS] = 0
    _leave(ctl[:_parallel.STEP + 1])  # the caller's own view: never waits


def test_a_helper_settles_until_the_caller_claims_or_for_its_bound():
    """Once a call came, a helper waits until the caller's kernel claimed (it then holds
    no GIL), at most ``settle``: with ``ready`` set, at once."""
    came = np.ones(1, np.int64)  # differs from 0: a call came
    claimed = np.ones(1, np.int64)
    forever = 1 << 62
    start = time.perf_counter()
    assert _parallel._spin(came, 0, forever, 1, _parallel._bound(10.0)[0], claimed, 0,
                           _parallel._NOWHERE, 0, 0) == -1
    assert time.perf_counter() - start < 5.0
    settle = _parallel._bound(1e-3)[0] if _parallel._rates()[0] > 0 else 0
    start = time.perf_counter()
    assert _parallel._spin(came, 0, forever, 1, settle, np.zeros(1, np.int64), 0,
                           _parallel._NOWHERE, 0, 0) == -1
    assert time.perf_counter() - start >= 0.5e-3 or not settle


def test_every_call_starts_with_no_claim_seen(two_threads):
    """A chunked call after a claimed one: the helpers find ``claimed[NEXT]`` reset (a
    claim left from the last call would let them take the GIL before the caller is in
    its first chunk)."""
    pool = _parallel._get_pool()
    seen: list = []

    def kernel(t0, t1):
        seen.append(int(pool.claimed[_parallel.NEXT]))
        return t1 - t0

    for _ in range(3):
        marks = np.zeros(4096, np.int64)
        _parallel.run_claimed(_claimed_marks, 4096, 1 << 30, marks, np.zeros(1, np.int64), 0)
        assert pool.claimed[_parallel.NEXT] >= 4096 and (marks == 1).all()
        seen.clear()
        assert _parallel.run(kernel, 64, 1 << 30) == 64
        assert seen and set(seen) == {0}


@numba.njit(nogil=True)
def _claimed_slowly(marks, caller_ticks, helper_ticks, ctl, t1):
    """``marks[i] += 1`` for each claimed task, then a spin of ``caller_ticks`` or
    ``helper_ticks`` a chunk (a helper's view of ``ctl`` is the longer)."""
    a, b = pool.claim(ctl, t1)
    while a < t1:
        for i in range(a, b):
            marks[i] += 1
        wait = helper_ticks if ctl.shape[0] > _parallel.STEP + 1 else caller_ticks
        start = cycles()
        while cycles() - start < wait:
            pass
        a, b = pool.claim(ctl, t1)
    pool.leave(ctl)
    return 0


def test_an_interrupted_wait_leaves_the_next_call_its_tasks(two_threads):
    """A KeyboardInterrupt while the caller waits for a helper still in its chunk: the helper
    claims on from its call's control words, never the next call's (it took their tasks,
    whose outputs then kept whatever memory held: a GEMV silently wrong)."""
    if _parallel._rates()[0] == 0:
        pytest.skip("no cycle counter to time the spins with")
    pool = _parallel._get_pool()
    ms = _parallel._bound(1e-3)[0]

    def interrupted(job):  # as Ctrl-C in the wait, once the helper is in a chunk
        deadline = time.monotonic() + TIMEOUT
        while not (pool.inside == job.generation).any():
            assert time.monotonic() < deadline, "no helper joined"
        raise KeyboardInterrupt

    pool._wait = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):  # the helper's chunk spins 300 ms
            _parallel.run_claimed(_claimed_slowly, 4096, 1 << 30, np.zeros(4096, np.int64),
                                  ms, 300 * ms)
    finally:
        del pool._wait
    marks = np.zeros(64, np.int64)  # 8 chunks of 75 ms: the helper wakes in the middle
    _parallel.run_claimed(_claimed_slowly, 64, 1 << 30, marks, 75 * ms, 0)
    assert (marks == 1).all()
    deadline = time.monotonic() + TIMEOUT
    while (pool.inside != 0).any():  # the helper back between calls
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_pool_is_released_when_making_a_job_fails(two_threads, monkeypatch):
    """A KeyboardInterrupt while a claimed call is set up leaves the pool free for the next."""
    job = _parallel._Job

    def interrupted(*args):
        monkeypatch.setattr(_parallel, "_Job", job)
        raise KeyboardInterrupt

    monkeypatch.setattr(_parallel, "_Job", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _parallel.run_claimed(_claimed_marks, 64, 1 << 30, np.zeros(64, np.int64),
                              np.zeros(1, np.int64), 0)
    assert _parallel._get_pool().owner[0] == 0  # free

"""Concurrency: the CPU kernels' shared thread pool under concurrent callers, fork and spawn.

The inputs are over ``MIN_PARALLEL_BYTES`` so that every call splits its work across
tritnum's internal pool (tritnum/_kernels/cpu/_parallel.py). Results must equal the serial
ones exactly. Child processes run under a timeout, so a deadlock fails instead of hanging.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import tritnum as tn
from tritnum._kernels.cpu import _parallel

THREADS = 8
CHILD_TIMEOUT = 180  # seconds: a spawned child imports tritnum and loads the numba cache


def inputs(seed: int = 0) -> dict[str, Any]:
    """Deterministic inputs, each over the pool's threshold (the same in a child process);
    each thread has its own, so that a scratch buffer shared between calls shows."""
    rng = np.random.default_rng(1234 + seed)
    trits = rng.integers(-1, 2, (512, 4096), dtype=np.int8)  # 2 MiB
    w = tn.quantize(rng.standard_normal((1024, 4096), np.float32), axis=-1, device="numpy")
    d = {
        "trits": trits,
        "w": w,  # 1 MiB of 2-bit codes: the GEMV splits its rows
        "x_gemv": rng.standard_normal((2, 4096), np.float32),
        "x_gemm": rng.standard_normal((48, 4096), np.float32),  # decoded tiles over 1 MiB
        "memory": rng.integers(-1, 2, (1024, 2048), dtype=np.int8),  # 2 MiB
        "queries": rng.integers(-1, 2, (8, 2048), dtype=np.int8),
        "vs": rng.integers(-1, 2, (1024, 2048), dtype=np.int8),
    }
    for k in ("memory", "queries", "vs"):
        d[k + "_bp"] = tn.pack(d[k], "bitplane", device="numpy")
    return d


def _ops(d: dict[str, Any]) -> list[tuple[str, Any]]:
    ops: list[tuple[str, Any]] = []
    for fmt in tn.FORMATS:
        ops.append((f"pack-{fmt}", lambda f=fmt: np.asarray(tn.pack(d["trits"], f,
                                                                    device="cpu").data)))
        ops.append((f"unpack-{fmt}", lambda f=fmt: tn.unpack(
            tn.pack(d["trits"], f, device="numpy"), device="cpu")))
    ops += [
        ("linear-gemv", lambda: tn.linear(d["x_gemv"], d["w"], device="cpu")),
        ("linear-gemm", lambda: tn.linear(d["x_gemm"], d["w"], device="cpu")),
        ("linear-int8", lambda: tn.linear(d["x_gemm"], d["w"], activations="int8",
                                          device="cpu")),
        # the fused int8 GEMV: its activation buffers are each thread's own, kept across calls
        ("linear-int8-gemv", lambda: tn.linear(d["x_gemv"], d["w"], activations="int8",
                                               device="cpu")),
        ("search", lambda: tn.vsa.search(d["queries"], d["memory"], k=5, device="cpu")),
        ("search-bp", lambda: tn.vsa.search(d["queries_bp"], d["memory_bp"], k=5,
                                            metric="dot", device="cpu")),
        ("bundle", lambda: tn.vsa.bundle(d["vs"], device="cpu")),
        ("bundle-bp", lambda: np.asarray(tn.vsa.bundle(d["vs_bp"], device="cpu").data)),
    ]
    return ops


def run_all(d: dict[str, Any], start: int = 0) -> dict[str, np.ndarray]:
    """Every op under test on the CPU kernels, from op ``start`` on (cyclically)."""
    ops = _ops(d)
    ops = ops[start % len(ops):] + ops[:start % len(ops)]
    out: dict[str, np.ndarray] = {}
    for name, op in ops:
        r = op()
        if isinstance(r, tuple):  # search: (indices, scores)
            out[name + "-idx"], out[name + "-scores"] = r
        else:
            out[name] = r
    return out


def digests(results: dict[str, np.ndarray]) -> dict[str, str]:
    return {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() + str(v.shape)
            for k, v in results.items()}


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.fixture(scope="module")
def serial() -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Inputs and serial results for each of the THREADS threads."""
    cases = [(d, run_all(d)) for d in map(inputs, range(THREADS))]
    d, want = cases[0]
    # the reference agrees (so that "equal to serial" is not equal to a wrong answer)
    for fmt in tn.FORMATS:
        np.testing.assert_array_equal(want[f"unpack-{fmt}"], d["trits"])
    np.testing.assert_array_equal(want["bundle"], tn.vsa.bundle(d["vs"], device="numpy"))
    np.testing.assert_array_equal(want["search-idx"],
                                  tn.vsa.search(d["queries"], d["memory"], k=5,
                                                device="numpy")[0])
    return cases


def test_inputs_use_the_pool(serial):
    assert serial[0][0]["trits"].nbytes >= _parallel.MIN_PARALLEL_BYTES
    assert _parallel._pool is not None, "no call used tritnum's thread pool"


def test_eight_threads_at_once(serial):
    with ThreadPoolExecutor(THREADS) as ex:
        futures = [ex.submit(run_all, d) for d, _ in serial]
        for f, (_, want) in zip(futures, serial, strict=True):
            assert_same(f.result(timeout=600), want)


def test_eight_threads_each_op_at_once(serial):
    """Each thread runs the ops in another order, so that different kernels overlap."""
    with ThreadPoolExecutor(THREADS) as ex:
        results = ex.map(lambda i: run_all(serial[i][0], start=i), range(THREADS))
        for res, (_, want) in zip(results, serial, strict=True):
            assert_same(res, want)


def _child(conn: Any, check_pool_reset: bool) -> None:
    try:
        reset = _parallel._pool is None
        results = digests(run_all(inputs()))
        conn.send(("ok", reset if check_pool_reset else True, results))
    except BaseException as e:  # report anything; the parent fails the test
        conn.send(("error", repr(e), {}))
    finally:
        conn.close()


def _in_child(method: str, check_pool_reset: bool) -> tuple[bool, dict[str, str]]:
    ctx = mp.get_context(method)
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, check_pool_reset), daemon=True)
    p.start()
    child.close()
    try:
        if not parent.poll(CHILD_TIMEOUT):
            pytest.fail(f"the {method} child did not answer in {CHILD_TIMEOUT} s (deadlock?)")
        status, reset, results = parent.recv()
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    assert status == "ok", f"the {method} child raised {reset}"
    assert p.exitcode == 0
    return reset, results


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this OS")
def test_fork_after_the_pool_was_used(serial):
    d, want = serial[0]
    run_all(d)
    assert _parallel._pool is not None
    reset, results = _in_child("fork", True)
    assert reset, "the at-fork handler did not reset the pool in the child"
    assert results == digests(want)
    assert_same(run_all(d), want)  # and the parent's pool still works


def test_spawn(serial):
    _, want = serial[0]
    _, results = _in_child("spawn", False)
    assert results == digests(want)

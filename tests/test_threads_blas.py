"""tritnum's thread limit (``tn.set_num_threads``, ``tn.limit_threads``) and NumPy's BLAS.

The float GEMM's ``sgemm`` runs on as many BLAS threads as tritnum's limit allows (the
count read by threadpoolctl inside the call), the BLAS's count is restored after it,
and no call changes torch's thread count.
"""

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import tritnum as tn
from tritnum import _blas, _threads
from tritnum._kernels.cpu import _parallel
from tritnum._kernels.cpu import matmul as cpu_matmul


def _blas_counts():
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.fixture
def blas_at_two():
    """NumPy's BLAS at 2 threads, whatever the machine's default: a limit of 1 differs."""
    if not _blas_counts():
        pytest.skip("threadpoolctl finds no BLAS library in this process")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


@pytest.fixture
def gemm_blas_counts(monkeypatch):
    """The BLAS thread counts threadpoolctl reads inside each ``np.matmul`` of the CPU GEMM."""
    seen = []
    real = np.matmul

    def spy(*args, **kwargs):
        seen.append(_blas_counts())
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_matmul.np, "matmul", spy)
    return seen


def _gemm_case():
    rng = np.random.default_rng(5)
    # past the small layers' one-call route (SMALL_WEIGHTS) and the GEMV's rows: the GEMM
    w = tn.quantize(rng.standard_normal((2080, 512)).astype(np.float32), axis=-1)
    x = rng.standard_normal((40, 512)).astype(np.float32)
    return x, w


def _assert_product(y, x, w):
    """``y`` is ``x @ W.T`` within float32 summation error (sqrt(n) eps of the |products|)."""
    dense = tn.dequantize(w).astype(np.float64)
    bound = np.sqrt(x.shape[1]) * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(dense).T)
    assert (np.abs(y - x.astype(np.float64) @ dense.T) <= bound).all()


@pytest.mark.parametrize("limit", ["process", "block"])
def test_float_gemm_runs_blas_on_tritnums_thread_count(blas_at_two, gemm_blas_counts, limit,
                                                       monkeypatch):
    x, w = _gemm_case()
    monkeypatch.setattr(_threads, "_process_limit", None)  # restored however the test ends
    if limit == "process":
        tn.set_num_threads(1)
        y = tn.linear(x, w, device="cpu")
    else:
        with tn.limit_threads(1):
            y = tn.linear(x, w, device="cpu")
    _assert_product(y, x, w)
    assert gemm_blas_counts and all(c == [1] * len(c) for c in gemm_blas_counts)
    assert _blas_counts() == [2] * len(_blas_counts())  # restored after the call


def test_float_gemm_gives_blas_tritnums_threads_whatever_the_load(blas_at_two,
                                                                   gemm_blas_counts, monkeypatch):
    """The count is the user's limit, not the load: OpenBLAS's bits follow its count."""
    class Busy:
        alone, misses = 5, 1  # the pool saw a busy machine

    monkeypatch.setattr(_threads, "available", lambda: 2)
    x, w = _gemm_case()
    for pool in (None, Busy()):
        monkeypatch.setattr(_parallel, "_pool", pool)
        gemm_blas_counts.clear()
        tn.linear(x, w, device="cpu")
        assert gemm_blas_counts and all(c == [2] * len(c) for c in gemm_blas_counts)


def test_float_gemm_bits_do_not_depend_on_the_pools_state(monkeypatch):
    """A GEMM past OpenBLAS's threading threshold, under a quiet and a busy pool."""
    class Busy:
        alone, misses = 5, 1

    rng = np.random.default_rng(3)
    w = tn.quantize(rng.standard_normal((256, 512)).astype(np.float32), axis=-1)
    x = rng.standard_normal((48, 512)).astype(np.float32)
    monkeypatch.setattr(_parallel, "_pool", None)
    quiet = tn.linear(x, w, device="cpu")
    monkeypatch.setattr(_parallel, "_pool", Busy())
    assert tn.linear(x, w, device="cpu").tobytes() == quiet.tobytes()


def test_a_limit_never_raises_the_blas_count(gemm_blas_counts):
    """A user's BLAS at 1 thread stays at 1 under tritnum's limit of 2 (raising it cost ms)."""
    if not _blas_counts() or _threads.available() < 2:
        pytest.skip("no BLAS library found, or one core: no limit above the BLAS's 1")
    x, w = _gemm_case()
    with threadpool_limits(limits=1, user_api="blas"), tn.limit_threads(2):
        y = tn.linear(x, w, device="cpu")
        assert _blas_counts() == [1] * len(_blas_counts())
    _assert_product(y, x, w)
    assert gemm_blas_counts and all(c == [1] * len(c) for c in gemm_blas_counts)


def test_blas_limit_is_restored_by_the_outermost_call(blas_at_two):
    ones = [1] * len(_blas_counts())
    with _blas.limit(1):
        with _blas.limit(1):  # a call inside a call (another thread's, or a signal handler's)
            assert _blas_counts() == ones
        assert _blas_counts() == ones  # the inner one left it as it was
    assert _blas_counts() == [2] * len(ones)


def test_no_call_changes_torchs_thread_count():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, w = _gemm_case()
        tn.set_num_threads(tn.get_num_threads())
        with tn.limit_threads(1):
            tn.linear(x, w, device="cpu")
        for act in ("float", "int8", "q8_k"):
            tn.linear(x, w, activations=act, device="cpu")
            tn.linear(x[:1], w, activations=act, device="cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_limit_threads_holds_for_the_calling_thread_only():
    n = _threads.available()
    other = []
    with tn.limit_threads(1):
        t = threading.Thread(target=lambda: other.append(tn.get_num_threads()))
        t.start()
        t.join()
        assert tn.get_num_threads() == 1
    assert other == [n]
    assert tn.get_num_threads() == n


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (10**6, ValueError),
                                        (1.0, TypeError), (True, TypeError), ("2", TypeError),
                                        (None, TypeError)])
def test_bad_thread_counts_raise_before_anything_changes(bad, error):
    before = tn.get_num_threads()
    with pytest.raises(error):
        tn.set_num_threads(bad)
    with pytest.raises(error), tn.limit_threads(bad):
        pass
    assert tn.get_num_threads() == before


def test_numpy_integers_are_thread_counts(monkeypatch):
    monkeypatch.setattr(_threads, "_process_limit", None)
    tn.set_num_threads(np.int64(1))
    assert tn.get_num_threads() == 1

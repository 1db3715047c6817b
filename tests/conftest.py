import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from tritnum import _dispatch, _isa

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# CI: more examples, and the same examples on every run (a red CI run reproduces)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=100,
                          derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))



_SLOW = pytest.StashKey[int]()  # how many slow tests the run deselected


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="also run the tests marked slow (CI runs them; the default "
                          "selection takes a few minutes on 2 cores)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: minutes of compilation or data; deselected "
                                       "unless --full")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tests unless ``--full``, and say so at the end of the run."""
    if config.getoption("--full"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.stash[_SLOW] = len(slow)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    slow = config.stash.get(_SLOW, 0)
    if slow:
        terminalreporter.write_line(
            f"{slow} slow tests deselected: python -m pytest --full runs everything "
            "(bash .ci/run adds the CUDA simulator and bounds-checked lanes)")

# every SIMD level of the CPU kernels: the running one by default, the others (compiled
# afresh, seconds each; a level the CPU lacks skips) with --full
EVERY_LEVEL = [level if level == _isa.ISA else pytest.param(level, marks=pytest.mark.slow)
               for level in _isa.LEVELS]


# every backend a kernel registers on, the NumPy reference first; tests take the fixtures
# below rather than retyping this list
BACKENDS = tuple(_dispatch._BACKENDS)


@pytest.fixture(params=BACKENDS, scope="module")
def device(request: pytest.FixtureRequest) -> str:
    """Each backend a test runs on: the NumPy reference, the CPU kernels and, where
    ``tn.cuda_available()``, the CUDA kernels (a visible skip otherwise). Module scope,
    so that hypothesis tests can take it."""
    if request.param == "cuda" and not _dispatch.cuda_available():
        pytest.skip("device='cuda': no usable GPU (tn.cuda_available() is False)")
    return request.param


@pytest.fixture(scope="session")
def backends() -> tuple[str, ...]:
    """The backends this machine runs, the NumPy reference first: for tests that compare
    backends with each other in one example (CUDA where ``tn.cuda_available()``)."""
    return tuple(d for d in BACKENDS if d != "cuda" or _dispatch.cuda_available())


@pytest.fixture(scope="session")
def tq1_every_pattern() -> np.ndarray:
    """An exactly ternary (243, 256) float32 tensor whose block i codes digit pattern i
    (base 3, most significant first) in every TQ1_0 byte: all 243 byte values the
    encoder can produce, at every byte position."""
    digits = (np.arange(243)[:, None] // 3 ** np.arange(4, -1, -1)) % 3  # (243, 5)
    trits = (digits - 1).astype(np.float32)
    x = np.empty((243, 256), np.float32)
    for start, count, ndigits in ((0, 32, 5), (160, 16, 5), (240, 4, 4)):
        # value start + k + count * n holds digit n of every byte k of the part
        x[:, start:start + count * ndigits] = np.repeat(trits[:, :ndigits], count, axis=1)
    return x


@pytest.fixture(scope="session")
def tq1_every_byte() -> np.ndarray:
    """A TQ1_0 buffer of 256 blocks (54 bytes each): every code byte of block j is j,
    the fp16 scale 0.75. Decoders must agree with gguf on all 256 byte values."""
    buf = np.empty((256, 54), np.uint8)
    buf[:, :52] = np.arange(256, dtype=np.uint8)[:, None]
    buf[:, 52:] = np.full((256, 1), 0.75, np.float16).view(np.uint8)
    return buf


@pytest.fixture(scope="session")
def weights_a_hair_from_half_a_scale() -> tuple[np.ndarray, np.float32, np.ndarray]:
    """float64 weights, their per-row scale, and their trits: four weights 2**-40 either side
    of scale/2 (closer than float32 can tell apart), which only a float64 division gets right."""
    s = np.float32(60 / 62)  # the mean of |w| below, whose four last values are about s/2
    h = np.float64(s) / 2
    w = np.ones((3, 64))
    w[:, 60:] = [h * (1 + 2**-40), h * (1 - 2**-40), -h * (1 + 2**-40), -h * (1 - 2**-40)]
    trits = np.ones((3, 64), np.int8)
    trits[:, 60:] = [1, 0, -1, 0]
    return w, s, trits


_LIMIT_MEMORY = """
import resource
def limit_memory():
    # the address space capped at its size now plus 1 GiB: call it once warmed up
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))
"""


@pytest.fixture(scope="session")
def memory_limited_child():
    """Run a hostile-file script in a fresh Python: ``run(code, spec, root) -> dict``.

    ``code`` reads ``spec`` (written as JSON to ``root``) from ``sys.argv[1]``, may call
    ``limit_memory()`` (defined for it) once warmed up, and prints its result as JSON on its
    last line; a regression then fails a test instead of exhausting memory or hanging CI
    (5 minutes at most). This tritnum is imported, not an installed one.
    """
    pytest.importorskip("resource")  # RLIMIT_AS: POSIX only
    import tritnum

    def run(code: str, spec: dict, root: Path) -> dict:
        (root / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": str(Path(tritnum.__file__).parents[1])}
        child = subprocess.run([sys.executable, "-c", _LIMIT_MEMORY + code,
                                str(root / "spec.json")], env=env, capture_output=True,
                               text=True, timeout=300)
        assert child.returncode == 0, child.stderr[-3000:]
        return json.loads(child.stdout.splitlines()[-1])

    return run


@pytest.fixture
def kernel_devices(monkeypatch):
    """``(op, device)`` of every kernel looked up while the test runs, in order."""
    from tritnum import _dispatch

    seen = []
    real = _dispatch.kernel

    def spy(op, device):
        seen.append((op, device))
        return real(op, device)

    monkeypatch.setattr(_dispatch, "kernel", spy)
    return seen

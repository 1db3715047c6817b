"""The CPU kernels' disk cache: keyed on every kernel source, not only the kernel's own file."""

import shutil

import numba
import pytest

from tritnum._kernels.cpu import _jit


def _twice(x):
    return 2 * x


def _compiled(monkeypatch, sources):
    monkeypatch.setattr(_jit, "SOURCES", sources)
    kernel = _jit.jit()(_twice)
    assert kernel(21) == 42
    return kernel


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setattr(_jit, "CACHE", True)
    monkeypatch.setattr(_jit, "CACHEABLE", True)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))


def test_a_kernel_comes_back_from_the_cache_until_a_source_changes(cache_on, monkeypatch):
    assert _compiled(monkeypatch, "a").stats.cache_misses  # compiled, then saved
    again = _compiled(monkeypatch, "a")
    assert again.stats.cache_hits and not again.stats.cache_misses
    edited = _compiled(monkeypatch, "b")  # a helper in another file changed
    assert edited.stats.cache_misses and not edited.stats.cache_hits


def test_the_hash_covers_the_helpers_of_every_kernel(tmp_path):
    root = tmp_path / "_kernels"
    shutil.copytree(_jit._KERNELS, root, ignore=shutil.ignore_patterns("__pycache__"))
    assert _jit.sources_hash(root) == _jit.SOURCES
    for helper in ("shared/q8k.py", "cpu/_llvm/gemv.py"):
        path = root / helper
        original = path.read_bytes()
        path.write_bytes(original + b"\n# edited\n")
        assert _jit.sources_hash(root) != _jit.SOURCES, helper
        path.write_bytes(original)
    (root / "reference" / "matmul.py").write_text("# not compiled by numba\n")
    assert _jit.sources_hash(root) == _jit.SOURCES

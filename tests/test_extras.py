"""Install hints: every "missing package" message names packages pip can install.

tritnum is installed from its source tree, not the package index, so a hint such as
``pip install tritnum[torch]`` fails; the hints name the packages an extra brings.
"""

import configparser
import importlib
import re
import sys
from pathlib import Path

import pytest

from tritnum._extras import EXTRAS, install_hint, missing

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tritnum"


def _name(requirement: str) -> str:
    """A requirement's project name, normalized (PEP 503), without extras or version."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def _extras() -> dict[str, set[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = config["options.extras_require"]
    return {extra: {line.strip() for line in extras[extra].splitlines()
                    if line.strip() and not line.strip().startswith("#")}
            for extra in extras}


def _requirements() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    base = [r for r in config["options"]["install_requires"].splitlines() if r.strip()]
    return {_name(r) for rs in [*_extras().values(), base] for r in rs}


def _sources():
    yield from sorted(PACKAGE.rglob("*.py"))


def test_each_hint_names_packages_of_its_extra():
    extras = _extras()
    for extra, (_, packages) in EXTRAS.items():
        assert extra in extras, extra
        for package in packages:
            # the very requirement, extras included (numba-cuda[cu13], dask[array])
            assert any(r.startswith(package) for r in extras[extra]), (extra, package)
            assert f"pip install -e '.[{extra}]'" in install_hint(extra)


def test_no_message_names_tritnum_on_the_index():
    bad = re.compile(r"""pip install\s+["']?tritnum\s*\[""")
    hits = [f"{path.relative_to(ROOT)}:{n}" for path in _sources()
            for n, line in enumerate(path.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, hits


def test_every_pip_install_in_the_source_names_a_known_package():
    known = _requirements()
    pip = re.compile(r"""pip install\s+((?:-e\s+)?['"]?[^\s'")`]+)""")
    for path in _sources():
        if path.name == "_extras.py":  # the template: PACKAGES, EXTRA
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for target in pip.findall(line):
                if target.startswith("-e") or "{" in target:  # a checkout; the helper itself
                    continue
                assert _name(target.strip("'\"")) in known, f"{path.relative_to(ROOT)}:{n}: {line}"


def test_missing_wording():
    assert missing("tritnum.torch", "torch") == (
        "tritnum.torch needs PyTorch: pip install torch (or, from a tritnum checkout, "
        "pip install -e '.[torch]')")
    assert "pip install 'dask[array]'" in missing("x", "dask")  # quoted for the shell


def _hide(monkeypatch, *names):
    """Make ``import NAME`` fail for each name, and forget tritnum modules that imported it."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def _forget(monkeypatch, prefix):
    for module in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        monkeypatch.delitem(sys.modules, module)


def test_tritnum_torch_without_torch(monkeypatch):
    _hide(monkeypatch, "torch")
    _forget(monkeypatch, "tritnum.torch")
    with pytest.raises(ImportError) as info:
        importlib.import_module("tritnum.torch")
    assert str(info.value) == missing("tritnum.torch", "torch")
    assert "pip install torch " in str(info.value)


def test_safetensors_writer_without_safetensors(monkeypatch, tmp_path):
    import numpy as np

    import tritnum as tn

    _hide(monkeypatch, "safetensors")
    with pytest.raises(ImportError, match=r"pip install safetensors \(or"):
        tn.io.write_safetensors(tmp_path / "a.safetensors", {"a": np.zeros(2, np.float32)})


def test_lazy_arrays_without_dask(monkeypatch):
    import tritnum as tn

    _hide(monkeypatch, "dask")
    _forget(monkeypatch, "tritnum._dask")
    with pytest.raises(ImportError, match=re.escape("pip install 'dask[array]'")):
        tn.vsa.random(4, 64, seed=0, chunks=2)


def test_testing_without_hypothesis(monkeypatch):
    _hide(monkeypatch, "hypothesis")
    _forget(monkeypatch, "tritnum.testing")
    with pytest.raises(ImportError, match="pip install hypothesis"):
        importlib.import_module("tritnum.testing")

"""The test suite's own settings and conventions: hypothesis profiles (DESIGN §6); backends
from the conftest fixtures, hypothesis floats as wide as their arrays and CLI tests in
tests/test_cli.py (issue 14 item 5)."""

import ast
import re
from pathlib import Path

import pytest
from hypothesis import settings

from tritnum import _dispatch


@pytest.mark.parametrize("name", ["default", "ci"])
def test_profiles_have_no_deadline(name):
    assert settings.get_profile(name).deadline is None  # numba compiles on first call


def test_ci_profile_is_derandomized_and_larger():
    # the default profile's derandomize is hypothesis's own choice: on when it detects a CI
    # service (the CI environment variable), off otherwise; the ci profile always fixes it
    ci, default = settings.get_profile("ci"), settings.get_profile("default")
    assert ci.derandomize
    assert ci.max_examples > default.max_examples


# -- the suite keeps its own conventions (issue 14 item 5): checked on the test sources --------

TESTS = Path(__file__).resolve().parent
DEVICE_NAMES = frozenset(_dispatch._BACKENDS)
CLI_HOME = "test_cli.py"
# `python -m tritnum`, runpy on it, its __main__ or the CLI helper of tests/test_cli.py
CLI_CALL = re.compile(r"""["']-m["']\s*,\s*["']tritnum["']|run_module\(\s*["']tritnum["']"""
                      r"|tritnum\.__main__|from tritnum import __main__|tritnum_cli\b")


def _test_sources():
    """Every test source but this file (whose examples below show what the checks catch)."""
    return sorted(p for p in TESTS.rglob("*.py") if p != Path(__file__).resolve())


def _backend_literal(node: ast.AST) -> bool:
    """A list, tuple, set or dict (by its keys) of two or more distinct backend names."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) or not items:
        return False
    names = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return len(names) == len(items) and set(names) <= DEVICE_NAMES and len(set(names)) > 1


def retyped_backend_lists(source: str) -> list[int]:
    """Lines where a literal list of backends is iterated, parametrized over or named."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.For, ast.comprehension)):
            candidates = [node.iter]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize":
            candidates = [*node.args[1:2], *(k.value for k in node.keywords
                                             if k.arg in ("argvalues", "params"))]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "fixture":
            candidates = [k.value for k in node.keywords if k.arg == "params"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            candidates = [node.value]
        else:
            continue
        found += [c.lineno for c in candidates if c is not None and _backend_literal(c)]
    return sorted(found)


def half_width_floats(source: str) -> list[int]:
    """Lines of ``st.floats(..., width=16)`` in a statement that does not name float16:
    float32/float64 arrays then only ever see float16 values."""
    tree = ast.parse(source)
    found = []
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            continue
        segment = ast.get_source_segment(source, stmt) or ""
        if "float16" in segment or "half" in segment:
            continue
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", "")) == "floats" and any(
                    k.arg == "width" and isinstance(k.value, ast.Constant) and k.value.value == 16
                    for k in node.keywords)):
                found.append(node.lineno)
    return sorted(set(found))


def cli_calls(source: str, name: str) -> list[int]:
    """Lines that run the command line, in any file but tests/test_cli.py."""
    if name == CLI_HOME:
        return []
    return [i for i, line in enumerate(source.splitlines(), 1) if CLI_CALL.search(line)]


@pytest.mark.parametrize(("check", "fix"), [
    (retyped_backend_lists, "take the conftest `device` fixture (one backend a test) or "
                            "`backends` (to compare backends), not a retyped list"),
    (half_width_floats, "draw floats as wide as the array's dtype: "
                        "st.floats(width=8 * dtype.itemsize) or hnp.from_dtype(dtype)"),
    (cli_calls, "CLI tests belong in tests/test_cli.py (use its tritnum_cli)"),
], ids=["backend lists", "float width", "CLI calls"])
def test_the_suite_keeps_its_conventions(check, fix):
    bad = []
    for path in _test_sources():
        source = path.read_text()
        args = (source, path.name) if check is cli_calls else (source,)
        bad += [f"{path.relative_to(TESTS.parent)}:{line}" for line in check(*args)]
    assert not bad, f"{fix}:\n" + "\n".join(bad)


@pytest.mark.parametrize(("check", "source"), [
    (retyped_backend_lists, '@pytest.mark.parametrize("device", ["cpu", "numpy"])\n'
                            "def test(device): pass\n"),
    (retyped_backend_lists, 'for dev in ("numpy", "cpu"):\n    pass\n'),
    (retyped_backend_lists, 'DEVICES = ("numpy", "cpu", "cuda")\n'),
    (retyped_backend_lists, 'BACKENDS = {"numpy": "reference", "cpu": "cpu"}\n'),
    (half_width_floats, "a = hnp.arrays(np.float64, 3, elements=st.floats(-4, 4, width=16))\n"),
    (half_width_floats, "g = data.draw(st.lists(st.floats(-1e3, 1e3, width=16)))\n"),
    (cli_calls, 'subprocess.run([sys.executable, "-m", "tritnum", "--version"])\n'),
    (cli_calls, "out = tritnum_cli('bench')\n"),
])
def test_the_convention_checks_catch_what_they_name(check, source):
    args = (source, "test_other.py") if check is cli_calls else (source,)
    assert check(*args)


@pytest.mark.parametrize(("check", "source"), [
    (retyped_backend_lists, 'assert calls == ["cpu", "numpy", "cpu"]\n'),  # a result, not a list
    (retyped_backend_lists, '@pytest.mark.parametrize("device", ["cpu"])\n'
                            "def test(device): pass\n"),
    (half_width_floats, "a = hnp.arrays(np.float16, 3, elements=st.floats(width=16))\n"),
    (half_width_floats, "a = hnp.arrays(np.float32, 3, elements=st.floats(width=32))\n"),
    (cli_calls, 'subprocess.run([sys.executable, "-c", "import tritnum"])\n'),
])
def test_the_convention_checks_let_the_rest_be(check, source):
    args = (source, "test_other.py") if check is cli_calls else (source,)
    assert not check(*args)

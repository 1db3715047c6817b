"""Every public name has an entry in the API reference (docs/api/*.rst)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[1] / "docs" / "api"
PUBLIC = ["tritnum", "tritnum.io", "tritnum.vsa", "tritnum.torch", "tritnum.testing",
          "tritnum.errors", "tritnum.typing"]


def _documented() -> set[str]:
    """The full names the reference pages document, read from their directives."""
    names: set[str] = set()
    for page in sorted(API.glob("*.rst")):
        current = ""
        in_summary = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if m := re.match(r"\.\. (?:currentmodule|automodule):: (\S+)", line):
                current = m.group(1)
                if line.startswith(".. automodule"):
                    names.add(current)
                in_summary = False
            elif m := re.match(r"\.\. py:\w+:: (\S+)", line):
                names.add(m.group(1))
            elif line.startswith(".. autosummary::"):
                in_summary = True
            elif in_summary and (m := re.match(r"   ([A-Za-z_][\w.]*)$", line)):
                names.add(f"{current}.{m.group(1)}" if current else m.group(1))
            elif in_summary and line and not line.startswith("   "):
                in_summary = False
    return names


def _resolve(name: str) -> object:
    module, _, attr = name.rpartition(".")
    try:
        return importlib.import_module(name)
    except ImportError:
        return getattr(importlib.import_module(module), attr)


def _public_names() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC
            for name in importlib.import_module(module).__all__]


@pytest.fixture(scope="module")
def documented() -> tuple[set[str], set[int]]:
    names = _documented()
    objects = {id(_resolve(n)) for n in names}
    return names, objects


def test_the_reader_finds_the_entries(documented):
    names, _ = documented
    assert {"tritnum.pack", "tritnum.io.read_gguf", "tritnum.vsa.search",
            "tritnum.torch.BitLinear", "tritnum.io"} <= names
    assert "tritnum.not_a_name" not in names


@pytest.mark.parametrize("full", [f"{m}.{n}" for m, n in _public_names()])
def test_public_name_is_in_the_reference(documented, full):
    names, objects = documented
    module, _, name = full.rpartition(".")
    obj = getattr(importlib.import_module(module), name)
    # a re-export (tritnum.FormatError is tritnum.errors.FormatError) is documented once
    reexport = (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)) \
        and id(obj) in objects
    assert full in names or reexport, f"{full} has no entry in docs/api/*.rst"


def test_every_entry_exists(documented):
    names, _ = documented
    for name in names:
        _resolve(name)  # raises for a name that is not there

"""The developer guide's module map names every module of the package, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tritnum"
MAP = "the module map of docs/developer/architecture.md"


def _map() -> str:
    text = (ROOT / "docs/developer/architecture.md").read_text(encoding="utf-8")
    block = text[text.index("```\ntritnum/", text.index("## The module map")) + 4:]
    return block[:block.index("\n```\n")]


def _modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


@pytest.mark.parametrize("module", _modules(), ids=str)
def test_every_module_is_in_the_map(module):
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _map()))
    assert module.stem in words, f"{module} is missing from {MAP}"
    for folder in module.parts[:-1]:
        assert f"{folder}/" in _map(), f"{folder}/ is missing from {MAP}"


def test_every_folder_in_the_map_exists():
    for folder in re.findall(r"^\s+([A-Za-z_]+)/", _map(), flags=re.M):
        assert list(PACKAGE.rglob(folder)), f"the map names {folder}/, which is not in tritnum/"

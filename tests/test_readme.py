"""The README: at most 150 lines, and its quickstart runs as written in the demo's install."""

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_fits_on_a_screen():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_quickstart_runs(tmp_path, monkeypatch):
    block = re.search(r"## Quickstart\s+```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)  # it writes layer.gguf and layer.npz
    namespace: dict = {}
    exec(compile(block.group(1), "README quickstart", "exec"), namespace)
    assert all((tmp_path / f"layer.{ext}").exists() for ext in ("gguf", "npz"))
    assert namespace["idx"][0] == 0  # apple finds itself first in the memory
    # the comment's figure: the ternary layer's error against the float layer
    assert 0.4 < namespace["err"] < 0.6
    y8, y = namespace["y8"], namespace["y"]
    assert np.abs(y8 - y).max() < 0.05 * np.abs(y).max()


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (README.parent / target).exists(), f"README links to {target}, which is missing"

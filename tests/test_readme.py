"""The README's quickstart runs as written."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_quickstart_runs(tmp_path, monkeypatch):
    block = re.search(r"## Quickstart\s+```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)  # it writes layer.gguf, layer.npz and layer.safetensors
    namespace: dict = {}
    exec(compile(block.group(1), "README quickstart", "exec"), namespace)
    assert all((tmp_path / f"layer.{ext}").exists() for ext in ("gguf", "npz", "safetensors"))
    assert namespace["idx"][0] == 0  # apple finds itself first in the memory

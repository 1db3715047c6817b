"""The README's quickstart and torch example run as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_quickstart_runs(tmp_path, monkeypatch):
    block = re.search(r"## Quickstart\s+```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)  # it writes layer.gguf, layer.npz and layer.safetensors
    namespace: dict = {}
    exec(compile(block.group(1), "README quickstart", "exec"), namespace)
    assert all((tmp_path / f"layer.{ext}").exists() for ext in ("gguf", "npz", "safetensors"))
    assert namespace["idx"][0] == 0  # apple finds itself first in the memory


def test_gguf_section_runs(tmp_path, monkeypatch):
    block = re.search(r"## GGUF models[^\n]*\n+```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block.group(1), "README GGUF section", "exec"), namespace)
    assert (tmp_path / "copy.gguf").read_bytes() == (tmp_path / "model-tq2.gguf").read_bytes()
    assert namespace["model"].metadata["general.file_type"].value == 37
    assert namespace["report"].tensors["blk.0.ffn_up.weight"].nbytes == 512 * 66


def test_torch_example_runs():
    pytest.importorskip("torch")
    block = re.search(r"## Training ternary networks in PyTorch.*?```python\n(.*?)```",
                      README.read_text(), re.S)
    assert block is not None
    namespace: dict = {}
    exec(compile(block.group(1), "README torch example", "exec"), namespace)
    assert set(namespace["tensors"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert type(namespace["model"][0]).__name__ == "BitLinear"
